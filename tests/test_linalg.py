"""The top-k singular triplets agree with a full SVD and never return an unconverged vector."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import arrays, examples

from geodrift.linalg import MatrixProduct, batched_svd_triplets, top_k_svd, top_k_svd_of_product


def _low_rank_plus_noise(m: int, n: int, seed: int, spectrum: torch.Tensor | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    spectrum = torch.tensor([10.0, 6.0, 4.0, 3.0]) if spectrum is None else spectrum
    U, _ = torch.linalg.qr(torch.randn(m, 4, generator=g))
    V, _ = torch.linalg.qr(torch.randn(n, 4, generator=g))
    return (U * spectrum) @ V.T + 0.01 * torch.randn(m, n, generator=g)


@given(st.integers(70, 200), st.integers(70, 200), st.integers(1, 3), arrays(st.just((4,)), st.floats(0.5, 10.0)))
@examples(15, deadline=None)
def test_lanczos_triplets_match_full_svd(m, n, k, spectrum):
    # The bases are a fixed draw; the property quantifies over the spectrum (gaps can be small).
    W = _low_rank_plus_noise(m, n, 0, spectrum.float().sort(descending=True).values)
    fast = top_k_svd(W, k, method="lanczos")
    U, S, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    assert fast.method in ("lanczos", "exact-fallback")
    assert torch.allclose(fast.S.double(), S[:k], rtol=1e-4)
    cos_v = (fast.Vh.double() * Vh[:k]).sum(-1).abs()
    cos_u = (fast.U.double() * U[:, :k]).sum(0).abs()
    # A singular vector is defined only up to its gap: compare those separated by > 5% of s_1 on both sides.
    gap = torch.minimum(torch.cat([S[:1] * 0 + S[0], S[:-1] - S[1:]])[:k], (S[:-1] - S[1:])[:k]) / S[0]
    separated = gap > 0.05
    assert bool((cos_v[separated] > 0.999).all()) and bool((cos_u[separated] > 0.999).all())
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


@given(st.integers(1, 4).flatmap(lambda L: arrays(st.tuples(st.just(L), st.integers(2, 9), st.integers(2, 9)))),
       st.integers(1, 9))
def test_batched_triplets_match_a_full_svd_on_either_exact_route(W, k):
    # Small k goes through the Gram eigendecomposition when its residual check passes, large k through
    # the SVD; both must give the LAPACK singular values and, where the spectrum is separated, the vectors.
    k = min(k, *W.shape[1:])
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    for i, t in enumerate(batched_svd_triplets(W, k)):
        assert t.method in ("exact", "exact-gram")
        scale = max(float(S[i, 0]), 1e-12)
        assert torch.allclose(t.S.double(), S[i, :k], atol=1e-5 * scale)
        assert abs(t.frobenius_sq - float(S[i].pow(2).sum())) <= 1e-5 * max(t.frobenius_sq, 1e-12)
        gaps = torch.cat([S[i, :-1] - S[i, 1:], S[i, -1:]])[:k] / scale  # distance to the next singular value
        for j in range(k):
            if gaps[j] > 1e-2 and (j == 0 or S[i, j - 1] - S[i, j] > 1e-2 * scale):
                assert float((t.Vh[j].double() @ Vh[i, j]).abs()) > 1 - 1e-4
                assert float((t.U[:, j].double() @ U[i, :, j]).abs()) > 1 - 1e-4


def test_gram_route_is_used_for_small_k_and_the_svd_for_large_k():
    W = _low_rank_plus_noise(40, 30, 1).unsqueeze(0)
    assert batched_svd_triplets(W, 2)[0].method == "exact-gram"
    assert batched_svd_triplets(W, 30)[0].method == "exact"
    assert batched_svd_triplets(torch.zeros(1, 6, 5), 1)[0].method == "exact"  # s_k = 0: the SVD decides


def _compare_with_full_svd(t, W: torch.Tensor, k: int) -> None:
    U, S, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    assert torch.allclose(t.S.double(), S[:k], rtol=1e-4)
    assert abs(t.frobenius_sq - float(S.pow(2).sum())) <= 1e-5 * t.frobenius_sq
    gap = torch.minimum(torch.cat([S[:1], S[:-1] - S[1:]])[:k], (S[:-1] - S[1:])[:k]) / S[0]
    for j in range(k):
        if gap[j] > 0.05:
            assert float((t.Vh[j].double() @ Vh[j]).abs()) > 0.999
            assert float((t.U[:, j].double() @ U[:, j]).abs()) > 0.999


@pytest.mark.parametrize("m, r, n", [(120, 30, 90), (90, 30, 120), (80, 100, 60)])
def test_top_k_of_a_product_matches_the_full_svd_of_the_formed_product(m, r, n):
    # Both sides of the Gram operator (n <= m and n > m), and an inner dimension above the outer ones.
    g = torch.Generator().manual_seed(m + n)
    B = torch.randn(m, r, generator=g) * torch.logspace(0, -1.5, r)
    C = torch.randn(r, n, generator=g)
    t = top_k_svd_of_product(MatrixProduct(B, C), 4)
    assert t.method == "lanczos" and t.residual <= 1e-4
    _compare_with_full_svd(t, B @ C, 4)


def test_top_k_of_a_product_falls_back_exactly_and_survives_float32_overflow():
    g = torch.Generator().manual_seed(1)
    B, C = torch.randn(50, 10, generator=g), torch.randn(10, 40, generator=g)
    t = top_k_svd_of_product(MatrixProduct(B, C), 3, tol=1e-30)
    assert t.method == "exact-fallback"
    _compare_with_full_svd(t, B @ C, 3)
    huge = top_k_svd_of_product(MatrixProduct(B * 1e20, C * 1e20), 3)  # B^T B overflows float32
    assert bool(torch.isfinite(huge.S).all())
    _compare_with_full_svd(top_k_svd_of_product(MatrixProduct(B, C), 3), B @ C, 3)
    assert float((huge.Vh[0].double() @ torch.linalg.svd(B.double() @ C.double())[2][0]).abs()) > 0.999


def test_a_small_side_takes_the_gram_eigh_route_and_agrees_with_the_full_svd():
    # Side 120 <= EIGH_MAX_SIDE and more than EXACT_MAX_NUMEL entries: one LAPACK eigh of the Gram matrix, certified.
    from geodrift.linalg import EIGH_MAX_SIDE

    W = _low_rank_plus_noise(400, 120, 1)
    assert W.shape[1] <= EIGH_MAX_SIDE
    fast = top_k_svd(W, 3)
    U, S, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    assert fast.method == "eigh" and fast.passes == 3 and fast.residual <= 1e-4
    assert torch.allclose(fast.S.double(), S[:3], rtol=1e-5)
    assert bool(((fast.Vh.double() * Vh[:3]).sum(-1).abs() > 0.999).all())
    assert bool(((fast.U.double() * U[:, :3]).sum(0).abs() > 0.999).all())
    wide = top_k_svd(W.T.contiguous(), 3)  # the other orientation: the left vectors are the iterated side
    assert wide.method == "eigh" and torch.allclose(wide.S, fast.S, rtol=1e-5)
    assert bool(((wide.U.double() * Vh[:3].T).sum(0).abs() > 0.999).all())


def test_the_gram_eigh_route_never_returns_a_pair_the_rule_cannot_certify():
    # s_1 = s_2 exactly: their vectors are undefined, the rule rejects eigh's and ARPACK's, the exact route answers.
    g = torch.Generator().manual_seed(2)
    U, _ = torch.linalg.qr(torch.randn(400, 120, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(120, 120, generator=g, dtype=torch.float64))
    W = ((U * torch.cat([torch.tensor([10.0, 10.0]), torch.linspace(4.0, 1.0, 118)])) @ V.T).float()
    t = top_k_svd(W, 2)
    assert t.method == "exact-fallback"


def _random_spectrum(n: int, seed: int) -> torch.Tensor:
    # N(0, 0.02) entries: a Marchenko-Pastur bulk whose top singular values lie within ~0.1 % of each other.
    return torch.randn(n, n, generator=torch.Generator().manual_seed(seed)) * 0.02


def _agrees_with_float64(t, W: torch.Tensor, k: int) -> None:
    # Against the float64 Gram matrix's top eigenvectors (an SVD of W up to its sign, cheaper than one).
    import numpy as np
    import scipy.linalg

    n = W.shape[1]
    values, vectors = scipy.linalg.eigh((W.double().T @ W.double()).numpy(), subset_by_index=[n - k, n - 1])
    V = torch.from_numpy(np.ascontiguousarray(vectors[:, ::-1]))
    assert torch.allclose(t.S.double(), torch.from_numpy(values[::-1].copy()).sqrt(), rtol=1e-5)
    assert bool(((t.Vh.double() * V.T).sum(-1).abs() > 0.999).all())


def test_a_random_spectrum_is_certified_by_the_lanczos_route_not_the_exact_fallback():
    # Issue 34: side 2048 (block Krylov first). Its top gaps are too small for block Krylov's budget, which now
    # stops at its first check; ARPACK's k + 1 pairs then pass the acceptance rule. (Before: block Krylov's
    # whole budget, ARPACK with a loose gap bound that the rule rejected, then the float64 exact route.)
    W = _random_spectrum(2048, 3)
    t = top_k_svd(W, 8)
    assert t.method == "lanczos" and t.residual <= 1e-4
    assert t.passes == 18 + 1 + 2  # 8 Krylov blocks and one certificate, the Gram product, one certificate
    _agrees_with_float64(t, W, 8)


def test_when_arpack_fails_a_large_side_takes_lapacks_top_pairs_before_the_exact_route(monkeypatch):
    # ARPACK not converging (simulated: its wrapper answers None): syevr's top k + 1 pairs of the same Gram
    # matrix, certified by the same rule, instead of the float64 exact route.
    from geodrift import linalg

    monkeypatch.setattr(linalg, "_top_eigenpairs", lambda *args, **kwargs: None)
    W = _random_spectrum(512, 4)[:, :300].contiguous()
    assert W.shape[1] > linalg.EIGH_MAX_SIDE
    t = top_k_svd(W, 8)
    assert t.method == "eigh-subset" and t.passes == 1 + 2 and t.residual <= 1e-4
    _agrees_with_float64(t, W, 8)
    assert top_k_svd(W, 8, method="lanczos").method == "exact-fallback"  # "lanczos": ARPACK only, as documented
