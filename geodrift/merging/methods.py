"""The merge rules, tensor by tensor, on state dicts that share every name and shape.

Every rule sees the models in one frame (the caller aligns them first where they are not) and works in
float64. ``models`` are the inputs ``A, B, ...``; ``base`` is ``--base`` (None where the rule needs none);
``weights`` one number per input.

- ``linear``: ``sum_i w_i theta_i / sum_i w_i`` (model soups; mergekit's ``linear`` normalises the same way);
- ``slerp``: two endpoints (``A, B``, or ``--base`` and ``A``), per tensor the spherical interpolation at ``t``
  of the flattened tensors (the angle from their normalised copies, a straight line where they are
  nearly parallel, as mergekit's ``slerp``);
- ``task-arithmetic``: ``base + lambda * sum_i w_i (theta_i - base)`` (Ilharco et al. 2023);
- ``ties``: each task vector trimmed to its largest ``density`` share of entries by magnitude (per tensor),
  the sign of each entry elected by the weighted sum, the disjoint mean of the entries that agree with it,
  ``base + lambda *`` that (Yadav et al. 2023);
- ``dare``: each task vector's entries dropped with probability ``1 - density`` and the rest divided by
  ``density`` (Yu et al. 2024), then summed as task arithmetic (mergekit's ``dare_linear``); the masks are
  drawn from ``seed``.

Example:
    >>> a, b = {"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 1.0])}
    >>> merge_tensors("linear", [a, b])["w"].tolist()
    [0.5, 0.5]
    >>> [round(x, 4) for x in merge_tensors("slerp", [a, b])["w"].tolist()]
    [0.7071, 0.7071]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from geodrift.errors import GeodriftError
from geodrift.merging.names import METHODS, NEEDS_BASE

StateDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class MergeSettings:
    """The numbers a rule takes (each rule reads only its own).

    Attributes:
        weights: one per input (None: 1 each; ``linear`` normalises them to sum 1).
        t: ``slerp``'s position from the first endpoint to the second.
        density: the share of each task vector kept by ``ties`` (by magnitude) and ``dare`` (at random).
        scale: ``lambda``, the factor on the merged task vector (task-arithmetic, ties, dare).
        seed: ``dare``'s masks.
    """

    weights: tuple[float, ...] | None = None
    t: float = 0.5
    density: float = 0.5
    scale: float = 1.0
    seed: int = 0

    def check(self, method: str, n_models: int) -> None:
        """Refuse numbers outside their ranges, naming the option.

        Raises:
            GeodriftError: e.g. ``--density: 0 is outside (0, 1]``.

        Example:
            >>> MergeSettings(t=1.5).check("slerp", 2)
            Traceback (most recent call last):
            geodrift.errors.GeodriftError: --t: 1.5 is outside [0, 1]; slerp's position from the first model to the second
        """
        if method not in METHODS:
            raise GeodriftError(f"--method: {method!r} is not a merge method; use one of {', '.join(METHODS)}")
        if self.weights is not None:
            if len(self.weights) != n_models:
                raise GeodriftError(f"--weights: {len(self.weights)} weight(s) for {n_models} model(s); give one per "
                                    "model (the models after --base, in order)")
            if not all(math.isfinite(w) for w in self.weights) or (method == "linear" and sum(self.weights) <= 0):
                raise GeodriftError(f"--weights: {list(self.weights)} must be finite numbers"
                                    + (" with a positive sum" if method == "linear" else ""))
        if not 0.0 <= self.t <= 1.0:
            raise GeodriftError(f"--t: {self.t:g} is outside [0, 1]; slerp's position from the first model to the second")
        if not 0.0 < self.density <= 1.0:
            raise GeodriftError(f"--density: {self.density:g} is outside (0, 1]; the share of each task vector kept")
        if not math.isfinite(self.scale):
            raise GeodriftError(f"--scale: {self.scale} must be a finite number")


def merge_tensors(method: str, models: Sequence[StateDict], base: StateDict | None = None,
                  settings: MergeSettings | None = None, dtype: torch.dtype = torch.float64) -> StateDict:
    """Merge ``models`` (and ``base``) tensor by tensor with ``method`` (computed in float64, stored as ``dtype``).

    Args:
        method: one of :data:`METHODS`.
        models: the inputs' state dicts (one frame, the same names and shapes).
        base: the base's state dict (needed by :data:`NEEDS_BASE`; ``slerp``'s first endpoint when given).
        settings: the rule's numbers (default :class:`MergeSettings()`).
        dtype: the merged tensors' dtype.

    Returns:
        The merged state dict.

    Raises:
        GeodriftError: an unknown method, a missing base, the wrong number of models for slerp, bad settings.
    """
    settings = settings or MergeSettings()
    settings.check(method, len(models))
    if method in NEEDS_BASE and base is None:
        raise GeodriftError(f"--base: --method {method} adds task vectors (each model minus the base) and needs the "
                            "base model they were fine-tuned from; pass --base BASE")
    ends = ([base] if base is not None else []) + list(models)
    if method == "slerp" and len(ends) != 2:
        raise GeodriftError(f"--method slerp: interpolates between exactly two models, got {len(ends)} (with --base "
                            "counted); pass two models, or --base and one")
    weights = list(settings.weights) if settings.weights is not None else [1.0] * len(models)
    generator = torch.Generator().manual_seed(settings.seed)
    out: StateDict = {}
    for name in ends[0]:
        xs = [m[name].double() for m in models]
        if method == "linear":
            out[name] = (sum((w * x for w, x in zip(weights, xs, strict=True)), torch.zeros_like(xs[0]))
                         / sum(weights)).to(dtype)
        elif method == "slerp":
            out[name] = slerp(ends[0][name].double(), ends[1][name].double(), settings.t).to(dtype)
        else:
            assert base is not None
            b = base[name].double()
            deltas = [x - b for x in xs]
            if method == "ties":
                merged = ties_merge(deltas, weights, settings.density)
            else:
                if method == "dare":
                    deltas = [dare_drop(d, settings.density, generator) for d in deltas]
                merged = sum((w * d for w, d in zip(weights, deltas, strict=True)), torch.zeros_like(b))
            out[name] = (b + settings.scale * merged).to(dtype)
    return out


def slerp(a: torch.Tensor, b: torch.Tensor, t: float, eps: float = 1e-8) -> torch.Tensor:
    """Spherical interpolation of two tensors of one shape, by the angle between them (flattened).

    Example:
        >>> slerp(torch.tensor([1.0, 0.0]), torch.tensor([2.0, 0.0]), 0.5).tolist()
        [1.5, 0.0]
    """
    na, nb = float(a.norm()), float(b.norm())
    if na < eps or nb < eps:
        return (1 - t) * a + t * b
    cos = float((a.flatten() @ b.flatten()) / (na * nb))
    if abs(cos) > 1 - 1e-6:  # (anti)parallel: the arc is the line
        return (1 - t) * a + t * b
    theta = math.acos(max(-1.0, min(1.0, cos)))
    return (math.sin((1 - t) * theta) * a + math.sin(t * theta) * b) / math.sin(theta)


def trim(delta: torch.Tensor, density: float) -> torch.Tensor:
    """``delta`` with all but its ``density`` share of entries of largest magnitude set to 0 (TIES's trim).

    Example:
        >>> trim(torch.tensor([0.1, -3.0, 2.0, 0.2]), 0.5).tolist()
        [0.0, -3.0, 2.0, 0.0]
    """
    keep = max(1, int(round(density * delta.numel())))
    if keep >= delta.numel():
        return delta
    flat = delta.abs().flatten()
    threshold = torch.topk(flat, keep, sorted=False).values.min()
    return torch.where(delta.abs() >= threshold, delta, torch.zeros_like(delta))


def ties_merge(deltas: Sequence[torch.Tensor], weights: Sequence[float], density: float) -> torch.Tensor:
    """TIES: trim each task vector, elect each entry's sign by the weighted sum, average those that agree.

    Example:
        >>> ties_merge([torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])], [1.0, 1.0], 1.0).tolist()
        [2.0, 2.0]
    """
    trimmed = [w * trim(d, density) for d, w in zip(deltas, weights, strict=True)]
    stacked = torch.stack(trimmed)
    sign = torch.sign(stacked.sum(dim=0))
    agree = (torch.sign(stacked) == sign) & (stacked != 0)
    counts = torch.stack([torch.full_like(d, abs(w)) for d, w in zip(deltas, weights, strict=True)])
    total = (counts * agree).sum(dim=0)
    return torch.where(total > 0, (stacked * agree).sum(dim=0) / total.clamp_min(1e-300), torch.zeros_like(sign))


def dare_drop(delta: torch.Tensor, density: float, generator: torch.Generator) -> torch.Tensor:
    """DARE: each entry kept with probability ``density`` and divided by it (its expectation unchanged).

    Example:
        >>> dare_drop(torch.ones(4), 1.0, torch.Generator()).tolist()
        [1.0, 1.0, 1.0, 1.0]
    """
    if density >= 1.0:
        return delta
    keep = torch.rand(delta.shape, generator=generator, dtype=torch.float64) < density
    return torch.where(keep, delta / density, torch.zeros_like(delta))
