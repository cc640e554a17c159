"""Claim verdicts: criteria from noise floors and seed spread; they can fail and say n/a when not run."""

from __future__ import annotations

import math
import warnings

import pytest
from sim_helpers import smoke_result, smoke_spec

from geodrift.continuity.verdicts import Judge, Stat, spearman
from geodrift.sim.reproduce import _mlp_claims, assemble, noise_floor

FLOOR, NOISE = noise_floor(256, 16)


def _stats(values: dict[str, dict[str, tuple[float, float]]]) -> dict[str, dict[str, Stat]]:
    return {lab: {c: Stat(m, s, 3) for c, (m, s) in cols.items()} for lab, cols in values.items()}


def judge(preset: str, stats: dict[str, dict[str, Stat]]):  # type: ignore[no-untyped-def]
    return _mlp_claims(preset, Judge(stats, {}, FLOOR, NOISE))


def _verdict(verdicts, start):  # type: ignore[no-untyped-def]
    return next(v for v in verdicts if v.claim.startswith(start))


def test_noise_floor_matches_the_random_vector_theory():
    assert FLOOR == math.sqrt(2 / (math.pi * 256))
    assert round(NOISE, 4) == 0.0097


def test_transfer_claim_holds_only_with_a_margin_of_five_seed_std():
    base = {"Res+None": {"G v1": (0.9, 0.02), "W v1": (0.2, 0.04)}}
    far = _stats({**base, "Res+ReLU": {"W v1": (0.95, 0.01)}})
    near = _stats({**base, "Res+ReLU": {"W v1": (0.30, 0.04)}})  # diff 0.1 < 5 * 0.032
    assert _verdict(judge("table1", far), "Residual alone").verdict == "holds"
    assert _verdict(judge("table1", near), "Residual alone").verdict == "fails"


def test_nores_gradient_claim_fails_when_gradients_are_coherent():
    coherent = _stats({lab: {"G v1": (0.5, 0.01)} for lab in ("NoRes+GELU", "NoRes+ReLU", "NoRes+None")})
    at_floor = _stats({lab: {"G v1": (0.06, 0.01)} for lab in ("NoRes+GELU", "NoRes+ReLU", "NoRes+None")})
    assert _verdict(judge("table1", coherent), "No residual").verdict == "fails"
    assert _verdict(judge("table1", at_floor), "No residual").verdict == "holds"


def test_coherent_needs_an_excess_over_the_permutation_null_when_one_is_recorded():
    # Raw G v1 far above the floor but within 5 noise of its permutation null: not coherent.
    labels = ("NoRes+GELU", "NoRes+ReLU", "NoRes+None")
    raw_only = _stats({lab: {"G v1": (0.13, 0.01)} for lab in labels})
    with_null = _stats({lab: {"G v1": (0.13, 0.01), "G v1 excess": (0.01, 0.005)} for lab in labels})
    assert _verdict(judge("table1", raw_only), "No residual").verdict == "fails"
    assert _verdict(judge("table1", with_null), "No residual").verdict == "holds"


def test_claims_about_configurations_not_run_are_not_applicable():
    verdicts = judge("table1", _stats({"Res+ReLU": {"W v1": (0.9, 0.01)}}))
    tanh = _verdict(verdicts, "Tanh")
    assert tanh.verdict == "n/a" and tanh.measured == "configuration not run"
    assert judge("smoke", _stats({"Res+ReLU": {"W v1": (0.9, 0.01)}})) == []


def test_single_seed_uses_the_noise_floor_as_margin():
    one = {"Res+None": {"G v1": Stat(0.9, float("nan"), 1), "W v1": Stat(0.2, float("nan"), 1)},
           "Res+ReLU": {"W v1": Stat(0.2 + 4 * NOISE, float("nan"), 1)}}
    assert _verdict(judge("table1", one), "Residual alone").verdict == "fails"
    one["Res+ReLU"]["W v1"] = Stat(0.2 + 6 * NOISE, float("nan"), 1)
    assert _verdict(judge("table1", one), "Residual alone").verdict == "holds"


def test_table3_transfer_claim_uses_the_spearman_rank_correlation():
    chain = ["Adam β1=.9, β2=0 (ε=1), default init", "β2=0, init std 0.005", "β2=0, init std 0.001",
             "β2=0, init std 0.0001"]
    rising = _stats({lab: {"W v1": (0.1 + 0.2 * i, 0.01), "rel_change": (0.01 * 10**i, 0.0)}
                     for i, lab in enumerate(chain)})
    falling = _stats({lab: {"W v1": (0.7 - 0.2 * i, 0.01), "rel_change": (0.01 * 10**i, 0.0)}
                      for i, lab in enumerate(chain)})
    assert _verdict(judge("table3", rising), "‖ΔW‖/‖W0‖ controls").verdict == "holds"
    assert _verdict(judge("table3", falling), "‖ΔW‖/‖W0‖ controls").verdict == "fails"


def test_spearman_and_stat():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # average ranks for ties (1, 2.5, 2.5, 4): the Pearson correlation of the ranks
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about the constant input
        assert spearman([1, 1, 1], [1, 2, 3]) == 0.0  # undefined -> 0
    s = Stat.of([1.0, 3.0, None, float("nan")])
    assert (s.mean, s.n) == (2.0, 2) and s.std == pytest.approx(math.sqrt(2))
    assert Stat.of([]).n == 0 and math.isnan(Stat.of([0.5]).std)


def test_assemble_judges_real_runs_and_carries_their_nulls():
    # The smoke preset's two configurations are labelled like Table 1's Res+ReLU and Res+None rows, so
    # assembling them as table1 judges the claims that need only those two (the others are n/a).
    specs = [smoke_spec(0), smoke_spec(1)]
    results = [smoke_result(0, 42), smoke_result(1, 42)]
    rep = assemble("mlp", "table1", specs, results, [42])
    assert rep.stats["Res+ReLU"]["W v1"].mean == results[0].record.summary["W v1"]
    assert rep.stats["Res+ReLU"]["W v1"].n == 1
    assert {v.verdict for v in rep.verdicts} <= {"holds", "fails", "n/a"}
    residual = _verdict(rep.verdicts, "Residual alone")
    assert residual.verdict in ("holds", "fails") and "Res+None G v1" in residual.measured
    assert _verdict(rep.verdicts, "Tanh").verdict == "n/a"
    assert rep.floor == noise_floor(32, 4)[0] and any("permutation null" in n for n in rep.notes)
    assert rep.to_dict()["runs"][0]["summary"]["W v1 null"] == results[0].record.summary["W v1 null"]
