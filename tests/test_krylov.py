"""Block Krylov and the acceptance rule: an accepted vector is within |cos| 0.999 of the exact one, on both sides."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geodrift.krylov import TARGET_COS, block_krylov, certify, products
from geodrift.linalg import top_k_svd


def _exact(W: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    U, S, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    return U[:, :k], S[:k], Vh[:k]


def _true_cos(U: torch.Tensor, Vh: torch.Tensor, W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k = Vh.shape[0]
    Ue, _, Vhe = _exact(W, k)
    return (U.double() * Ue).sum(0).abs(), (Vh.double() * Vhe).sum(1).abs()


def _spectrum_matrix(m: int, n: int, spectrum: torch.Tensor, seed: int) -> torch.Tensor:
    # U diag(spectrum) V^T with Haar-random U, V (float32): the singular values are exactly the drawn ones.
    g = torch.Generator().manual_seed(seed)
    r = spectrum.shape[0]
    U = torch.linalg.qr(torch.randn(m, r, generator=g, dtype=torch.float64)).Q
    V = torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64)).Q
    return ((U * spectrum.double()) @ V.T).float()


@given(st.lists(st.floats(0.0, 0.2), min_size=3, max_size=10), st.integers(0, 2**16), st.sampled_from([1, 2, 3]))
@settings(max_examples=20, deadline=None)
def test_the_rule_never_accepts_a_vector_farther_than_its_target(gaps: list[float], seed: int, k: int):
    # Spectra with drawn (possibly zero) gaps at the top and a flat bulk: the rule may reject, but what it
    # certifies must hold against the exact SVD, whatever the gaps.
    top = 2.0 + torch.tensor(gaps).flip(0).cumsum(0).flip(0)  # descending, gaps as drawn
    spectrum = torch.cat([top, torch.linspace(1.0, 0.1, 30)])
    W = _spectrum_matrix(120, 70, spectrum, seed)
    result = block_krylov(W, k, block=8, checks=(2, 4))
    cert = result.certificate
    Ue, _, Vhe = _exact(W, k)
    true_v = (result.X[:, :k].double() * Vhe.T).sum(0).abs()
    true_u = (cert.Y[:, :k].double() * Ue).sum(0).abs()
    assert bool((true_v >= cert.cos_v - 1e-6).all()), (true_v, cert.cos_v)
    assert bool((true_u >= cert.cos_u - 1e-6).all()), (true_u, cert.cos_u)
    if cert.accepted:
        assert float(torch.minimum(true_u, true_v).min()) >= TARGET_COS


def test_a_degenerate_top_pair_is_never_certified():
    # s_1 = s_2: v_1 is not defined, no method can promise it; the rule must reject (and the route fall back).
    W = _spectrum_matrix(200, 120, torch.tensor([3.0, 3.0, 1.0, 0.5, 0.2]), 0)
    cert = certify(*products(W), torch.linalg.svd(W.double(), full_matrices=False).Vh[:3].T.float())
    assert not cert.accepted and float(cert.cos_v[0]) < TARGET_COS
    t = top_k_svd(W, 2, method="krylov")
    assert t.method == "exact-fallback"


def test_block_krylov_on_the_embedded_models_trained_matrices_is_certified_and_right():
    # Real trained weights of every SmolLM2 shape (576x576, 192x576, 1536x576, 576x1536), the top 8 on both sides.
    from geodrift.scanner.scan import load_weights

    ws, _ = load_weights(None, roles=["attn_q", "attn_k", "mlp_up", "mlp_down"], layers=[17])
    for key in ws:
        W = ws[key].float()
        t = top_k_svd(W, 8, method="krylov")
        cos_u, cos_v = _true_cos(t.U, t.Vh, W)
        assert float(torch.minimum(cos_u, cos_v).min()) >= TARGET_COS, key
        # A 192-wide side holds at most 12 blocks of 16: K's may need the Lanczos route; the others converge.
        assert t.method == "krylov" or (key[0] == "attn_k" and t.method == "lanczos"), (key, t.method)


def test_the_budget_hands_a_hard_spectrum_to_the_next_route():
    # A random Gaussian matrix: its top singular values are packed (Marchenko-Pastur edge), so block Krylov
    # is not accepted within a small budget; the result says so and costs no more passes than the budget.
    W = torch.randn(600, 300, generator=torch.Generator().manual_seed(1))
    result = block_krylov(W, 8, budget_passes=20)
    assert not result.certificate.accepted and result.passes <= 20
    t = top_k_svd(W, 8)  # auto: below KRYLOV_MIN_SIDE the Lanczos route, certified or exact
    cos_u, cos_v = _true_cos(t.U, t.Vh, W)
    assert t.method in ("lanczos", "exact-fallback")
    assert float(torch.minimum(cos_u, cos_v).min()) >= TARGET_COS


@pytest.mark.parametrize("shape", [(300, 200), (200, 300)])
def test_lanczos_results_carry_the_same_certificate(shape: tuple[int, int]):
    W = _spectrum_matrix(*shape, torch.cat([torch.tensor([5.0, 4.0, 3.5, 3.0]), torch.linspace(2.0, 0.1, 60)]), 2)
    t = top_k_svd(W, 3, method="lanczos")
    assert t.method == "lanczos" and t.passes == 3
    cos_u, cos_v = _true_cos(t.U, t.Vh, W)
    assert float(torch.minimum(cos_u, cos_v).min()) >= 0.99999


def test_a_budgeted_run_stops_at_its_first_check_when_its_residuals_cannot_reach_the_rule():
    # Issue 34: a random N(0, 0.02) 4096 x 4096 spectrum (top gaps ~1e-4 of s_1^2) at 8 blocks has residuals ~4e-2
    # of theta_1; extrapolated to the last check the scan's budget allows (16 blocks) they stay far above what the
    # rule needs, so the run stops (the Gram route takes over). A spiked (trained-like) spectrum is accepted at the
    # same first check.
    from geodrift.linalg import KRYLOV_BUDGET

    n = 4096
    g = torch.Generator().manual_seed(5)
    W = torch.randn(n, n, generator=g) * 0.02
    budget = int(KRYLOV_BUDGET * n / (2 * 16))  # what linalg gives block Krylov on this side: up to 16 blocks
    stopped = block_krylov(W, 8, budget_passes=budget, tol=1e-4)
    assert not stopped.certificate.accepted and stopped.blocks == 8 and stopped.passes == 18
    a, b = torch.randn(n, 12, generator=g), torch.randn(n, 12, generator=g)
    edge = 0.02 * 2 * n ** 0.5
    spiked = W + (a / a.norm(dim=0) * edge * torch.linspace(1.8, 1.2, 12)) @ (b / b.norm(dim=0)).T
    accepted = block_krylov(spiked, 8, budget_passes=budget, tol=1e-4)
    assert accepted.certificate.accepted and accepted.blocks == 8
