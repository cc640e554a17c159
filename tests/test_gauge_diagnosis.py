"""Gauge diagnosis (issue 31 item 4): how far each layer sits from its balanced point, and an AWQ-style fold
from real calibration activations that keeps the function but is flagged."""

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
from geodrift.gauge.align import shape_of
from geodrift.gauge.diagnose import diagnose, layer_gauge
from geodrift.gauge.orbit import GaugeShape, layer_key, scale_mlp, toy_state_dict
from geodrift.lm.llama import LlamaLM
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
    assert layer_gauge(moved, shape, 0).spreads["mlp"].std == pytest.approx(float(log_ratio(moved).std()))
    # the other families are untouched by an Up/Down scaling
    before, after = layer_gauge(sd, shape, 0), layer_gauge(moved, shape, 0)
    assert after.spreads["qk"] == before.spreads["qk"] and after.vo_gram == before.vo_gram


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
    before = diagnose([(0, sd), (1, sd)], shape, 32, 64, "init")
    after = diagnose([(0, other.state_dict()), (1, other.state_dict())], shape, 32, 64, "awq")
    assert not before.flagged and before.mlp_median_ratio < 2.0  # a fresh model sits where its reference does
    assert after.mlp_median_ratio > before.mlp_median_ratio


def test_the_embedded_smollm2_is_diagnosed_layer_by_layer_and_not_flagged():
    diag = diagnose_checkpoint(open_checkpoint(None), layers=[0, 1, 2])
    assert not isinstance(diag, str)
    assert [x.layer for x in diag.layers] == [0, 1, 2] and not diag.flagged
    assert all(0.0 <= x.vo_gram <= 1.0 for x in diag.layers)
    assert diag.summary().endswith(": balanced")


def test_scan_full_prints_writes_and_draws_the_diagnosis(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    folder = write_hf_folder(tmp_path / "m", llama_state(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60),
                             hf_config(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60), dtype=torch.float32)
    out, plot = tmp_path / "s.json", tmp_path / "s.png"
    with pytest.raises(SystemExit) as done:
        main(["scan", str(folder), "--full", "--null-draws", "4", "--k", "2", "--quiet", "--json-out", str(out),
              "--plot", str(plot)])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "Gauge diagnosis" in printed and "gauge: Up/Down spread" in printed
    doc = json.loads(out.read_text())["gauge_diagnosis"]
    assert len(doc["layers"]) == 3 and set(doc["layers"][0]["spreads"]) == {"mlp", "mlp_norm", "attn_norm", "qk",
                                                                             "vo_log"}
    assert doc["gauge"] == "varies" and doc["moved_by"]["mlp"] == ["mlp_scale"]
    assert (tmp_path / "s_gauge.png").stat().st_size > 0
    gemma = write_hf_folder(tmp_path / "g", llama_state(gemma2=True), hf_config("gemma2"), dtype=torch.float32)
    with pytest.raises(SystemExit) as done:
        main(["scan", str(gemma), "--full", "--null-draws", "4", "--k", "2", "--quiet", "--json-out",
              str(tmp_path / "g.json")])
    assert done.value.code == 0 and "gauge diagnosis: " in capsys.readouterr().out
    assert "gauge_diagnosis" not in json.loads((tmp_path / "g.json").read_text())


@pytest.mark.slow  # about a minute: the compress calibration text and the whole model
def test_an_awq_fold_of_smollm2_from_real_calibration_keeps_the_logits_is_flagged_and_leaves_canonical_numbers():
    from geodrift.compress.sources import load_compress_setup

    setup, texts = load_compress_setup(None, seq_len=64, calib_windows=8, eval_count=2)
    model = setup.model
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    shape = shape_of(sd, 9, 3)
    folded = fold_awq(sd, shape, activation_scales(model, texts.draws[0]))
    other = copy.deepcopy(model)
    other.load_state_dict(folded)
    with torch.no_grad():
        ids = texts.evaluation[:, :-1]
        before, after = model(ids), other(ids)
    assert float((before - after).abs().max()) < 2e-5 * float(before.abs().max())  # float32 rounding only
    layers = list(range(shape.n_layers))
    plain = diagnose([(i, sd) for i in layers], shape, 576, 1536, "smollm2")
    awq = diagnose([(i, folded) for i in layers], shape, 576, 1536, "awq")
    assert not plain.flagged and awq.flagged
    config = {"model_type": "llama", "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
              "num_hidden_layers": 30, "intermediate_size": 1536}
    reps = [geodrift.scan(s, view="canonical", config=config, layers="0-3", roles="gate,up,down", null_draws=8,
                          ov=False) for s in (sd, folded)]
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
    base = diagnose([(0, sd), (1, sd)], shape, 16, 24, "toy")
    for generator in (g for g in GENERATORS if g != "fold"):
        moved = random_gauge(sd, shape, torch.Generator().manual_seed(1), generators=("fold", generator))
        folded = random_gauge(sd, shape, torch.Generator().manual_seed(1), generators=("fold",))
        after, ref = (diagnose([(0, x), (1, x)], shape, 16, 24, "toy") for x in (moved, folded))
        for family in ("mlp", "qk", "vo_log"):
            changed = any(abs(p - q) > 1e-9 for p, q in zip(after.spread(family), ref.spread(family), strict=True))
            assert changed == (generator in MOVED_BY[family]), (generator, family)
    assert base.gauge == "varies"
