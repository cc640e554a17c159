"""Every compression method of ``compress share``, built at one ratio from one calibration set.

Baselines (all whitened, each at the same projection-parameter count):

- ``svd-llm``: each projection of each layer truncated alone (SVD-LLM), the same ratio everywhere;
- ``svd-llm-v2``: the same units with SVD-LLM-V2-style uneven ranks (:func:`~geodrift.compress.allocate.v2_ranks`);
- ``basis-sharing``: Q, K, V, Up, Gate share an input-space basis over adjacent groups, O and Down
  private (Basis Sharing's grouping), uniform ratio;
- ``prune-bi`` / ``prune-greedy``: remove ``round(ratio L)`` whole layers (same parameters), chosen by
  Block Influence or by SLEB-style greedy search on calibration text.

Continuity's methods:

- ``theory``: the paper's corollary as stated: Q, K, Gate, Up share input space, O and Down output
  space, V private; adjacent groups, uniform ratio.
- ``geodrift``: its fairest chance. Per projection, layers are grouped by the measured whitened
  subspace overlap at the operating rank (maximum-weight matching, depth not used,
  :mod:`~geodrift.compress.grouping`), in each space; the space (input, output or private) starts
  as the one with the lowest relative whitened loss at the ratio (every layer's loss relative to its
  whitened energy) and is then settled by the calibration NLL: one pass over the projections, each
  trying its other two spaces on a few calibration windows (never the held-out ones) and keeping
  the best; uniform ranks; input-space coefficients refit in closed form
  (:func:`~geodrift.compress.lowrank.refit_coefficients`). Ranks by loss per parameter
  (:func:`~geodrift.compress.allocate.loss_per_parameter_ranks`) were geodrift's first design; on
  the development set (the interleaved split's 8 held-out windows, not the benchmark's evaluation
  text) they lost to uniform ranks (perplexity 133 vs 67 at 20 %), so they are its control.
- ``laco``: the layers ``prune-greedy`` removes, merged into their kept predecessor instead by
  LaCo's Eq. 1 on the seven projections (:mod:`~geodrift.compress.merge`); its note gives the
  merged weights' norm growth (about 1 when adjacent layers share their weights).

Attribution controls, each ``geodrift`` with one choice changed: ``geodrift:random-groups`` (same
spaces, random groups), ``geodrift:swapped`` (input and output exchanged, each with its own matched
groups), ``geodrift:loss-allocation`` (ranks by loss per parameter) and ``geodrift:no-refit``.
``prune-greedy`` is ``laco``'s control.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from geodrift.compress import allocate, grouping
from geodrift.compress.calibrate import INPUT_OF, Moments
from geodrift.compress.factorized import Compressed
from geodrift.compress.lowrank import (
    Unit,
    input_unit,
    output_unit,
    parameters,
    private_unit,
    whitened_energy,
)
from geodrift.compress.merge import merged_parameters, norm_growth
from geodrift.compress.table import (
    ADJACENT,
    LOSS_PER_PARAMETER,
    METHODS,
    RANDOM,
    SWAP,
    SWAPPED,
    UNIFORM,
    V2,
    Method,
)
from geodrift.compress.whiten import Root, square_root
from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from geodrift.weights import TRANSFORMER_ROLES

# The methods, their kinds and every choice that tells them apart are rows of geodrift.compress.table.METHODS.
_ALLOCATE = {UNIFORM: allocate.uniform_ranks, V2: allocate.v2_ranks, LOSS_PER_PARAMETER: allocate.loss_per_parameter_ranks}


@dataclass
class Choice:
    """geodrift's choice for one projection at one ratio, with the evidence.

    Attributes:
        role: projection; space: the space chosen (``input``, ``output`` or ``private``).
        rank: the operating rank (the uniform private rank at the ratio) the overlaps are measured at.
        groups: ``{space: matched groups}``.
        overlap: ``{space: mean overlap within the matched groups}``; floor: ``{space: r / d}``, the
            expectation for random subspaces.
        adjacent: ``{space: fraction of the matched pairs that are neighbours in depth}``;
            ``adjacent_floor``: the same for a random pairing (``2 / L``).
        relative_loss: ``{space: summed relative whitened loss at uniform ranks / layers}``.
        loss_space: the space the relative loss alone chose.
        selection_nll: ``{space: calibration NLL with this projection in that space}`` (the others as
            chosen so far); empty without selection windows.
    """

    role: str
    space: str
    rank: int
    groups: dict[str, list[tuple[int, ...]]]
    overlap: dict[str, float]
    floor: dict[str, float]
    adjacent: dict[str, float]
    adjacent_floor: float
    relative_loss: dict[str, float]
    loss_space: str = ""
    selection_nll: dict[str, float] = field(default_factory=dict)


class Compressor:
    """Builds :class:`~geodrift.compress.factorized.Compressed` configurations of one model from one calibration set.

    Args:
        model: the loaded model (never modified).
        moments: its calibration moments.
        group_size: layers per shared basis.
        orders: ``{method: order}`` for each removal method that owns an order (``Method.order``): layers in
            removal order (as long as the largest ratio needs).
        seed: seed of the random groups.
        select: ``(W, T + 1)`` calibration windows that settle geodrift's spaces (None: the whitened loss alone).
    """

    def __init__(self, model: LlamaLM, moments: Moments, group_size: int = 2,
                 orders: dict[str, list[int]] | None = None, seed: int = 0, select: torch.Tensor | None = None) -> None:
        self.model, self.moments, self.group_size, self.seed, self.select = model, moments, group_size, seed, select
        self.orders = orders or {}
        self.n_layers = len(model.model.layers)
        self.weights = {k: w.detach() for k, w in model.weight_tensors().items()}
        self.energy = {k: whitened_energy(W, moments.of(*k)) for k, W in self.weights.items()}
        self._private: dict[tuple[str, int], Unit] = {}
        self._shared: dict[tuple[str, tuple[int, ...], str, bool], Unit] = {}
        self._roots: dict[str, torch.Tensor] = {}
        self._layer_roots: dict[tuple[str, int], Root] = {}
        self._choices: dict[float, dict[str, Choice]] = {}
        self.fallbacks: set[str] = set()

    # -- units ---------------------------------------------------------------------------------
    def private(self, role: str, layer: int, relative: bool = False) -> Unit:
        """The SVD-LLM unit of one projection (``relative``: its loss divided by its whitened energy)."""
        if (role, layer) not in self._private:
            self._private[(role, layer)] = private_unit(role, layer, self.weights[(role, layer)],
                                                        self.moments.of(role, layer))
        unit = self._private[(role, layer)]
        if not relative:
            return unit
        w = 1.0 / self.energy[(role, layer)]
        return dataclasses.replace(unit, spectrum=unit.spectrum * w, total=unit.total * w)

    def unit(self, role: str, group: tuple[int, ...], space: str, relative: bool = False,
             vectors: bool = True) -> Unit:
        """The unit of ``role`` over ``group`` in ``space`` (a group of one is private).

        ``vectors=False``: the spectrum only (for choosing; not cached, cannot build factors).
        """
        if space == "private" or len(group) == 1:
            return self.private(role, group[0], relative)
        key = (role, tuple(group), space, relative)
        if key in self._shared:
            return self._shared[key]
        Ws = [self.weights[(role, layer)] for layer in group]
        Cs = [self.moments.of(role, layer) for layer in group]
        w = [1.0 / self.energy[(role, layer)] for layer in group] if relative else None
        if space == "input":
            unit = input_unit(role, tuple(group), Ws, Cs, w, vectors=vectors)
        else:
            unit = output_unit(role, tuple(group), Ws, Cs, w, [self.layer_root(role, layer) for layer in group],
                               vectors=vectors)
        if vectors:
            self._shared[key] = unit
        return unit

    def layer_root(self, role: str, layer: int) -> Root:
        """The square root of the moment at ``role``'s input in ``layer`` (cached per input)."""
        key = (INPUT_OF[role], layer)
        if key not in self._layer_roots:
            self._layer_roots[key] = square_root(self.moments.of(role, layer))
        return self._layer_roots[key]

    def units(self, spaces: dict[str, str], groups: dict[str, list[tuple[int, ...]]], relative: bool) -> list[Unit]:
        """Units of every role: ``spaces[role]`` over ``groups[role]`` (private: one unit per layer)."""
        return [u for role in TRANSFORMER_ROLES for u in self._role_units(role, spaces[role], groups.get(role, []),
                                                                          relative)]

    def whitening(self) -> list[str]:
        """Every moment root that was not a Cholesky factor (the eigen fallback), named: ``role layers: method``."""
        units = list(self._private.values()) + list(self._shared.values())
        return sorted(self.fallbacks | {f"{u.role} layers {'-'.join(map(str, u.layers))}: {u.whitening}"
                                        for u in units if u.whitening.startswith("eigen")})

    def _root(self, kind: str) -> torch.Tensor:
        if kind not in self._roots:
            reader = next(r for r, k in INPUT_OF.items() if k == kind)
            mean = torch.stack([self.moments.of(reader, layer) for layer in range(self.n_layers)]).mean(0)
            root = square_root(mean)
            if root.fallback:
                self.fallbacks.add(f"{kind} mean moment: {root.method}")
            self._roots[kind] = root.S
        return self._roots[kind]

    # -- geodrift's choices ---------------------------------------------------------------------
    def choices(self, ratio: float) -> dict[str, Choice]:
        """geodrift's groups and space per projection at ``ratio`` (cached)."""
        if ratio in self._choices:
            return self._choices[ratio]
        out = {}
        for role in TRANSFORMER_ROLES:
            privates = [self.private(role, layer) for layer in range(self.n_layers)]
            r = allocate.uniform_ranks(privates[:1], ratio)[0]
            groups, overlap, floor, adjacent = {}, {}, {}, {}
            for space in ("input", "output"):
                root = self._root(INPUT_OF[role]) if space == "input" else None
                bases = [grouping.subspace(u, space, r, root) for u in privates]
                O = grouping.overlaps(bases)
                groups[space] = grouping.matched_groups(O, self.group_size)
                pairs = [(a, b) for g in groups[space] for i, a in enumerate(g) for b in g[i + 1:]]
                overlap[space] = float(sum(float(O[a, b]) for a, b in pairs) / max(len(pairs), 1))
                floor[space] = r / bases[0].shape[0]
                adjacent[space] = sum(abs(a - b) == 1 for a, b in pairs) / max(len(pairs), 1)
            loss = {}
            for space in ("private", "input", "output"):
                # With selection windows every space's units are built in full by _settle anyway: build them
                # once here (cached) rather than their spectra now and again with vectors there.
                units = self._role_units(role, space, groups.get(space, []), relative=True,
                                         vectors=self.select is not None)
                ranks = allocate.uniform_ranks(units, ratio)
                loss[space] = sum(u.loss(k) for u, k in zip(units, ranks, strict=True)) / self.n_layers
            best = min(loss, key=loss.__getitem__)
            out[role] = Choice(role, best, r, groups, overlap, floor, adjacent, 2.0 / self.n_layers, loss, best)
        if self.select is not None:
            self._settle(out, ratio)
        self._choices[ratio] = out
        return out

    def _settle(self, choices: dict[str, Choice], ratio: float) -> None:
        # One coordinate pass: each projection tries its other spaces; the calibration NLL decides.
        from geodrift.compress.evaluate import heldout_nll
        from geodrift.compress.factorized import applied

        windows = self.select
        assert windows is not None

        def nll(spaces: dict[str, str]) -> float:
            groups = {role: c.groups.get(spaces[role], []) for role, c in choices.items()}
            units = self.units(spaces, groups, relative=True)
            config = self._lowrank("selection", ratio, units, allocate.uniform_ranks(units, ratio), refit=True)
            with applied(self.model, config):
                return float(heldout_nll(self.model, windows).mean())

        spaces = {role: c.space for role, c in choices.items()}
        current = nll(spaces)
        for role in TRANSFORMER_ROLES:
            tried = {spaces[role]: current}
            for alt in ("private", "input", "output"):
                if alt not in tried:
                    tried[alt] = nll({**spaces, role: alt})
            spaces[role] = min(tried, key=tried.__getitem__)
            current = tried[spaces[role]]
            choices[role].space, choices[role].selection_nll = spaces[role], tried

    def _role_units(self, role: str, space: str, groups: list[tuple[int, ...]], relative: bool,
                    vectors: bool = True) -> list[Unit]:
        if space == "private":
            return [self.private(role, layer, relative) for layer in range(self.n_layers)]
        return [self.unit(role, g, space, relative, vectors) for g in groups]

    # -- methods -------------------------------------------------------------------------------
    def build(self, method: str, ratio: float) -> Compressed:
        """The ``method``'s compressed configuration at ``ratio``, built as its row of
        :data:`~geodrift.compress.table.METHODS` says (see the module docstring).

        Raises:
            GeodriftError: for an unknown method, or a ratio leaving less than rank 1.
        """
        spec = METHODS.get(method)
        if spec is None:
            raise GeodriftError(f"--methods: unknown method {method!r}; choose from {', '.join(METHODS)}")
        if spec.order is not None:
            return self._removal(method, spec, ratio)
        if spec.measured:
            choice = self.choices(ratio)
            spaces = {role: c.space for role, c in choice.items()}
            if spec.spaces == SWAPPED:
                spaces = {role: SWAP[s] for role, s in spaces.items()}
            groups = {role: choice[role].groups.get(spaces[role], []) for role in spaces}
        else:
            assert isinstance(spec.spaces, Mapping)
            spaces = dict(spec.spaces)
            adjacent = grouping.adjacent_groups(self.n_layers, self.group_size)
            groups = {r: adjacent for r in TRANSFORMER_ROLES} if spec.groups == ADJACENT else {}
        if spec.groups == RANDOM:
            groups = {role: grouping.random_groups(self.n_layers, self.group_size, self.seed * 1009 + i)
                      for i, role in enumerate(TRANSFORMER_ROLES)}
        units = self.units(spaces, groups, relative=spec.relative)
        out = self._lowrank(method, ratio, units, _ALLOCATE[spec.allocation](units, ratio), refit=spec.refit)
        if spec.measured:
            out.notes.append("spaces " + ", ".join(f"{role} {s}" for role, s in spaces.items()))
        return out

    def _lowrank(self, method: str, ratio: float, units: list[Unit], ranks: list[int], refit: bool) -> Compressed:
        out = Compressed(method, ratio)
        for u, r in zip(units, ranks, strict=True):
            moments = [self.moments.of(u.role, layer) for layer in u.layers] if refit and u.space == "input" else None
            for layer, pair in u.factors(r, moments).items():
                out.factors[(u.role, layer)] = pair
            out.kept_params += parameters(u.space, u.shape, len(u.layers), min(r, u.max_rank))
            out.dense_params += u.dense_parameters()
        return out

    def removal_count(self, ratio: float) -> int:
        """Whole layers removed at ``ratio``: ``round(ratio L)`` (the same projection parameters)."""
        return max(1, min(self.n_layers - 1, round(ratio * self.n_layers)))

    def _removal(self, method: str, spec: Method, ratio: float) -> Compressed:
        assert spec.order is not None
        order = self.orders.get(spec.order)
        n = self.removal_count(ratio)
        if order is None or len(order) < n:
            raise GeodriftError(f"{method}: no removal order of {n} layers was computed")
        removed = tuple(sorted(order[:n]))
        per_layer = sum(W.numel() for (role, layer), W in self.weights.items() if layer == 0)
        out = Compressed(method, ratio, removed=removed, kept_params=(self.n_layers - n) * per_layer,
                         dense_params=self.n_layers * per_layer)
        if spec.merge:
            out.replaced = merged_parameters(self.model, removed)
            out.notes.append(f"merged projections' Frobenius norm / the kept layer's own: "
                             f"{norm_growth(self.model, removed):.2f} on average (1 when the merged layers share "
                             "its weights, sqrt(m^2 - m + 1) for m unrelated ones)")
        return out
