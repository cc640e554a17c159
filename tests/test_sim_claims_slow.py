"""Slow: the paper's qualitative toy-MLP claims on the embedded MNIST subset (run with -m slow).

Thresholds come from the random-vector theory of Eq. 1, never from the paper's values: for
``d = 256`` and ``L = 16`` random unit vectors give a mean adjacent ``|cos|`` of
``floor = sqrt(2/(pi d)) = 0.0499`` with standard deviation ``noise = sqrt((1-2/pi)/d)/sqrt(L-1)
= 0.0097``. "Coherent" means above ``floor + 5 noise = 0.098``; "A far above B" means a gap larger
than ``5 noise`` (one seed, so no seed spread is available). Runs: 938 steps = 2 paper epochs,
seed 42, batch 128, Adam 1e-3 (about 1 minute each on a free core).
"""

from __future__ import annotations

import functools

import pytest

from geodrift.sim.config import ImageData, MLPConfig, RunSpec, TrackConfig, TrainConfig
from geodrift.sim.reproduce import noise_floor
from geodrift.sim.run import run

pytestmark = pytest.mark.slow
FLOOR, NOISE = noise_floor(256, 16)
COHERENT = FLOOR + 5 * NOISE
STEPS = 938


@functools.cache
def _summary(residual: bool, activation: str) -> dict:
    model = MLPConfig(residual=residual, activation=activation)
    spec = RunSpec("mlp", model.name(), model, ImageData(), TrainConfig(steps=STEPS), TrackConfig())
    return run(spec, [42], device="cpu")[0].record.summary


def test_res_relu_weight_v1_is_far_above_res_none_and_res_radial():
    relu, none, radial = _summary(True, "relu"), _summary(True, "none"), _summary(True, "radial")
    assert relu["W v1"] > COHERENT
    assert relu["W v1"] - none["W v1"] > 5 * NOISE
    assert relu["W v1"] - radial["W v1"] > 5 * NOISE


def test_residual_gradients_are_coherent_from_the_first_backward_pass():
    relu = _summary(True, "relu")
    assert relu["G0 v1"] > COHERENT
    assert relu["W0 v1"] < COHERENT  # PyTorch's random init is at the floor


def test_no_residual_gradient_continuity_is_near_the_floor():
    # "Near the floor" = not coherent: either below floor + 5 noise, or within 5 noise of the
    # permutation null. The null matters here: NoRes+ReLU's gradient v1 is 0.13 raw at this step
    # count (above the random-vector floor) but only ~0.01 above its permutation null - its
    # vectors share a coordinate distribution (sparse, same-signed), not a frame.
    for act in ("relu", "none"):
        s = _summary(False, act)
        assert s["G v1"] < COHERENT or s["G v1 excess"] < 5 * NOISE, (act, s["G v1"], s["G v1 excess"])


def test_delta_gw_separates_rotation_preserving_from_symmetry_breaking_activations():
    relu, none, radial = _summary(True, "relu"), _summary(True, "none"), _summary(True, "radial")
    assert none["delta_gw"] - relu["delta_gw"] > 5 * NOISE
    assert radial["delta_gw"] - relu["delta_gw"] > 5 * NOISE
