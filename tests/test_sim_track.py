"""Tracking: tidy series content, permutation nulls, step-0 gradients, cumulative gradient, rotation, power iteration.

Both trackers measure through ``geodrift.continuity`` (the scan's code path); every tracked
similarity carries its permutation null.
"""

from __future__ import annotations

import math

import torch
from sim_helpers import missing_nulls, mnist5k, smoke_result, smoke_spec, tiny_result

from geodrift.continuity import MeasureSpec, measure
from geodrift.linalg import top_right_vectors
from geodrift.metrics import adjacent_abs_cos
from geodrift.sim.mlp import build_mlp
from geodrift.sim.record import SERIES_COLUMNS
from geodrift.sim.track import summarize, track_seed
from geodrift.weights import TRANSFORMER_ROLES


def test_series_has_first_backward_pass_interval_steps_and_final_step():
    rec = smoke_result().record
    assert len(SERIES_COLUMNS) == 9 and all(len(r) == 9 for r in rec.rows)
    assert sorted({r[0] for r in rec.rows}) == [0, 10, 20, 30]
    assert rec.value("G", "block", "cont", "v", 1, step=0) == rec.summary["G0 v1"]
    assert {r[3] for r in rec.rows if r[2] in ("W", "G", "Gcum")} == {"block"}
    assert {r[3] for r in rec.rows if r[2] in ("train", "test")} == {None}


def test_mlp_weight_rows_are_what_measure_gives_on_the_same_weights():
    # Step 0 is before any update: the tracked W rows equal a direct measure() of the init weights
    # with the tracker's spec (same seed for the nulls) - the scan's code path.
    spec = smoke_spec(0)
    data = mnist5k()
    init = build_mlp(spec.model, data.in_dim, data.n_classes, [42]).weightset(0)  # type: ignore[arg-type]
    report = measure(init, MeasureSpec(k=spec.track.k, null_draws=spec.track.null_draws, seed=track_seed(42, 0),
                                       full_spectrum=True, svd="exact"))
    rows = [r for r in smoke_result().record.rows if r[0] == 0 and r[2] == "W"]
    for role, metric, space, k, layer, value in report.series():
        got = [r[8] for r in rows if r[3:8] == [role, metric, space, k, layer]]
        assert len(got) == 1, (metric, space, k, layer)
        assert got[0] == value or (math.isnan(got[0]) and math.isnan(value)), (metric, space, k, layer)


def test_every_tracked_continuity_of_both_simulators_carries_its_permutation_null():
    for result in (smoke_result(), tiny_result()):
        rows = result.record.rows
        conts = [r for r in rows if r[4] == "cont"]
        assert conts and not missing_nulls(rows)
        for r in conts:
            assert 0.0 <= r[8] <= 1.0 + 1e-6, r
        nulls = {(r[0], r[2], r[3], r[5], r[6]): r[8] for r in rows if r[4] == "null_std"}
        assert all(v >= 0.0 for v in nulls.values())
    rec = smoke_result().record
    assert rec.select("W", "block", "null_mean", "v", 2) and rec.select("G", "block", "null_std", "u", 2)
    assert rec.select("Gcum", "block", "null_mean", "u", 1)
    for source in ("W", "G"):
        assert rec.select(source, "block", "s2wa_null_mean", "v") and rec.select(source, "block", "z", "v", 1)


def test_transformer_tracks_every_projection_for_weights_and_gradients_with_nulls():
    rec = tiny_result().record
    tracked = [0, 10, 12]
    for source in ("W", "G"):
        assert {r[3] for r in rec.rows if r[2] == source} == set(TRANSFORMER_ROLES)
        for role in TRANSFORMER_ROLES:
            for space in ("v", "u"):
                for metric in ("cont", "null_mean", "null_std", "z"):
                    assert [s for s, _ in rec.select(source, role, metric, space, 1)] == tracked, (source, role)
                assert [s for s, _ in rec.select(source, role, "s2wa_null_mean", space)] == tracked
    assert [s for s, _ in rec.select("eval", None, "ppl")] == [0, 12]  # eval_every 15: step 0 and the end
    assert rec.select("train", None, "loss")
    summary = summarize(rec.rows)
    assert summary["W attn_q v1 null"] == rec.value("W", "attn_q", "null_mean", "v", 1)
    assert summary["ppl"] == rec.value("eval", None, "ppl")


def test_cumulative_gradient_equals_the_gradient_at_step_zero():
    rec = smoke_result().record
    assert abs(rec.value("Gcum", "block", "cont", "v", 1, step=0) - rec.value("G", "block", "cont", "v", 1, step=0)) < 1e-4


def test_delta_gw_is_cumulative_minus_weight_continuity():
    rec = smoke_result().record
    for step in (0, 10, 30):
        expected = rec.value("Gcum", "block", "cont", "v", 1, step=step) - rec.value("W", "block", "cont", "v", 1,
                                                                                      step=step)
        assert abs(rec.value("Gcum", "block", "delta_gw", step=step) - expected) < 1e-6


def test_rotation_is_zero_at_the_reference_step_and_absent_before():
    rec = smoke_result().record  # reference = one epoch = 10 steps in the smoke preset
    angles = rec.select("W", "block", "rotation_deg", layer="all")
    assert min(s for s, _ in angles) == 10
    assert all(v < 1e-2 for s, v in angles if s == 10)
    assert all(0.0 <= v <= 90.0 for _, v in angles)
    nulls = rec.select("W", "block", "rotation_null_deg")
    assert [s for s, _ in nulls] == [10, 20, 30] and all(0.0 < v <= 90.0 for _, v in nulls)


def test_relative_change_starts_at_zero_and_grows():
    series = smoke_result().record.select("W", "block", "rel_change")
    assert series[0] == (0, 0.0) and series[-1][1] > 0.01


def test_ema_alignments_are_tracked_for_each_beta_with_their_null():
    rec = smoke_result().record
    sources = {"G", "Gcum", "EMA0.9", "EMA0.99"}
    assert {r[2] for r in rec.rows if r[4] == "align_w_v1"} == sources
    assert {r[2] for r in rec.rows if r[4] == "align_null_mean"} == sources
    for source in sources:
        assert len(rec.select(source, "block", "align_w_v1", "v", 1)) == 4


def test_init_and_final_v1_vectors_are_kept_for_the_pca_plot():
    vectors = smoke_result().record.vectors
    assert set(vectors) == {"W v1 init", "W v1 final"}
    assert torch.tensor(vectors["W v1 final"]).shape == (4, 32)


def test_power_iteration_agrees_with_exact_svd():
    gen = torch.Generator().manual_seed(0)
    M = torch.randn(6, 32, 4, generator=gen) @ torch.randn(6, 4, 32, generator=gen)
    M = M + 0.01 * torch.randn(6, 32, 32, generator=gen)
    exact = torch.linalg.svd(M.double()).Vh[:, 0]
    warm = exact + 0.2 * torch.randn(6, 32, generator=gen, dtype=torch.float64)
    for start in (None, warm):
        v = top_right_vectors(M, start)
        assert v.dtype == torch.float64 and v.shape == (6, 32)
        assert bool(((v * exact).sum(-1).abs() > 1 - 1e-6).all())
    assert adjacent_abs_cos(exact).shape == (5,)
