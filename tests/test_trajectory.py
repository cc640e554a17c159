"""Trajectory shape (App. A.2): 3-PC explained variance, |cos| decay with layer distance, and their floors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import ks_2samp
from strategies import orthogonal_matrices, vector_stacks

from geodrift import metrics
from geodrift.continuity import MeasureSpec, PermutationBank, Report, assemble, decompose
from geodrift.continuity.trajectory import (
    default_lags,
    explained_variance_of_gram,
    lag_abs_cos,
    lag_pairs,
    pca_explained_variance,
    permutation_null_samples,
    sign_align,
    trajectory_shape,
    trajectory_shapes,
)
from geodrift.weights import WeightSet


def _path(n_layers: int = 24, dim: int = 256, noise: float = 0.02, seed: int = 0) -> torch.Tensor:
    # A smooth arc through a 2-plane of R^dim, with a little noise: the paper's "low-dimensional trajectory".
    g = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(dim, 2, generator=g)).Q.T  # (2, dim)
    angles = torch.linspace(0, 1.2, n_layers)
    return torch.stack([torch.cos(angles), torch.sin(angles)], 1) @ basis + noise * torch.randn(n_layers, dim,
                                                                                                 generator=g) / math.sqrt(dim)


@given(vector_stacks(layers=st.integers(3, 8), k=st.just(1), dim=st.integers(3, 12)), st.data())
def test_explained_variance_ignores_signs_and_a_shared_rotation(stack: torch.Tensor, data: st.DataObject):
    vectors = stack[:, 0]
    signs = torch.tensor(data.draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=len(vectors),
                                            max_size=len(vectors)))).unsqueeze(1)
    rotation = data.draw(orthogonal_matrices(st.just(vectors.shape[1])))
    base = float(pca_explained_variance(vectors))
    assert 0.0 <= base <= 1.0 + 1e-6
    assert float(pca_explained_variance(vectors * signs)) == pytest.approx(base, abs=1e-5)
    assert float(pca_explained_variance(vectors @ rotation.T)) == pytest.approx(base, abs=1e-5)


def test_sign_alignment_makes_every_consecutive_inner_product_non_negative():
    g = torch.Generator().manual_seed(1)
    aligned = sign_align(torch.randn(10, 6, generator=g))
    assert bool(((aligned[1:] * aligned[:-1]).sum(-1) >= 0).all())


def test_a_smooth_path_is_low_dimensional_and_random_vectors_sit_at_the_random_baseline():
    g = torch.Generator().manual_seed(2)
    smooth = trajectory_shape(_path(), "attn_q", "Q", "v", 40, g)
    assert smooth.evr > 0.95 and smooth.evr_random_mean < 0.2 and smooth.evr_null_mean < 0.2
    # |cos| decays with layer distance along an arc, and stays far above its permutation null.
    assert smooth.lag_abs_cos == sorted(smooth.lag_abs_cos, reverse=True)
    assert all(c > m + 5 * s for c, m, s in zip(smooth.lag_abs_cos, smooth.lag_null_mean, smooth.lag_null_std,
                                                strict=True))
    assert smooth.order_z > 3  # local in depth: nearby layers agree more than a random order gives
    noise = trajectory_shape(torch.randn(24, 256, generator=g), "attn_q", "Q", "v", 30, g)
    assert abs(noise.evr - noise.evr_random_mean) < 4 * noise.evr_random_std + 0.01
    assert noise.lag_floor == pytest.approx(math.sqrt(2 / (math.pi * 256)))


def test_a_frame_every_layer_shares_is_continuous_but_not_local_in_depth():
    # The same direction plus independent noise in every layer: high adjacent |cos| in any layer order.
    g = torch.Generator().manual_seed(3)
    shared = torch.randn(256, generator=g)
    vectors = shared + 0.6 * torch.randn(30, 256, generator=g)
    t = trajectory_shape(vectors, "mlp_down", "Down", "u", 60, g)
    assert t.lag_abs_cos[0] > t.lag_null_mean[0] + 10 * t.lag_null_std[0]
    assert abs(t.order_z) < 4
    shuffled = trajectory_shape(_path()[torch.randperm(24, generator=g)], "attn_q", "Q", "v", 60, g)
    assert shuffled.order_z < 3 and shuffled.evr > 0.95  # the same points: the path's EVR does not need the order


def test_lags_and_lag_cos_on_known_vectors():
    assert default_lags(30) == [1, 2, 3, 4, 6, 9, 13, 19, 28]
    assert default_lags(2) == [1]
    e = torch.eye(4)
    vectors = torch.stack([e[0], e[0], e[1], -e[1]])
    assert lag_abs_cos(vectors, [1, 2]) == pytest.approx([2 / 3, 0.0])


def test_the_trajectory_survives_the_report_json_round_trip():
    g = torch.Generator().manual_seed(4)
    t = trajectory_shape(_path(8, 64), "attn_q", "Q", "v", 10, g)
    report = Report("x", "raw", 1, 10, 0, [], [], [t])
    again = Report.from_dict(report.to_dict())
    assert again.trajectory == [t] and again.trajectory[0].order_z == pytest.approx(t.order_z)


def test_orthogonal_neighbours_no_longer_let_the_svd_signs_change_the_explained_variance():
    # Hypothesis's counterexample of issue 20: every vector orthogonal to its predecessor, so Eq. 6 alone
    # left each sign to the input (0.909 instead of 1.0 for one of the sign patterns).
    e = torch.eye(4, dtype=torch.float64)
    stack = torch.stack([e[2], e[3], e[0], e[1], e[0]])
    values = {round(float(pca_explained_variance(stack * torch.tensor(signs).unsqueeze(1))), 9)
              for signs in itertools.product([-1.0, 1.0], repeat=5)}
    assert len(values) == 1
    rotation = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))).Q
    assert float(pca_explained_variance(stack @ rotation.T)) == pytest.approx(values.pop(), abs=1e-6)


def test_a_layer_linking_two_orthogonal_groups_aligns_them_as_wholes():
    # x_1 is orthogonal to x_0 (a group of its own); x_2 leans on both, so it fixes x_0's sign relative to x_1:
    # the aligned stack's inner products do not depend on any input sign.
    e = torch.eye(3, dtype=torch.float64)
    stack = torch.stack([e[0], e[1], (e[0] + e[1] + e[2]) / 3 ** 0.5, e[2]])
    grams = set()
    for signs in itertools.product([-1.0, 1.0], repeat=4):
        aligned = sign_align(stack * torch.tensor(signs).unsqueeze(1))
        grams.add(tuple(torch.round(aligned @ aligned.T, decimals=9).flatten().tolist()))
    assert len(grams) == 1 and min(grams.pop()) >= 0  # every pair agrees in sign after alignment


@given(vector_stacks(layers=st.integers(2, 9), k=st.just(1), dim=st.integers(2, 12)))
def test_explained_variance_from_the_gram_matrix_equals_the_pca_of_the_stack(stack: torch.Tensor):
    # The nulls read the EVR off (L, L) Gram matrices; the definition is the PCA of the (L, d) stack.
    unit = sign_align(stack[:, 0] / stack[:, 0].norm(dim=-1, keepdim=True))
    centred = unit - unit.mean(0)
    energy = torch.linalg.svdvals(centred).pow(2)
    expected = 1.0 if float(energy.sum()) < 1e-12 else float(energy[:3].sum() / energy.sum())
    assert float(explained_variance_of_gram(unit @ unit.T)) == pytest.approx(expected, abs=1e-6)
    assert float(pca_explained_variance(stack[:, 0])) == pytest.approx(expected, abs=1e-6)


def _independent_nulls(vectors: torch.Tensor, lags: list[int], draws: int, g: torch.Generator):
    # The definition, drawn independently: every lag pair (x_l, x_l+k) its own permutation; the EVR's layers each one.
    lag_samples = torch.stack([metrics.permuted_abs_cos(lag_pairs(vectors.unsqueeze(1), k), draws, g)[:, ::2, 0].mean(1)
                               for k in lags], 1)
    perms = metrics.random_permutations(draws, vectors.shape[0], vectors.shape[1], g)
    evr = pca_explained_variance(torch.gather(vectors.expand(draws, *vectors.shape), 2, perms.long()))
    return evr, lag_samples


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_shared_bank_gives_every_lag_and_the_evr_the_same_null_as_independent_permutations(seed: int):
    # Heavy-tailed coordinates (one outlier per vector, as trained weights have) make the nulls skewed: a wrong
    # sharing (e.g. one permutation for all layers, or chained pairs of one lag) changes their distribution.
    g = torch.Generator().manual_seed(seed)
    vectors = torch.randn(7, 9, generator=g) * torch.linspace(0.2, 3.0, 9) + 4.0 * torch.eye(7, 9)
    lags, draws = default_lags(7), 3000
    evr, lag = permutation_null_samples(vectors, lags, draws, PermutationBank(torch.Generator().manual_seed(seed + 10)))
    evr_ref, lag_ref = _independent_nulls(vectors, lags, draws, torch.Generator().manual_seed(seed + 20))
    # Bonferroni over the EVR and every lag: one family-wise false alarm in 1000 runs.
    alpha = 1e-3 / (1 + len(lags))
    assert ks_2samp(evr.numpy(), evr_ref.numpy()).pvalue > alpha
    for i in range(len(lags)):
        assert ks_2samp(lag[:, i].numpy(), lag_ref[:, i].numpy()).pvalue > alpha, lags[i]


def test_the_lag_one_null_of_a_scan_is_its_eq1_null_and_the_trajectory_draws_no_new_permutations():
    g = torch.Generator().manual_seed(5)
    ws = WeightSet.from_tensors({(role, layer): torch.randn(24, 16, generator=g)
                                 for role in ("attn_q", "mlp_down") for layer in range(6)})
    spec = MeasureSpec(k=2, null_draws=20)
    spectra = decompose(ws, spec)
    bank = PermutationBank(torch.Generator().manual_seed(spec.seed))
    report = assemble(spectra, spec, "x", "raw", bank=bank)
    rows = bank.rows_generated
    shapes = trajectory_shapes(spectra, spec.null_draws, spec.seed, bank)
    assert bank.rows_generated == rows  # every trajectory shape is a shape the main table already drew
    for t in shapes:
        role = next(r for r in report.roles if r.role == t.role)
        eq1 = role.spaces[t.space].vectors[0]
        assert t.lag_null_mean[0] == pytest.approx(eq1.null_mean, abs=1e-6)
        assert t.lag_null_std[0] == pytest.approx(eq1.null_std, abs=1e-6)


def test_the_bank_keeps_composed_layer_permutations_within_its_memory_cap(monkeypatch):
    # Issue 34: a per-entry cap kept every chunk of an 8B's wide stacks (0.5 GB of peak RSS on the cold 8B);
    # the cap is on the kept entries in all, and a stack reusing a kept entry gets the same permutations.
    from geodrift.continuity import bank as bank_module

    monkeypatch.setattr(bank_module, "LAYER_MEMO_BYTES", 3 * 10 * 6 * 50 * 8)  # three chunks of (10, 6, 50) int64
    bank = bank_module.PermutationBank(torch.Generator().manual_seed(0))
    chunks = [bank.layer_permutations(40, 6, 50, start, start + 10) for start in range(0, 40, 10)]
    kept = sum(t.numel() * t.element_size() for t in bank._layer_perms.values())
    assert kept <= bank_module.LAYER_MEMO_BYTES and len(bank._layer_perms) == 3
    again = [bank.layer_permutations(40, 6, 50, start, start + 10) for start in range(0, 40, 10)]
    assert all(bool((a == b).all()) for a, b in zip(chunks, again, strict=True))
