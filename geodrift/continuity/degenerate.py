"""Zero and rank-deficient matrices: which singular vectors are undefined, and how that is reported.

A singular vector is defined only up to sign when its singular value is positive and separated
from zero; for ``s_j = 0`` any unit vector of the null space is "a" singular vector, and LAPACK
returns whichever its algorithm reaches (the identity's columns for an all-zero matrix - which
would make a stack of zero matrices look perfectly continuous, |cos| = 1.000). geodrift therefore
treats ``v_j``/``u_j`` of a layer as undefined when ``s_j <= max(m, n) * eps32 * s_1`` (or
``s_1 = 0``): every adjacent pair touching it is reported as NaN (``null`` in JSON, empty in CSV,
listed under ``nonfinite``), means and medians are taken over the defined pairs, and the report
carries a note naming the role and layers.
"""

from __future__ import annotations

import torch

# float32 machine epsilon: the SVDs are returned in float32.
_EPS32 = 1.1920929e-07


def undefined_vectors(sigma: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """Which singular vectors are undefined: ``(L, K)`` bool from ``(L, K)`` singular values.

    Example:
        >>> undefined_vectors(torch.tensor([[2.0, 0.0], [0.0, 0.0]]), (3, 3)).tolist()
        [[False, True], [True, True]]
    """
    s = sigma.double()
    top = s[:, :1]
    return (s <= max(shape) * _EPS32 * top) | (top <= 0)


def undefined_pairs(undefined: torch.Tensor) -> torch.Tensor:
    """``(L-1, K)``: an adjacent pair is undefined when either layer's vector is."""
    return undefined[:-1] | undefined[1:]


def masked(values: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """``values (..., L-1, k)`` with the undefined pairs ``(L-1, >= k)`` set to NaN (a copy)."""
    out = values.clone()
    out[..., pairs[:, : values.shape[-1]]] = float("nan")
    return out


def zero_layer_pairs(sigma: torch.Tensor) -> torch.Tensor:
    """``(L-1,)``: pairs with an all-zero matrix on either side (Eq. 2 and the subspace overlap are undefined)."""
    zero = sigma.double()[:, 0] <= 0
    return zero[:-1] | zero[1:]


def note(role: str, layers: list[int], undefined: torch.Tensor, k: int) -> str | None:
    """The report note for a role with undefined vectors, or None when every vector is defined."""
    zero = [layers[i] for i in range(len(layers)) if bool(undefined[i].all())]
    deficient = [layers[i] for i in range(len(layers)) if bool(undefined[i, :k].any()) and layers[i] not in zero]
    parts = []
    if zero:
        parts.append(f"all-zero matrices in layer(s) {zero}")
    if deficient:
        parts.append(f"rank below k = {k} in layer(s) {deficient}")
    if not parts:
        return None
    return (f"{role}: {' and '.join(parts)}; their singular vectors are undefined, so every adjacent pair "
            "touching them is reported as null and left out of the means")
