"""Properties of the continuity metrics (Eq. 1-3) and their noise floors."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import arrays, examples, orthogonal_matrices, vector_stacks

from geodrift import metrics


def _stack(shape: tuple[int, int, int, int]) -> torch.Tensor:
    # A fixed (L, K, d) stack for the example-based tests below.
    L, K, d, seed = shape
    return torch.randn(L, K, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@given(vector_stacks().flatmap(
    lambda v: st.tuples(st.just(v), arrays(st.just(tuple(v.shape[:2])), st.sampled_from([-1.0, 1.0])))))
def test_continuity_is_invariant_to_singular_vector_sign(vectors_and_signs):
    vectors, signs = vectors_and_signs
    flipped = vectors * signs.unsqueeze(-1)
    assert torch.allclose(metrics.adjacent_abs_cos(vectors), metrics.adjacent_abs_cos(flipped), atol=1e-12)


@given(st.integers(2, 12).flatmap(lambda d: st.tuples(vector_stacks(dim=st.just(d)), orthogonal_matrices(st.just(d)))),
       arrays(st.just((6, 4)), st.floats(0.01, 10.0)))
def test_continuity_is_invariant_to_one_orthogonal_change_of_basis_for_all_layers(stack_and_r, sigma_pool):
    vectors, R = stack_and_r
    rotated = vectors @ R.T
    assert torch.allclose(metrics.adjacent_abs_cos(vectors), metrics.adjacent_abs_cos(rotated), atol=1e-9)
    sigma = sigma_pool[: vectors.shape[0], : vectors.shape[1]].sort(-1, descending=True).values
    assert torch.allclose(metrics.sigma2_weighted_alignment(vectors, sigma),
                          metrics.sigma2_weighted_alignment(rotated, sigma), atol=1e-9)


@given(vector_stacks())
def test_continuity_values_lie_in_unit_interval(vectors):
    cos = metrics.adjacent_abs_cos(vectors)
    assert bool(((cos >= 0) & (cos <= 1 + 1e-12)).all())


@given(st.integers(2, 8), vector_stacks(layers=st.just(1), k=st.just(1)))
def test_identical_layers_give_continuity_one(L, v):
    v = v[0, 0]
    assert torch.allclose(metrics.adjacent_abs_cos(v.expand(L, v.shape[0])), torch.ones(L - 1, dtype=v.dtype))


def test_orthogonal_adjacent_vectors_give_zero():
    eye = torch.eye(3)
    assert torch.allclose(metrics.adjacent_abs_cos(eye), torch.zeros(2))


def test_sigma2_weighted_alignment_reduces_to_v1_continuity_when_sigma1_dominates():
    vectors = _stack((5, 3, 16, 1))
    sigma = torch.tensor([[1.0, 1e-6, 1e-6]]).expand(5, 3)
    wa = metrics.sigma2_weighted_alignment(vectors, sigma)
    assert torch.allclose(wa, metrics.adjacent_abs_cos(vectors[:, 0]).float(), atol=1e-5)


def test_sigma2_truncated_alignment_brackets_the_full_value():
    g = torch.Generator().manual_seed(3)
    Ws = torch.randn(4, 12, 10, generator=g, dtype=torch.float64) + 2 * torch.ones(4, 12, 10, dtype=torch.float64)
    U, S, Vh = torch.linalg.svd(Ws, full_matrices=False)
    fro = Ws.pow(2).sum((-1, -2))
    full = metrics.sigma2_weighted_alignment(Vh, S)
    trunc = metrics.sigma2_weighted_alignment(Vh[:, :3], S[:, :3], fro)
    gap = metrics.sigma2_truncation_gap(S[:, :3], fro)
    assert bool((trunc <= full + 1e-6).all()) and bool((full <= trunc + gap + 1e-6).all())


def test_subspace_overlap_ignores_order_swaps_inside_the_subspace():
    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(20, 20, generator=g))
    a = q[:, :3].T
    swapped = a[[1, 0, 2]] * torch.tensor([[-1.0], [1.0], [1.0]])
    overlap = metrics.subspace_overlap(torch.stack([a, swapped]))
    assert torch.allclose(overlap, torch.ones(1), atol=1e-6)
    # Eq. 1 on the same pair sees the swap: k=1 and k=2 are orthogonal there.
    assert float(metrics.adjacent_abs_cos(torch.stack([a, swapped]))[0, 0]) < 1e-6


def test_effective_rank_of_rank_one_is_one_and_flat_spectrum_is_n():
    assert math.isclose(float(metrics.effective_rank(torch.tensor([3.0, 0.0, 0.0]))), 1.0, rel_tol=1e-6)
    assert math.isclose(float(metrics.effective_rank(torch.ones(7))), 7.0, rel_tol=1e-6)


@given(arrays(st.tuples(st.integers(4, 30)), st.floats(1e-3, 10.0)), st.integers(1, 3))
@examples(30)
def test_effective_rank_bounds_contain_the_exact_value(spectrum, k):
    sigma, n = spectrum.sort(descending=True).values, spectrum.shape[0]
    exact = float(metrics.effective_rank(sigma))
    lower, upper = metrics.effective_rank_bounds(sigma[:k], sigma.pow(2).sum(), n)
    assert float(lower) <= exact * (1 + 1e-5) and exact <= float(upper) * (1 + 1e-5)


def test_random_baseline_matches_monte_carlo_mean_abs_cos():
    d = 256
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(20000, d, generator=g), torch.randn(20000, d, generator=g)
    mc = float((torch.nn.functional.cosine_similarity(a, b)).abs().mean())
    # Monte Carlo standard error is about 0.038/sqrt(20000) ~ 3e-4; the formula is asymptotic in d.
    assert abs(mc - metrics.random_baseline(d)) < 2e-3


def test_permutation_null_separates_a_shared_frame_from_uniform_positive_vectors():
    g = torch.Generator().manual_seed(1)
    d, L = 128, 10
    shared = torch.randn(d, generator=g)
    frame = shared + 0.3 * torch.randn(L, d, generator=g)  # one frame, small noise
    positive = torch.rand(L, d, generator=g) + 1.0  # high |cos| from positivity alone
    for vectors, expect_significant in ((frame, True), (positive, False)):
        stack = vectors.unsqueeze(1)
        observed = metrics.adjacent_abs_cos(stack).mean(0)
        null = metrics.permutation_null(stack, 200, torch.Generator().manual_seed(0))
        assert bool((null.z(observed) > 5).all()) is expect_significant
    # Uniform positive vectors look continuous against the analytic floor but not against the null.
    assert float(metrics.adjacent_abs_cos(positive).mean()) > 10 * metrics.random_baseline(d)


def test_permutation_null_is_deterministic_given_the_generator():
    v = _stack((6, 2, 32, 5))
    a = metrics.permutation_null(v, 40, torch.Generator().manual_seed(9))
    b = metrics.permutation_null(v, 40, torch.Generator().manual_seed(9))
    assert torch.equal(a.mean, b.mean) and torch.equal(a.std, b.std)


def test_permutation_null_of_random_vectors_is_near_the_analytic_floor():
    d = 400
    v = torch.randn(12, 1, d, generator=torch.Generator().manual_seed(2))
    null = metrics.permutation_null(v, 300, torch.Generator().manual_seed(0))
    assert abs(float(null.mean[0]) - metrics.random_baseline(d)) < 0.01
