"""Gauge diagnosis (issues 31 and 42, item 4): where each layer sits on each generator's orbit against the band of
trained models; AWQ and SmoothQuant folds from real calibration activations, a QuaRot Hadamard rotation, V/O maps
of condition 1000 and Q/K pair maps keep the function of the embedded SmolLM2 and are each flagged; the untouched
model is not."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

import geodrift
from geodrift.cli.main import main
from geodrift.compress.awq_fold import activation_scales, fold_awq
from geodrift.compress.gauge_folds import fold_smoothquant, input_maxima, quarot
from geodrift.gauge.align import shape_of
from geodrift.gauge.diagnose import FAMILIES, diagnose, layer_gauge
from geodrift.gauge.orbit import (
    GaugeShape,
    layer_key,
    random_conditioned,
    scale_mlp,
    toy_state_dict,
    transform_qk_all,
    transform_vo,
)
from geodrift.lm.llama import LlamaLM
from geodrift.pretrained import llama_from_checkpoint
from geodrift.scanner.gauge_diagnosis import diagnose_checkpoint
from geodrift.scanner.readers import open_checkpoint


def test_the_up_down_imbalance_moves_by_exactly_twice_the_log_scale():
    shape = GaugeShape(1, 2, 1, 4)
    sd = toy_state_dict(shape, d_model=8, d_ff=16, vocab=5, generator=torch.Generator().manual_seed(0))
    log_s = torch.randn(16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    moved = scale_mlp(sd, 0, log_s.exp())

    def log_ratio(state: dict[str, torch.Tensor]) -> torch.Tensor:
        up = state[layer_key(0, "up_proj")] * state[layer_key(0, "post_attention_layernorm")]
        return torch.log(up.norm(dim=1) / state[layer_key(0, "down_proj")].norm(dim=0))

    torch.testing.assert_close(log_ratio(moved) - log_ratio(sd), 2 * log_s)
    assert layer_gauge(moved, shape, 0).values["mlp"] == pytest.approx(float(log_ratio(moved).std()))
    # the families of the other generators are untouched by an Up/Down scaling
    before, after = layer_gauge(sd, shape, 0), layer_gauge(moved, shape, 0)
    assert after.values["qk"] == before.values["qk"] and after.values["vo"] == before.values["vo"]


def test_an_awq_fold_keeps_the_logits_of_a_llama_and_moves_its_units_off_balance():
    model = LlamaLM(64, 32, 2, 4, 64, n_kv_heads=2, init_std=0.1, generator=torch.Generator().manual_seed(0)).double()
    ids = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))
    scales = activation_scales(model, ids, alpha=1.0)
    sd = model.state_dict()
    shape = shape_of(sd, 4, 2)
    other = copy.deepcopy(model)
    other.load_state_dict(fold_awq(sd, shape, scales))
    with torch.no_grad():
        torch.testing.assert_close(other(ids[:, :-1]), model(ids[:, :-1]))
    before = diagnose([(0, sd), (1, sd)], shape, "init")
    after = diagnose([(0, other.state_dict()), (1, other.state_dict())], shape, "awq")
    assert after.medians["mlp"] > before.medians["mlp"] and after.medians["mlp_in"] > before.medians["mlp_in"]
    assert after.medians["qk"] == before.medians["qk"] and after.medians["vo"] == before.medians["vo"]


@pytest.mark.heavy  # every layer of the embedded model
def test_the_embedded_smollm2_is_diagnosed_layer_by_layer_and_not_flagged():
    diag = diagnose_checkpoint(open_checkpoint(None), layers=[0, 1, 2])
    assert not isinstance(diag, str)
    assert [x.layer for x in diag.layers] == [0, 1, 2]
    whole = diagnose_checkpoint(open_checkpoint(None))
    assert not isinstance(whole, str) and not whole.flagged and whole.summary().endswith(": balanced")


@pytest.fixture(scope="module")
def smollm2() -> tuple[dict[str, torch.Tensor], GaugeShape]:
    model = llama_from_checkpoint(open_checkpoint(None))
    sd = {k: v.detach().double() for k, v in model.state_dict().items()}
    return sd, shape_of(sd, 9, 3)


def _flags(sd: dict[str, torch.Tensor], shape: GaugeShape) -> list[str]:
    return diagnose([(layer, sd) for layer in range(shape.n_layers)], shape, "x").flagged_families


@pytest.mark.heavy  # the embedded model under three gauges
def test_a_rotation_v_o_maps_and_q_k_pair_maps_of_smollm2_are_each_flagged(smollm2) -> None:  # type: ignore[no-untyped-def]
    # the maps that need no activations (AWQ and SmoothQuant: the slow test below); each keeps the function
    # (tests/test_architectures.py, geodrift prove) and moves the checkpoint along its generator's orbit
    sd, shape = smollm2
    g = torch.Generator().manual_seed(0)
    assert _flags(sd, shape) == []
    assert "residual" in _flags(quarot(sd, shape, g), shape)
    vo = sd
    for layer in range(shape.n_layers):
        for kv in range(shape.n_kv_heads):
            vo = transform_vo(vo, shape, layer, kv, random_conditioned(shape.head_dim, 1000.0, g))
    assert "vo" in _flags(vo, shape)
    qk = sd
    for layer in range(shape.n_layers):
        for kv in range(shape.n_kv_heads):
            qk = transform_qk_all(qk, shape, layer, kv, torch.randn(shape.pairs, generator=g, dtype=torch.float64).exp(),
                                  torch.rand(shape.pairs, generator=g, dtype=torch.float64) * 6.283185307179586)
    assert "qk" in _flags(qk, shape)


def test_scan_full_prints_writes_and_draws_the_diagnosis(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    folder = write_hf_folder(tmp_path / "m", llama_state(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60),
                             hf_config(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60), dtype=torch.float32)
    out, plot = tmp_path / "s.json", tmp_path / "s.png"
    with pytest.raises(SystemExit) as done:
        main(["scan", str(folder), "--full", "--null-draws", "4", "--k", "2", "--quiet", "--json-out", str(out),
              "--plot", str(plot)])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "Gauge diagnosis" in printed and "gauge: " in printed
    doc = json.loads(out.read_text())["gauge_diagnosis"]
    assert len(doc["layers"]) == 3 and set(doc["layers"][0]["values"]) == set(FAMILIES)
    assert doc["gauge"] == "varies" and doc["moved_by"]["mlp"] == ["mlp_scale"]
    assert (tmp_path / "s_gauge.png").stat().st_size > 0
    gemma = write_hf_folder(tmp_path / "g", llama_state(gemma2=True), hf_config("gemma2"), dtype=torch.float32)
    with pytest.raises(SystemExit) as done:
        main(["scan", str(gemma), "--full", "--null-draws", "4", "--k", "2", "--quiet", "--json-out",
              str(tmp_path / "g.json")])
    assert done.value.code == 0 and "gauge diagnosis: " in capsys.readouterr().out
    assert "gauge_diagnosis" not in json.loads((tmp_path / "g.json").read_text())


@pytest.mark.slow  # a few minutes: the compress calibration text and the whole model
def test_awq_and_smoothquant_folds_of_smollm2_from_real_calibration_keep_the_logits_are_flagged_and_leave_canonical():
    from geodrift.compress.sources import load_compress_setup

    setup, texts = load_compress_setup(None, seq_len=64, calib_windows=8, eval_count=2)
    model = setup.model
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    shape = shape_of(sd, 9, 3)
    folds = {"awq": fold_awq(sd, shape, activation_scales(model, texts.draws[0])),
             "smoothquant": fold_smoothquant(sd, shape, input_maxima(model, texts.draws[0]))}
    ids = texts.evaluation[:, :-1]
    with torch.no_grad():
        before = model(ids)
    for folded in folds.values():
        other = copy.deepcopy(model)
        other.load_state_dict({k: v.to(torch.float32) for k, v in folded.items()})
        with torch.no_grad():
            assert float((other(ids) - before).abs().max()) < 2e-5 * float(before.abs().max())  # float32 rounding
    assert _flags(sd, shape) == []
    assert {"mlp", "mlp_in"} <= set(_flags(folds["awq"], shape))
    assert {"attn_in", "mlp_in"} <= set(_flags(folds["smoothquant"], shape))
    config = {"model_type": "llama", "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
              "num_hidden_layers": 30, "intermediate_size": 1536}
    reps = [geodrift.scan(s, view="canonical", config=config, layers="0-3", roles="gate,up,down", null_draws=8,
                          ov=False) for s in (sd, folds["awq"])]
    # The residual-space vectors (Gate/Up v1, Down u1). The hidden-space ones (Up u1, Down v1), which the
    # canonical unit order aligns by construction, moved by up to 4e-4 here (0.022289 -> 0.022714 for Up u1).
    for role, space in (("mlp_gate", "v"), ("mlp_up", "v"), ("mlp_down", "u")):
        a, b = reps[0].role(role).spaces[space].vectors[0], reps[1].role(role).spaces[space].vectors[0]
        assert a.mean == pytest.approx(b.mean, abs=1e-5)


def test_each_family_moves_only_under_the_gauges_its_moved_by_names():
    from geodrift.gauge.diagnose import MOVED_BY
    from geodrift.gauge.orbit import GENERATORS, random_gauge

    shape = GaugeShape(2, 4, 2, 4)
    sd = toy_state_dict(shape, d_model=16, d_ff=24, vocab=7, generator=torch.Generator().manual_seed(0))
    names = {"qk": "qk_rope"}  # geodrift.gauge.orbit's name -> geodrift.architectures'
    for generator in (g for g in GENERATORS if g != "fold"):
        moved = random_gauge(sd, shape, torch.Generator().manual_seed(1), generators=("fold", generator))
        folded = random_gauge(sd, shape, torch.Generator().manual_seed(1), generators=("fold",))
        after, ref = (diagnose([(0, x), (1, x)], shape, "toy") for x in (moved, folded))
        for family in FAMILIES:
            changed = any(abs(p - q) > 1e-9 for p, q in zip(after.values(family), ref.values(family), strict=True))
            assert changed == (names.get(generator, generator) in MOVED_BY[family]), (generator, family)
    assert diagnose([(0, sd)], shape, "toy").gauge == "varies"
