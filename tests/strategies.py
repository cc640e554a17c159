"""Shared Hypothesis strategies: every argument is a strategy, every value is built from drawn entries.

Values come from ``hypothesis.extra.numpy`` arrays (float64, converted to torch), so a failing
example shrinks entry by entry towards zeros and small shapes, not towards "seed 0". Orthogonal
matrices are ``matrix_exp`` of a drawn skew-symmetric matrix (exactly orthogonal in float64; they
shrink towards the identity), optionally times a reflection.
"""

from __future__ import annotations

import os
from typing import Any

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import torch
from hypothesis import settings

DIMS = st.integers(min_value=2, max_value=12)
# A test's own example budget grows by this factor under the `thorough` profile (tests/conftest.py).
THOROUGH_FACTOR = 40


def examples(max_examples: int, **options: Any) -> settings:
    """``@settings(max_examples=..., **options)`` for a test with a budget of its own (an expensive example),
    multiplied by :data:`THOROUGH_FACTOR` under ``GEODRIFT_HYPOTHESIS=thorough``."""
    scale = THOROUGH_FACTOR if os.environ.get("GEODRIFT_HYPOTHESIS") == "thorough" else 1
    return settings(max_examples=max_examples * scale, **options)
ENTRIES = st.floats(min_value=-4.0, max_value=4.0, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def arrays(shape: st.SearchStrategy[tuple[int, ...]],
           elements: st.SearchStrategy[float] = ENTRIES) -> st.SearchStrategy[torch.Tensor]:
    """float64 torch tensors of a drawn shape, entries drawn one by one."""
    return shape.flatmap(lambda s: hnp.arrays(np.float64, s, elements=elements)).map(torch.from_numpy)


def matrices(rows: st.SearchStrategy[int] = DIMS, cols: st.SearchStrategy[int] = DIMS,
             elements: st.SearchStrategy[float] = ENTRIES) -> st.SearchStrategy[torch.Tensor]:
    """``(rows, cols)`` float64 matrices."""
    return arrays(st.tuples(rows, cols), elements)


def vector_stacks(layers: st.SearchStrategy[int] = st.integers(2, 6), k: st.SearchStrategy[int] = st.integers(1, 4),
                  dim: st.SearchStrategy[int] = st.integers(2, 16)) -> st.SearchStrategy[torch.Tensor]:
    """``(L, K, d)`` stacks of vectors, each row of norm at least 0.1 (continuity of a zero vector is undefined)."""
    return arrays(st.tuples(layers, k, dim)).filter(lambda t: bool((t.norm(dim=-1) >= 0.1).all()))


def skew_matrices(n: st.SearchStrategy[int] = DIMS, scale: float = 2.0) -> st.SearchStrategy[torch.Tensor]:
    """``A - A^T`` for a drawn ``(n, n)`` matrix A with entries in ``[-scale, scale]``."""
    entries = st.floats(min_value=-scale, max_value=scale, allow_nan=False, allow_subnormal=False)
    return n.flatmap(lambda d: arrays(st.just((d, d)), entries)).map(lambda a: a - a.T)


def orthogonal_matrices(n: st.SearchStrategy[int] = DIMS, reflections: bool = True) -> st.SearchStrategy[torch.Tensor]:
    """``(n, n)`` orthogonal matrices: ``exp(A - A^T)``, times ``diag(-1, 1, ..)`` when a drawn flag says so."""

    def build(skew: torch.Tensor, reflect: bool) -> torch.Tensor:
        r = torch.linalg.matrix_exp(skew)
        if reflect:
            r = r.clone()
            r[0] = -r[0]
        return r

    return st.tuples(skew_matrices(n), st.booleans() if reflections else st.just(False)).map(lambda t: build(*t))


def low_rank_matrices(rank: st.SearchStrategy[int] = st.integers(1, 3), rows: st.SearchStrategy[int] = DIMS,
                      cols: st.SearchStrategy[int] = DIMS) -> st.SearchStrategy[torch.Tensor]:
    """``(rows, cols)`` matrices of rank at most ``rank``: a drawn ``(rows, k) @ (k, cols)`` product."""

    def product(shape: tuple[int, int, int]) -> st.SearchStrategy[torch.Tensor]:
        r, k, c = shape
        return st.tuples(arrays(st.just((r, k))), arrays(st.just((k, c)))).map(lambda ab: ab[0] @ ab[1])

    return st.tuples(rows, rank, cols).flatmap(product)


def json_like(numbers: st.SearchStrategy[float] = st.floats(allow_nan=True, allow_infinity=True),
              max_leaves: int = 20) -> st.SearchStrategy[object]:
    """Nested dicts/lists of numbers (NaN and +-inf included by default), ints, short strings and None:
    what a report's ``to_dict`` can hold."""
    leaves = numbers | st.integers() | st.text(max_size=3) | st.none()
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=3), inner, max_size=4), max_leaves=max_leaves)


def gauge_draws(max_condition: float = 100.0, max_sigma: float = 1.0) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments of :func:`geodrift.gauge.orbit.random_gauge` besides the state dict and shape: a seed
    (``seed``, for its ``torch.Generator``), a V/O condition number in ``[1, max_condition]``, a log-scale
    spread in ``[0, max_sigma]`` and a non-empty subset of the generators (shrinks towards a single one)."""
    from geodrift.gauge.orbit import GENERATORS

    return st.fixed_dictionaries({
        "seed": st.integers(0, 2**31 - 1),
        "condition": st.floats(1.0, max_condition, allow_nan=False),
        "sigma": st.floats(0.0, max_sigma, allow_nan=False),
        "generators": st.sets(st.sampled_from(GENERATORS), min_size=1).map(lambda s: tuple(sorted(s))),
    })
