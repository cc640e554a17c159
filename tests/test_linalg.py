"""The top-k singular triplets agree with a full SVD and never return an unconverged vector."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geodrift.linalg import batched_svd, top_k_svd


def _low_rank_plus_noise(m: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    spectrum = torch.tensor([10.0, 6.0, 4.0, 3.0])
    U, _ = torch.linalg.qr(torch.randn(m, 4, generator=g))
    V, _ = torch.linalg.qr(torch.randn(n, 4, generator=g))
    return (U * spectrum) @ V.T + 0.01 * torch.randn(m, n, generator=g)


@given(st.integers(70, 200), st.integers(70, 200), st.integers(1, 3), st.integers(0, 10_000))
@settings(max_examples=15, deadline=None)
def test_lanczos_triplets_match_full_svd(m, n, k, seed):
    W = _low_rank_plus_noise(m, n, seed)
    fast = top_k_svd(W, k, method="lanczos")
    U, S, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    assert fast.method in ("lanczos", "exact-fallback")
    assert torch.allclose(fast.S.double(), S[:k], rtol=1e-4)
    cos_v = (fast.Vh.double() * Vh[:k]).sum(-1).abs()
    cos_u = (fast.U.double() * U[:, :k]).sum(0).abs()
    assert bool((cos_v > 0.999).all()) and bool((cos_u > 0.999).all())
    assert fast.residual <= 1e-4


def test_frobenius_norm_is_the_full_energy_even_for_top_k():
    W = _low_rank_plus_noise(100, 80, 0)
    t = top_k_svd(W, 2)
    assert abs(t.frobenius_sq - float(W.double().pow(2).sum())) < 1e-6 * t.frobenius_sq
    assert float(t.energy_share.sum()) < 1.0


def test_an_unreachable_tolerance_falls_back_to_the_exact_route():
    W = torch.randn(120, 100, generator=torch.Generator().manual_seed(0))
    t = top_k_svd(W, 3, tol=1e-30, method="lanczos")
    assert t.method == "exact-fallback"
    exact = torch.linalg.svd(W.double(), full_matrices=False)
    assert torch.allclose(t.S.double(), exact.S[:3], rtol=1e-6)


def test_invalid_k_is_rejected():
    with pytest.raises(ValueError):
        top_k_svd(torch.eye(3), 4)
    with pytest.raises(ValueError):
        top_k_svd(torch.ones(2, 2, 2), 1)


def test_batched_svd_reconstructs_each_matrix():
    W = torch.randn(3, 6, 5, generator=torch.Generator().manual_seed(1))
    U, S, Vh = batched_svd(W)
    assert torch.allclose((U * S.unsqueeze(-2)) @ Vh, W, atol=1e-5)
