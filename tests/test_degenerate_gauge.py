"""Alignment and the gauge diagnosis on degenerate float32 weights (issue 39 item 3, found by the seed-4747 fuzz):
a pruned (all-zero) V head or an all-zero layer gives finite numbers or a one-line refusal, never a traceback.

Before: ``_TINY = 1e-300`` is 0 in float32, so a zero row's cosine was 0/0 = NaN and ``linear_sum_assignment``
raised "matrix contains invalid numeric entries"; the diagnosis took ``log(0)`` of an all-zero head's excess.
"""

from __future__ import annotations

import math

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

from geodrift.gauge.align_layer import align_layer
from geodrift.gauge.diagnose import layer_gauge
from geodrift.gauge.orbit import GaugeShape, layer_key, toy_state_dict

NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.parametrize("head_maps", ["general", "orthogonal", "none"])
@pytest.mark.parametrize("zeroed", ["v_head", "layer"])
def test_align_layer_in_float32_with_a_zero_head_or_layer_gives_finite_weights(head_maps, zeroed):
    shape = GaugeShape(1, 4, 2, 4)
    a, b = (toy_state_dict(shape, 16, 24, 30, torch.Generator().manual_seed(s), dtype=torch.float32) for s in (0, 1))
    ref, layer = ({n: sd[layer_key(0, n)] for n in NAMES} for sd in (a, b))
    if zeroed == "v_head":
        layer["v_proj"][:shape.head_dim] = 0  # KV head 0 pruned
    else:
        layer = {n: torch.zeros_like(w) for n, w in layer.items()}
    out, info = align_layer(ref, layer, shape, 0, head_maps=head_maps)
    assert all(bool(torch.isfinite(w).all()) for w in out.values())
    assert math.isfinite(info.matched_cosine) and math.isfinite(info.mutual_best_share)


def test_the_gauge_diagnosis_of_an_all_zero_layer_is_finite():
    shape = GaugeShape(1, 4, 2, 4)
    sd = toy_state_dict(shape, 16, 24, 30, torch.Generator().manual_seed(0))
    for n in NAMES:
        sd[layer_key(0, n)] = torch.zeros_like(sd[layer_key(0, n)])
    values = layer_gauge(sd, shape, 0).values
    assert all(math.isfinite(v) for v in values.values()) and values["vo"] == 0.0


@pytest.mark.parametrize("command", [["compare", "--align", "--head-maps", "general"], ["drift"],
                                     ["scan", "--full"]])
def test_the_commands_on_a_pruned_head_or_zero_layer_exit_0_or_refuse_in_one_line(tmp_path, capsys, command):
    from geodrift.cli.main import main

    base = llama_state(2, 32, 4, 2, 48, vocab=64, seed=1)
    config = hf_config(n_layers=2, d=32, vocab=64)
    good = write_hf_folder(tmp_path / "good", base, config, dtype=torch.float32)
    sick = {k: v.clone() for k, v in base.items()}
    sick["model.layers.0.self_attn.v_proj.weight"][:8] = 0  # a pruned KV head
    for name in [n for n in base if n.startswith("model.layers.1.") and n.endswith("proj.weight")]:
        sick[name] = torch.zeros_like(base[name])  # an all-zero layer
    bad = write_hf_folder(tmp_path / "sick", sick, config, dtype=torch.float32)
    models = [str(bad)] if command[0] == "scan" else [str(good), str(bad)]
    argv = [command[0], *models, *command[1:], "--k", "2", "--null-draws", "4", "--quiet", "--json"]
    with pytest.raises(SystemExit) as done:
        main(argv)
        raise SystemExit(0)
    err = capsys.readouterr().err
    assert done.value.code in (0, None) or (done.value.code == 2 and len(err.strip().splitlines()) == 1), err
