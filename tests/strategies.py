"""Shared hypothesis strategies (generic; import from any test module).

All strategies yield float64 torch tensors. Random matrices are drawn from a hypothesis-chosen
seed through a torch.Generator (fast, reproducible, shrinks towards seed 0 and small shapes).
"""

from __future__ import annotations

import hypothesis.strategies as st
import torch

from geodrift.symmetry_numeric import orthogonal_qr, rotation_expm

DIMS = st.integers(min_value=2, max_value=24)
SEEDS = st.integers(min_value=0, max_value=2**31 - 1)


def _as_strategy(value: int | st.SearchStrategy[int] | None) -> st.SearchStrategy[int]:
    if value is None:
        return DIMS
    return value if isinstance(value, st.SearchStrategy) else st.just(value)


@st.composite
def matrices(draw: st.DrawFn, rows: int | st.SearchStrategy[int] | None = None,
             cols: int | st.SearchStrategy[int] | None = None, scale: float = 1.0) -> torch.Tensor:
    """A Gaussian (rows, cols) matrix times ``scale`` (rows, cols default to 2..24)."""
    r, c = draw(_as_strategy(rows)), draw(_as_strategy(cols))
    gen = torch.Generator().manual_seed(draw(SEEDS))
    return torch.randn(r, c, generator=gen, dtype=torch.float64) * scale


@st.composite
def orthogonal_matrices(draw: st.DrawFn, n: int | st.SearchStrategy[int] | None = None) -> torch.Tensor:
    """A random (n, n) orthogonal matrix: Haar via QR (may be a reflection) or exp of a skew matrix."""
    d = draw(_as_strategy(n))
    gen = torch.Generator().manual_seed(draw(SEEDS))
    if draw(st.booleans()):
        return orthogonal_qr(d, gen)
    return rotation_expm(d, gen, scale=draw(st.floats(min_value=0.01, max_value=3.0)))


@st.composite
def low_rank_matrices(draw: st.DrawFn, rank: int | st.SearchStrategy[int] = 1,
                      rows: int | st.SearchStrategy[int] | None = None,
                      cols: int | st.SearchStrategy[int] | None = None) -> torch.Tensor:
    """A (rows, cols) matrix of rank exactly ``rank`` almost surely: (rows, k) @ (k, cols) Gaussians."""
    k = draw(_as_strategy(rank))
    r = draw(_as_strategy(rows).filter(lambda v: v >= k))
    c = draw(_as_strategy(cols).filter(lambda v: v >= k))
    gen = torch.Generator().manual_seed(draw(SEEDS))
    return torch.randn(r, k, generator=gen, dtype=torch.float64) @ torch.randn(k, c, generator=gen, dtype=torch.float64)
