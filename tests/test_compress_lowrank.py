"""The whitened low-rank pieces of ``compress share``, checked against their definitions on constructed inputs.

SVD-LLM's truncation ``U_r S_r V_r^T S^{-1}`` (from an explicit SVD of ``W S``), the exact
whitened loss of every unit, the closed-form refit as a least-squares optimum, allocations within
their budgets, the grouping's recovery of planted pairs, the calibration hooks against a manual
forward, and LaCo's merge formula (only the projections; equal layers merge to plain removal).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geodrift.compress import allocate, grouping
from geodrift.compress.calibrate import collect_moments
from geodrift.compress.evaluate import heldout_nll
from geodrift.compress.factorized import applied
from geodrift.compress.lowrank import (
    input_unit,
    output_unit,
    parameters,
    private_unit,
    refit_coefficients,
    whitened_error,
)
from geodrift.compress.merge import merge_targets, merged_names, merged_parameters, norm_growth
from geodrift.compress.methods import Compressor
from geodrift.compress.whiten import square_root
from geodrift.lm.llama import LlamaLM
from geodrift.weights import HF_LLAMA_PROJECTIONS


def _data(d_out: int, d_in: int, seed: int, tokens: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(d_out, d_in, generator=g)
    X = torch.randn(tokens, d_in, generator=g) @ torch.randn(d_in, d_in, generator=g)  # correlated inputs
    return W, (X.T @ X).double()


@pytest.mark.parametrize("shape", [(12, 8), (8, 12)])
def test_private_unit_is_svd_llm_truncation(shape: tuple[int, int]) -> None:
    W, C = _data(*shape, seed=1)
    unit = private_unit("attn_q", 0, W, C)
    S = torch.linalg.cholesky(C)
    U, s, Vh = torch.linalg.svd(W.double() @ S)
    for r in range(1, unit.max_rank + 1):
        svd_llm = U[:, :r] @ torch.diag(s[:r]) @ Vh[:r] @ torch.linalg.inv(S)
        second, first = unit.factors(r)[0]
        assert torch.allclose((second @ first).double(), svd_llm, atol=1e-3 * float(svd_llm.abs().max()))
        assert whitened_error(W, second @ first, C) == pytest.approx(unit.loss(r), rel=1e-4)
    assert unit.max_rank == shape[0] * shape[1] // (shape[0] + shape[1])  # the break-even rank


def test_a_singular_moment_falls_back_to_the_eigen_root_and_still_factors() -> None:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(5, 10, generator=g)  # 5 tokens for a width of 10: rank-deficient moment
    C = X.T @ X
    root = square_root(C)
    assert root.fallback and root.method.startswith("eigen") and torch.allclose(root.S @ root.S.T, C.double(), atol=1e-8)
    W = torch.randn(16, 10, generator=g)
    unit = private_unit("mlp_gate", 0, W, C)  # d_out > d_in: the path that takes a root
    second, first = unit.factors(4)[0]
    assert torch.isfinite(second @ first).all() and unit.whitening.startswith("eigen")
    assert whitened_error(W, second @ first, C) == pytest.approx(unit.loss(4), rel=1e-3, abs=1e-6)


def test_shared_units_losses_are_exact_and_their_basis_is_one_tensor() -> None:
    Ws, Cs = zip(*[_data(10, 6, seed=s) for s in range(3)], strict=True)
    out = output_unit("attn_o", (0, 1, 2), list(Ws), list(Cs))
    inp = input_unit("attn_q", (0, 1, 2), list(Ws), list(Cs))
    mean = torch.stack(list(Cs)).mean(0)
    for r in (1, 3):
        f = out.factors(r)
        assert sum(whitened_error(W, f[i][0] @ f[i][1], C) for i, (W, C) in enumerate(zip(Ws, Cs, strict=True))) \
            == pytest.approx(out.loss(r), rel=1e-4)
        assert f[0][0] is f[1][0] is f[2][0]  # B (d_out, r): stored once
        f = inp.factors(r)
        assert sum(whitened_error(W, f[i][0] @ f[i][1], mean) for i, W in enumerate(Ws)) == pytest.approx(inp.loss(r),
                                                                                                          rel=1e-4)
        assert f[0][1] is f[1][1] is f[2][1]  # B^T (r, d_in)
    assert parameters("input", (10, 6), 3, 2) == 2 * (6 + 30) and parameters("output", (10, 6), 3, 2) == 2 * (10 + 18)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), r=st.integers(1, 4))
def test_the_refit_is_the_least_squares_optimum_and_never_worse(seed: int, r: int) -> None:
    Ws, Cs = zip(*[_data(7, 6, seed=seed + s) for s in range(2)], strict=True)
    unit = input_unit("mlp_up", (0, 1), list(Ws), list(Cs))
    plain, refit = unit.factors(r), unit.factors(r, list(Cs))
    for i, (W, C) in enumerate(zip(Ws, Cs, strict=True)):
        before = whitened_error(W, plain[i][0] @ plain[i][1], C)
        after = whitened_error(W, refit[i][0] @ refit[i][1], C)
        assert after <= before * (1 + 1e-5) + 1e-6
        # Optimality: the gradient of tr((W - X B^T) C (W - X B^T)^T) in X vanishes at the refit.
        Bt = refit[i][1].double()
        grad = (W.double() - refit[i][0].double() @ Bt) @ C @ Bt.T
        assert float(grad.abs().max()) <= 1e-3 * float((W.double() @ C @ Bt.T).abs().max())
    full = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(-1 - seed)))[0]  # full rank: exact
    assert torch.allclose(refit_coefficients(Ws[0], full, Cs[0]) @ full, Ws[0], atol=1e-3)


def test_allocations_stay_within_each_types_budget_and_greedy_loses_least() -> None:
    units = [private_unit(role, layer, *_data(12, 8, seed=10 * layer + i))
             for i, role in enumerate(("attn_q", "mlp_up")) for layer in range(4)]
    for ratio in (0.2, 0.5):
        for ranks in (allocate.uniform_ranks(units, ratio), allocate.loss_per_parameter_ranks(units, ratio),
                      allocate.v2_ranks(units, ratio)):
            for role in ("attn_q", "mlp_up"):
                kept = sum(u.per_rank() * k for u, k in zip(units, ranks, strict=True) if u.role == role)
                assert kept <= (1 - ratio) * sum(u.dense_parameters() for u in units if u.role == role)
            assert all(1 <= k <= u.max_rank for u, k in zip(units, ranks, strict=True))
        uniform = sum(u.loss(k) for u, k in zip(units, allocate.uniform_ranks(units, ratio), strict=True))
        greedy = sum(u.loss(k) for u, k in zip(units, allocate.loss_per_parameter_ranks(units, ratio), strict=True))
        assert greedy <= uniform * (1 + 1e-9)


def test_matching_recovers_planted_non_adjacent_pairs_and_overlap_has_its_random_floor() -> None:
    g = torch.Generator().manual_seed(0)
    d, r = 40, 4
    frames = [torch.linalg.qr(torch.randn(d, r, generator=g, dtype=torch.float64))[0] for _ in range(3)]
    # Layers (0, 3), (1, 4), (2, 5) share a subspace; neighbours share nothing.
    bases = [frames[i % 3] for i in range(6)]
    O = grouping.overlaps(bases)
    assert grouping.matched_groups(O, 2) == [(0, 3), (1, 4), (2, 5)]
    randoms = [torch.linalg.qr(torch.randn(d, r, generator=g, dtype=torch.float64))[0] for _ in range(40)]
    off = grouping.overlaps(randoms)[~torch.eye(40, dtype=torch.bool)]
    assert abs(float(off.mean()) - r / d) < 0.01  # floor r/d
    assert grouping.matched_groups(torch.rand(5, 5, generator=g), 2)[-1:] != []  # an odd layer out stays alone
    assert sorted(sum(map(list, grouping.random_groups(7, 3, 1)), [])) == list(range(7))


def test_calibration_moments_are_the_projection_inputs_second_moments() -> None:
    model = LlamaLM(vocab_size=30, d_model=16, n_layers=2, n_heads=2, d_ff=24)
    ids = torch.randint(0, 30, (3, 9), generator=torch.Generator().manual_seed(0))
    moments = collect_moments(model, ids)
    with torch.no_grad():
        h = model.model.embed_tokens(ids[:, :-1])
        x = model.model.layers[0].input_layernorm(h).reshape(-1, 16).double()
    assert torch.allclose(moments.of("attn_v", 0), x.T @ x, rtol=1e-4, atol=1e-4)
    assert moments.of("attn_q", 1) is moments.of("attn_k", 1) and moments.tokens == 24
    assert moments.of("mlp_down", 1).shape == (24, 24)


def test_laco_merges_the_differences_of_the_projections_into_the_kept_predecessor() -> None:
    model = LlamaLM(vocab_size=20, d_model=8, n_layers=5, n_heads=2, d_ff=16)
    assert merge_targets(5, [2, 3]) == {1: [2, 3]} and merge_targets(5, [0]) == {1: [0]}
    new = merged_parameters(model, [2, 3])
    p = dict(model.named_parameters())
    name = "model.layers.{}.self_attn.o_proj.weight"
    expected = p[name.format(1)] + (p[name.format(2)] - p[name.format(1)]) + (p[name.format(3)] - p[name.format(1)])
    assert torch.allclose(new[name.format(1)], expected) and name.format(0) not in new
    # LaCo merges the seven projection weights and nothing else: the target keeps its own norms
    assert sorted(new) == sorted(merged_names(1))


def _laco_and_removal(model: LlamaLM, removed: list[int], windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ratio = len(removed) / len(model.model.layers)
    comp = Compressor(model, collect_moments(model, windows), orders={"prune-greedy": removed})
    laco, pruned = comp.build("laco", ratio), comp.build("prune-greedy", ratio)
    assert laco.removed == pruned.removed == tuple(sorted(removed)) and not pruned.replaced
    assert laco.kept_params == pruned.kept_params
    assert set(laco.replaced) == {n for t in merge_targets(len(model.model.layers), removed) for n in merged_names(t)}
    with applied(model, laco):
        merged = heldout_nll(model, windows, laco.removed)
    return merged, heldout_nll(model, windows, pruned.removed)


def test_merging_layers_whose_projections_equal_the_targets_is_plain_removal() -> None:
    # Layers 2 and 3 carry layer 1's projections (their norms differ): every difference is zero,
    # so LaCo must leave layer 1 as it is and the model must equal the one with 2 and 3 removed.
    g = torch.Generator().manual_seed(3)
    model = LlamaLM(vocab_size=30, d_model=16, n_layers=5, n_heads=2, d_ff=24, generator=g)
    with torch.no_grad():
        for layer in (2, 3):
            for role in HF_LLAMA_PROJECTIONS:
                model.projection(role, layer).weight.copy_(model.projection(role, 1).weight)
            model.model.layers[layer].input_layernorm.weight.mul_(3.0)
    windows = torch.randint(0, 30, (6, 17), generator=g)
    merged, removed = _laco_and_removal(model, [2, 3], windows)
    assert torch.allclose(merged, removed, atol=1e-5)
    assert norm_growth(model, [2, 3]) == pytest.approx(1.0)


def test_merging_one_layer_keeps_the_next_layers_projections_behind_the_targets_norms() -> None:
    # m = 1: theta_1 + (theta_2 - theta_1) = theta_2, so the merged model runs layer 2's
    # projections in layer 1's place (with layer 1's norms) and drops layer 2.
    g = torch.Generator().manual_seed(4)
    model = LlamaLM(vocab_size=30, d_model=16, n_layers=4, n_heads=2, d_ff=24, generator=g)
    windows = torch.randint(0, 30, (6, 17), generator=g)
    merged, _ = _laco_and_removal(model, [2], windows)
    with torch.no_grad():
        for role in HF_LLAMA_PROJECTIONS:
            model.projection(role, 1).weight.copy_(model.projection(role, 2).weight)
    assert torch.allclose(merged, heldout_nll(model, windows, [2]), atol=1e-5)


@pytest.mark.parametrize("m", [1, 2, 3])
def test_merging_m_unrelated_layers_grows_the_weights_by_sqrt_m2_minus_m_plus_1(m: int) -> None:
    # Independent random layers (as adjacent SmolLM2-135M layers nearly are): Eq. 1's sum of m
    # differences is not a layer of the model; its norm is sqrt(m^2 - m + 1) times a layer's.
    model = LlamaLM(vocab_size=20, d_model=64, n_layers=m + 1, n_heads=4, d_ff=128,
                    generator=torch.Generator().manual_seed(m))
    assert norm_growth(model, range(1, m + 1)) == pytest.approx((m * m - m + 1) ** 0.5, rel=0.05)
