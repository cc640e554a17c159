"""Tracking: tidy series content, step-0 gradients, cumulative gradient, rotation, power iteration."""

from __future__ import annotations

import torch
from sim_helpers import mnist5k, smoke_spec

from geodrift.linalg import batched_svd
from geodrift.metrics import adjacent_abs_cos
from geodrift.sim.ensemble import run_group
from geodrift.sim.track import _top_right_vectors


def _run():
    return run_group(smoke_spec(0), [42], mnist5k())[0]


def test_series_has_first_backward_pass_interval_steps_and_final_step():
    rec = _run()
    steps = sorted({r[0] for r in rec.rows})
    assert steps == [0, 10, 20, 30]
    assert rec.value("G", "cont", "v", 1, step=0) == rec.summary["G0 v1"]


def test_cumulative_gradient_equals_the_gradient_at_step_zero():
    rec = _run()
    assert abs(rec.value("Gcum", "cont", "v", 1, step=0) - rec.value("G", "cont", "v", 1, step=0)) < 1e-4


def test_delta_gw_is_cumulative_minus_weight_continuity():
    rec = _run()
    for step in (0, 10, 30):
        expected = rec.value("Gcum", "cont", "v", 1, step=step) - rec.value("W", "cont", "v", 1, step=step)
        assert abs(rec.value("Gcum", "delta_gw", step=step) - expected) < 1e-6


def test_rotation_is_zero_at_the_reference_step_and_absent_before():
    rec = _run()  # reference = one epoch = 10 steps in the smoke preset
    angles = rec.select("W", "rotation_deg", layer="all")
    assert min(s for s, _ in angles) == 10
    assert all(v < 1e-2 for s, v in angles if s == 10)
    assert all(0.0 <= v <= 90.0 for _, v in angles)


def test_relative_change_starts_at_zero_and_grows():
    rec = _run()
    series = rec.select("W", "rel_change")
    assert series[0] == (0, 0.0) and series[-1][1] > 0.01


def test_every_continuity_value_is_in_unit_interval_and_has_its_null():
    rec = _run()
    for r in rec.rows:
        if r[3] in ("cont", "s2wa", "align_w_v1"):
            assert 0.0 <= r[7] <= 1.0 + 1e-6, r
    assert rec.select("W", "null_mean", "v", 1) and rec.select("G", "null_excess", "u", 2)


def test_ema_alignments_are_tracked_for_each_beta():
    rec = _run()
    assert {r[2] for r in rec.rows if r[3] == "align_w_v1"} == {"G", "Gcum", "EMA0.9", "EMA0.99"}


def test_power_iteration_agrees_with_exact_svd():
    gen = torch.Generator().manual_seed(0)
    M = torch.randn(6, 32, 4, generator=gen) @ torch.randn(6, 4, 32, generator=gen)
    M = M + 0.01 * torch.randn(6, 32, 32, generator=gen)
    _, _, Vh = batched_svd(M)
    exact = Vh[:, 0].double()
    warm = exact + 0.2 * torch.randn(6, 32, generator=gen, dtype=torch.float64)
    for start in (None, warm):
        v = _top_right_vectors(M, start)
        assert bool(((v * exact).sum(-1).abs() > 1 - 1e-6).all())
    assert adjacent_abs_cos(exact).shape == (5,)
