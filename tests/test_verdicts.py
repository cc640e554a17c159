"""The two per-projection verdicts: a shared frame (Eq. 1) is not a depth path.

The path criterion (``geodrift.continuity.verdicts.PATH_CRITERION``): the depth order beats the
layer-order null (a permutation p-value) and the |cos| excess over the permutation null decays with
layer distance. Its false-positive rate is calibrated in benchmarks/RESULTS_verdicts.md; here each
part is checked on stacks whose answer is known by construction, and on a real model written to disk
in depth order and layer-shuffled.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from _checkpoints import hf_config, write_hf_folder

import geodrift
from geodrift.continuity import Report
from geodrift.continuity.bank import PermutationBank
from geodrift.continuity.trajectory import ORDER_EXACT_MAX, order_null, trajectory_shape
from geodrift.continuity.verdicts import (
    ORDER_ALPHA,
    PATH_MIN_LAYERS,
    depth_path,
    is_continuity,
    path_verdict,
    path_verdicts,
)
from geodrift.render.scan import criteria_lines, summary_line
from geodrift.scanner.readers import canonical_keys, load_canonical, open_checkpoint
from geodrift.weights import HF_LLAMA_PROJECTIONS


def _arc(n_layers: int, dim: int = 64, seed: int = 0) -> torch.Tensor:
    # Layers along an arc in a random 2-plane, with a little noise: a path in depth.
    g = torch.Generator().manual_seed(seed)
    plane = torch.linalg.qr(torch.randn(dim, 2, generator=g)).Q.T
    angles = torch.linspace(0, 1.5, n_layers)
    return torch.stack([angles.cos(), angles.sin()], 1) @ plane + 0.01 * torch.randn(n_layers, dim, generator=g)


def _shape(vectors: torch.Tensor, seed: int = 0, space: str = "v", role: str = "attn_q"):  # type: ignore[no-untyped-def]
    return trajectory_shape(vectors, role, role, space, 40, torch.Generator().manual_seed(seed))


def test_a_path_in_depth_holds_and_the_same_layers_shuffled_do_not():
    arc = _arc(16)
    assert depth_path(_shape(arc)) is True
    shuffled = arc[torch.randperm(16, generator=torch.Generator().manual_seed(1))]
    t = _shape(shuffled)
    assert depth_path(t) is False and t.order_p > ORDER_ALPHA


def test_a_frame_every_layer_shares_is_not_a_path():
    # The same direction plus independent noise in every layer: Eq. 1 far above its null, no order in depth.
    g = torch.Generator().manual_seed(3)
    frame = torch.randn(256, generator=g) + 0.6 * torch.randn(30, 256, generator=g)
    t = _shape(frame)
    assert t.lag_abs_cos[0] > t.lag_null_mean[0] + 10 * t.lag_null_std[0]
    assert depth_path(t) is False


def test_a_raw_cos_that_decays_only_through_the_coordinate_profile_is_not_a_path():
    # Independent directions mixed with the uniform vector in a proportion that changes with depth (as
    # SmolLM2's Gate u1): nearby layers have closer |cos| in any coordinate order, so the depth order beats
    # the layer-order null, but the excess over the permutation null is ~0 at every lag: part (b) refuses it.
    g = torch.Generator().manual_seed(5)
    theta = torch.linspace(0.1, 1.5, 16)
    noise = torch.randn(16, 256, generator=g)
    noise = noise - noise.mean(1, keepdim=True)
    noise = noise / noise.norm(dim=1, keepdim=True)
    x = theta.cos()[:, None] * torch.full((256,), 256 ** -0.5) + theta.sin()[:, None] * noise
    t = _shape(x, space="u", role="mlp_gate")
    assert t.order_p <= ORDER_ALPHA  # part (a) alone would call it a path
    assert depth_path(t) is False


def test_too_few_layers_for_the_order_test_give_no_path_verdict():
    assert PATH_MIN_LAYERS == 7  # 2 / 6! = 0.0028 > 0.00135 >= 2 / 7! = 0.0004
    assert depth_path(_shape(_arc(6))) is None
    assert path_verdict("v", {"v": _shape(_arc(6))})[0] == "n/a"
    assert path_verdict("v", {"v": _shape(_arc(7))})[0] == "holds"


def test_the_exact_order_null_depends_on_the_set_of_layers_not_their_order():
    arc = _arc(7)
    mean, std, p = order_null(arc, PermutationBank(torch.Generator()))
    assert math.factorial(7) <= ORDER_EXACT_MAX and p == pytest.approx(2 / math.factorial(7))  # it and its reverse
    moved = order_null(arc[torch.tensor([3, 0, 6, 1, 5, 2, 4])], PermutationBank(torch.Generator()))
    assert moved[:2] == pytest.approx((mean, std)) and moved[2] > 0.05


# The embedded SmolLM2-135M's projections (dequantised Q4_1), written back out as a Hugging Face folder.
def _embedded_state(layers: list[int], order: list[int]) -> dict[str, torch.Tensor]:
    # Layer layers[i] of the embedded model becomes layer order[i] of the new state dict.
    ckpt = open_checkpoint(None)
    keep = dict(zip(layers, order, strict=True))
    return {f"model.layers.{keep[layer]}.{HF_LLAMA_PROJECTIONS[role]}.weight": load_canonical(ckpt, (role, layer))
            for role, layer in canonical_keys(ckpt) if role in HF_LLAMA_PROJECTIONS and layer in keep}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Report]:
    # 12 of SmolLM2's 30 layers (0-11; the whole model would add about a minute to the default run), written
    # in depth order and layer-shuffled (the first draw of seed 0, not chosen), and scanned from disk.
    folder = tmp_path_factory.mktemp("embedded")
    config = hf_config("llama", n_layers=12, d=576, n_heads=9, n_kv=3, d_ff=1536, vocab=49152)
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0)).tolist()
    out = {}
    for name, layers_to in (("in depth", list(range(12))), ("shuffled", order)):
        path = write_hf_folder(folder / name.replace(" ", "-"), _embedded_state(list(range(12)), layers_to), config)
        out[name] = geodrift.scan(path, null_draws=30)
    return out


def test_a_layer_shuffled_copy_of_the_embedded_model_keeps_its_frame_and_loses_its_path(embedded):
    # A fair test on 12 layers: the path's false-positive control is a permutation test of the layer order,
    # valid at any depth from 7 layers, and the same 12 layers in depth order do show paths (K, Gate, Up,
    # Down), so the check can fail. Per projection, a shuffled model gets "path holds" with probability at
    # most 0.00135 (the stated rate; benchmarks/RESULTS_verdicts.md measures it).
    before, after = embedded["in depth"], embedded["shuffled"]
    assert {r.label for r in before.roles if r.path_verdict == "holds" and r.predicted_space} >= {"K", "Gate", "Up",
                                                                                                     "Down"}
    predicted = [r for r in after.roles if r.predicted_space is not None]
    assert [r.label for r in predicted if r.path_verdict == "holds"] == []
    assert all(r.verdict == "holds" for r in predicted)  # the shared frame survives the shuffle
    assert not any(depth_path(t) for t in after.trajectory)  # no space of any projection shows a path


def test_the_summary_says_continuity_only_where_frame_and_path_both_hold(embedded):
    given = {"attn_q": ("holds", "holds"), "attn_k": ("holds", "fails"), "attn_v": ("holds", "holds"),
             "attn_o": ("fails", "holds")}
    report = replace(embedded["in depth"])
    report.roles = [replace(r, verdict=given[r.role][0], path_verdict=given[r.role][1])
                    for r in report.roles if r.role in given]
    line = summary_line(report)
    assert line.startswith("frame 3/4, path 3/4 predictions hold on ")
    assert "continuity (frame and path) in Q;" in line
    assert "frame holds, path fails: K" in line and "frame fails, path holds: O" in line
    assert "V (neither predicted): no frame, no path, as predicted" in line  # what was found, not "holds"
    report.roles[2] = replace(report.roles[2], verdict="fails")
    assert "V (neither predicted): a frame (not predicted), no path" in summary_line(report)
    assert criteria_lines(report)[2].startswith("V: a frame (not predicted), no path — frame criterion: neither")
    assert [is_continuity(r) for r in report.roles] == [True, False, False, False]
    lines = criteria_lines(report)
    assert lines[0].startswith("Q: frame holds, path holds — frame criterion: v1 beats its permutation null")
    assert any("the paper" in line and "Eq. 1" in line for line in lines)  # the frame is all Eq. 1 claims
    assert any(line.startswith("path criterion: depth path") for line in lines)


def test_v_has_no_path_while_its_path_is_weaker_than_every_peers(embedded):
    report = embedded["in depth"]
    v_input = next(t for t in report.trajectory if (t.role, t.space) == ("attn_v", "v"))
    # V's input space made a path stronger than any peer's: the relative verdict fails.
    strong = replace(v_input, order_p=0.0, order_null_mean=0.0, order_null_std=1e-6,
                     lag_abs_cos=[1.0] + [0.0] * (len(v_input.lags) - 1))
    trajectory = [strong if t is v_input else t for t in report.trajectory]
    assert next(r for r in path_verdicts(report.roles, trajectory) if r.role == "attn_v").path_verdict == "fails"
    # No path in either space: holds.
    flat = [replace(t, order_p=1.0) if t.role == "attn_v" else t for t in report.trajectory]
    assert next(r for r in path_verdicts(report.roles, flat) if r.role == "attn_v").path_verdict == "holds"
