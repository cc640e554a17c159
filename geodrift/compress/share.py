"""``geodrift compress share``: which space should a basis shared by adjacent layers live in?

For a group G of g adjacent layers and one projection with weights ``W_l (d_out, d_in)``:

- **input space** (``v``): ``B (d_in, r)`` = top-r right singular vectors of the group's weights
  stacked along the output dimension ``[W_1; ...; W_g] (g d_out, d_in)``; ``W_l ~ C_l B^T`` with
  ``C_l = W_l B (d_out, r)``. Parameters ``r (d_in + g d_out)`` per group.
- **output space** (``u``): ``B (d_out, r)`` = top-r left singular vectors of ``[W_1, ..., W_g]
  (d_out, g d_in)``; ``W_l ~ B C_l`` with ``C_l = B^T W_l (r, d_in)``. Parameters ``r (d_out + g d_in)``.
- **private**: each layer's own truncated SVD, ``r (d_in + d_out)`` per layer.

Budgets are per projection: at compression ratio rho every projection keeps at most
``(1 - rho) g d_out d_in`` parameters per group (B counted once, every C_l counted), so every policy
holds the same parameter count up to rank rounding (the achieved counts are reported). Bases are
computed once per (projection, group, space) at the largest rank any requested ratio needs; the
lower ranks are their leading columns. Data-free (no calibration whitening: not implemented).

Policies (space per projection): ``theory`` (Q, K, Gate, Up input; O, Down output; V private),
``swapped`` (Q, K, Gate, Up output; O, Down input; V private), ``basis-sharing`` (Q, K, V, Up,
Gate input; O, Down private - the published Basis Sharing choice), ``all-input``, and ``svd``
(every projection private: per-layer truncated SVD at the same budget).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from geodrift.weights import TRANSFORMER_ROLES

SPACES = ("input", "output", "private")
_THEORY = {"attn_q": "input", "attn_k": "input", "mlp_gate": "input", "mlp_up": "input",
           "attn_o": "output", "mlp_down": "output", "attn_v": "private"}
_SWAP = {"input": "output", "output": "input", "private": "private"}
POLICIES: dict[str, dict[str, str]] = {
    "theory": dict(_THEORY),
    "swapped": {role: _SWAP[s] for role, s in _THEORY.items()},
    "basis-sharing": {**{r: "input" for r in ("attn_q", "attn_k", "attn_v", "mlp_up", "mlp_gate")},
                      "attn_o": "private", "mlp_down": "private"},
    "all-input": {role: "input" for role in TRANSFORMER_ROLES},
    "svd": {role: "private" for role in TRANSFORMER_ROLES},
}


def groups_of(n_layers: int, g: int) -> list[list[int]]:
    """Consecutive layer groups ``[0..g-1], [g..2g-1], ...`` (the last may be shorter)."""
    return [list(range(s, min(s + g, n_layers))) for s in range(0, n_layers, g)]


def rank_for(space: str, shape: tuple[int, int], size: int, ratio: float) -> int:
    """The largest rank whose parameters fit ``(1 - ratio) * size * d_out * d_in`` for a group of ``size``.

    Raises:
        GeodriftError: when even rank 1 does not fit (ratio too close to 1).
    """
    d_out, d_in = shape
    budget = (1.0 - ratio) * size * d_out * d_in
    per_rank = {"input": d_in + size * d_out, "output": d_out + size * d_in, "private": size * (d_in + d_out)}[space]
    r = min(int(budget // per_rank), d_in if space == "input" else d_out if space == "output" else min(shape))
    if r < 1:
        raise GeodriftError(f"--ratios {ratio}: leaves less than rank 1 for {shape[0]}x{shape[1]} matrices; "
                            "use a smaller ratio")
    return r


def parameters(space: str, shape: tuple[int, int], size: int, r: int) -> int:
    """Parameters of a group of ``size`` layers factored at rank ``r`` in ``space``."""
    d_out, d_in = shape
    return {"input": r * (d_in + size * d_out), "output": r * (d_out + size * d_in),
            "private": size * r * (d_in + d_out)}[space]


class Bases:
    """Orthonormal bases per (projection, group, space), computed once at the largest rank needed.

    Args:
        weights: ``{(role, layer): W (d_out, d_in)}`` original weights (not modified).
        groups: layer groups.
        max_ranks: ``{(role, space, group index): r_max}``: which bases to compute and how many columns.
    """

    def __init__(self, weights: dict[tuple[str, int], torch.Tensor], groups: list[list[int]],
                 max_ranks: dict[tuple[str, str, int], int]) -> None:
        self.weights, self.groups = weights, groups
        self._bases: dict[tuple[str, str, int], list[torch.Tensor]] = {}
        for (role, space, gi), r in max_ranks.items():
            mats = [weights[(role, layer)].double() for layer in groups[gi]]
            if space == "input":
                _, _, vh = torch.linalg.svd(torch.cat(mats, 0), full_matrices=False)
                self._bases[(role, space, gi)] = [vh[:r].T.float().contiguous()]  # (d_in, r)
            elif space == "output":
                u, _, _ = torch.linalg.svd(torch.cat(mats, 1), full_matrices=False)
                self._bases[(role, space, gi)] = [u[:, :r].float().contiguous()]  # (d_out, r)
            else:
                # Private: each layer's own top-r right singular vectors; W V V^T is its truncated SVD.
                self._bases[(role, space, gi)] = [torch.linalg.svd(m, full_matrices=False)[2][:r].T.float().contiguous()
                                                  for m in mats]

    def approximation(self, role: str, space: str, gi: int, r: int) -> dict[int, torch.Tensor]:
        """``{layer: W_l approximated at rank r}`` for group ``gi``."""
        out = {}
        for j, layer in enumerate(self.groups[gi]):
            W = self.weights[(role, layer)]
            if space == "input":
                B = self._bases[(role, space, gi)][0][:, :r]
                out[layer] = (W @ B) @ B.T
            elif space == "output":
                B = self._bases[(role, space, gi)][0][:, :r]
                out[layer] = B @ (B.T @ W)
            else:
                B = self._bases[(role, space, gi)][j][:, :r]
                out[layer] = (W @ B) @ B.T
        return out


@contextmanager
def swapped_weights(model: LlamaLM, new: dict[tuple[str, int], torch.Tensor]) -> Iterator[None]:
    """Put ``new`` weights into the model's projections, and the originals back on exit (no model copy)."""
    saved = {key: model.projection(*key).weight.data for key in new}
    try:
        for key, W in new.items():
            model.projection(*key).weight.data = W
        yield
    finally:
        for key, W in saved.items():
            model.projection(*key).weight.data = W


@dataclass(frozen=True)
class Assignment:
    """One compressed configuration: the space of each compressed projection (others stay dense)."""

    name: str
    spaces: dict[str, str]

    def needs(self, shapes: dict[str, tuple[int, int]], groups: list[list[int]], ratio: float
              ) -> dict[tuple[str, str, int], int]:
        """The rank each (role, space, group) needs at ``ratio``."""
        return {(role, space, gi): rank_for(space, shapes[role], len(group), ratio)
                for role, space in self.spaces.items() for gi, group in enumerate(groups)}

    def weights(self, bases: Bases, shapes: dict[str, tuple[int, int]], ratio: float
                ) -> tuple[dict[tuple[str, int], torch.Tensor], int, int]:
        """``(approximated weights, parameters kept, dense parameters)`` of the compressed projections."""
        new: dict[tuple[str, int], torch.Tensor] = {}
        kept = dense = 0
        for role, space in self.spaces.items():
            for gi, group in enumerate(bases.groups):
                r = rank_for(space, shapes[role], len(group), ratio)
                for layer, W in bases.approximation(role, space, gi, r).items():
                    new[(role, layer)] = W
                kept += parameters(space, shapes[role], len(group), r)
                dense += len(group) * shapes[role][0] * shapes[role][1]
        return new, kept, dense
