"""The continuity report on weights with known structure (in-memory WeightSets)."""

from __future__ import annotations

import json

import torch

from geodrift.analysis import analyze_weightset
from geodrift.weights import WeightSet


def _shared_frame_weights(L: int = 6, d_out: int = 40, d_in: int = 30, seed: int = 0) -> dict:
    # Every layer shares its top input direction v (plus noise); output directions are independent.
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d_in, generator=g)
    v /= v.norm()
    out = {}
    for layer in range(L):
        u = torch.randn(d_out, generator=g)
        out[("attn_q", layer)] = 5 * torch.outer(u / u.norm(), v) + 0.05 * torch.randn(d_out, d_in, generator=g)
    return out


def test_a_shared_input_direction_is_reported_continuous_in_v_and_not_in_u():
    report = analyze_weightset(WeightSet.from_tensors(_shared_frame_weights()), k=2, null_draws=50)
    (q,) = report.roles
    v1, u1 = q.spaces["v"].vectors[0], q.spaces["u"].vectors[0]
    assert v1.mean > 0.99 and v1.z > 10
    assert u1.z < 3
    assert q.predicted_space == "v" and q.verdict == "holds"


def test_predicting_the_wrong_space_gives_a_failing_verdict():
    weights = {("attn_o", layer): w for (_, layer), w in _shared_frame_weights().items()}
    (o,) = analyze_weightset(WeightSet.from_tensors(weights), k=1, null_draws=50).roles
    assert o.predicted_space == "u" and o.verdict == "fails"


def test_report_is_json_serialisable_and_deterministic_given_the_seed():
    ws = WeightSet.from_tensors(_shared_frame_weights())
    a = analyze_weightset(ws, k=2, null_draws=20, seed=3).to_dict()
    b = analyze_weightset(ws, k=2, null_draws=20, seed=3).to_dict()
    assert json.dumps(a) == json.dumps(b)


def test_full_spectrum_makes_the_sigma2_bounds_meet():
    ws = WeightSet.from_tensors(_shared_frame_weights())
    (q,) = analyze_weightset(ws, k=2, null_draws=10, full_spectrum=True).roles
    s = q.spaces["v"]
    assert abs(s.sigma2_wa_upper - s.sigma2_wa) < 1e-5
    (q_top,) = analyze_weightset(ws, k=2, null_draws=10).roles
    t = q_top.spaces["v"]
    assert t.sigma2_wa - 1e-5 <= s.sigma2_wa <= t.sigma2_wa_upper + 1e-5


def test_roles_with_a_single_layer_are_skipped_with_a_note():
    weights = _shared_frame_weights(L=3)
    weights[("attn_k", 0)] = torch.randn(10, 30)
    report = analyze_weightset(WeightSet.from_tensors(weights), k=1, null_draws=10)
    assert [r.role for r in report.roles] == ["attn_q"]
    assert any("attn_k" in note for note in report.notes)
