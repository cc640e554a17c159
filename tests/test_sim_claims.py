"""Claim verdicts: criteria from noise floors and seed spread; they can fail and say n/a when not run."""

from __future__ import annotations

import math

from geodrift.sim.claims import Stat, judge
from geodrift.sim.reproduce import noise_floor

FLOOR, NOISE = noise_floor(256, 16)


def _stats(values: dict[str, dict[str, tuple[float, float]]]) -> dict[str, dict[str, Stat]]:
    return {lab: {c: Stat(m, s, 3) for c, (m, s) in cols.items()} for lab, cols in values.items()}


def _verdict(verdicts, start):
    return next(v for v in verdicts if v.claim.startswith(start))


def test_noise_floor_matches_the_random_vector_theory():
    assert FLOOR == math.sqrt(2 / (math.pi * 256))
    assert round(NOISE, 4) == 0.0097


def test_transfer_claim_holds_only_with_a_margin_of_five_seed_std():
    base = {"Res+None": {"G v1": (0.9, 0.02), "W v1": (0.2, 0.04)}}
    far = _stats({**base, "Res+ReLU": {"W v1": (0.95, 0.01)}})
    near = _stats({**base, "Res+ReLU": {"W v1": (0.30, 0.04)}})  # diff 0.1 < 5 * 0.032
    assert _verdict(judge("table1", far, {}, FLOOR, NOISE), "Residual alone").verdict == "holds"
    assert _verdict(judge("table1", near, {}, FLOOR, NOISE), "Residual alone").verdict == "fails"


def test_nores_gradient_claim_fails_when_gradients_are_coherent():
    coherent = _stats({lab: {"G v1": (0.5, 0.01)} for lab in ("NoRes+GELU", "NoRes+ReLU", "NoRes+None")})
    at_floor = _stats({lab: {"G v1": (0.06, 0.01)} for lab in ("NoRes+GELU", "NoRes+ReLU", "NoRes+None")})
    assert _verdict(judge("table1", coherent, {}, FLOOR, NOISE), "No residual").verdict == "fails"
    assert _verdict(judge("table1", at_floor, {}, FLOOR, NOISE), "No residual").verdict == "holds"


def test_claims_about_configurations_not_run_are_not_applicable():
    verdicts = judge("table1", _stats({"Res+ReLU": {"W v1": (0.9, 0.01)}}), {}, FLOOR, NOISE)
    assert _verdict(verdicts, "Tanh").verdict == "n/a"


def test_single_seed_uses_the_noise_floor_as_margin():
    one = {"Res+None": {"G v1": Stat(0.9, float("nan"), 1), "W v1": Stat(0.2, float("nan"), 1)},
           "Res+ReLU": {"W v1": Stat(0.2 + 4 * NOISE, float("nan"), 1)}}
    assert _verdict(judge("table1", one, {}, FLOOR, NOISE), "Residual alone").verdict == "fails"
    one["Res+ReLU"]["W v1"] = Stat(0.2 + 6 * NOISE, float("nan"), 1)
    assert _verdict(judge("table1", one, {}, FLOOR, NOISE), "Residual alone").verdict == "holds"
