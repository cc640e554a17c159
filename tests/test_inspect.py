"""Discoverability: list a checkpoint's tensors and the role each maps to (or why it is ignored) before
scanning, and let a --names mapping name only what should be scanned (norms and the rest left unmapped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder
from safetensors.torch import save_file
from typer.testing import CliRunner

from geodrift.cli.main import app
from geodrift.errors import GeodriftError
from geodrift.scanner.inventory import FOLDED, NOT_SCANNED, SCANNED, inventory
from geodrift.scanner.readers import open_checkpoint, weightset
from geodrift.scanner.scan import load_weights

runner = CliRunner()


def test_the_embedded_model_lists_every_tensor_with_its_role():
    ckpt = open_checkpoint(None)
    rows = inventory(ckpt)
    assert len(rows) == len(ckpt.tensor_names()) == 272
    by_use = {use: [r for r in rows if r.use == use] for use in (SCANNED, FOLDED, NOT_SCANNED)}
    assert len(by_use[SCANNED]) == 7 * 30 and len(by_use[FOLDED]) == 2 * 30
    assert {r.name for r in by_use[NOT_SCANNED]} == {"token_embd.weight", "output_norm.weight"}
    q3 = next(r for r in rows if r.name == "blk.3.attn_q.weight")
    assert (q3.kind, q3.layer, q3.detail, q3.dtype, q3.shape) == ("attn_q", 3, "Q, layer 3", "Q4_1", (576, 576))
    norm = next(r for r in rows if r.name == "blk.3.attn_norm.weight")
    assert norm.detail == "norm gain of Q, K, V (input side), layer 3"  # folded by the folded and canonical views


def _mystery_model(folder: Path) -> tuple[Path, Path]:
    # An architecture without a name table: projections under its own names, plus norms and a buffer.
    state = {}
    for layer in range(3):
        state[f"blocks.{layer}.wq"] = torch.randn(16, 16)
        state[f"blocks.{layer}.wk"] = torch.randn(8, 16)
        state[f"blocks.{layer}.norm"] = torch.ones(16)
        state[f"blocks.{layer}.rotary"] = torch.ones(4)
    state["embed"] = torch.randn(50, 16)
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "mystery"}))
    mapping = folder.parent / "names.json"
    mapping.write_text(json.dumps({r"blocks\.(\d+)\.wq": "attn_q", r"blocks\.(\d+)\.wk": "attn_k",
                                   r"blocks\.\d+\.rotary": "ignore"}))
    return folder, mapping


def test_a_names_mapping_may_leave_norms_and_other_tensors_unmapped(tmp_path: Path):
    folder, mapping = _mystery_model(tmp_path / "m")
    ckpt = open_checkpoint(folder, names=mapping)
    rows = {r.name: r for r in inventory(ckpt)}
    assert rows["blocks.1.wq"].use == SCANNED and rows["blocks.1.wk"].detail == "K, layer 1"
    assert rows["blocks.1.norm"].use == NOT_SCANNED and "unmapped" in rows["blocks.1.norm"].detail
    assert rows["embed"].use == NOT_SCANNED and rows["blocks.0.rotary"].detail == "ignored by a --names rule"
    ws, _ = load_weights(folder, names=mapping)  # and the scan reads what was mapped
    assert ws.roles() == ["attn_q", "attn_k"] and ws.layers("attn_q") == [0, 1, 2]


def test_folding_norms_that_the_mapping_left_out_is_refused_not_faked(tmp_path: Path):
    folder, mapping = _mystery_model(tmp_path / "m")
    with pytest.raises(GeodriftError, match="--view folded needs the norm_attn gain"):
        weightset(open_checkpoint(folder, names=mapping), view="folded")


def test_without_a_mapping_unknown_names_are_still_refused(tmp_path: Path):
    folder, _ = _mystery_model(tmp_path / "m")
    with pytest.raises(GeodriftError, match="--names"):
        open_checkpoint(folder)


def test_inspect_cli_prints_json_and_a_table_that_fits_80_columns(tmp_path: Path, monkeypatch):
    folder = write_hf_folder(tmp_path / "hf", llama_state(n_layers=2), hf_config(n_layers=2))
    result = runner.invoke(app, ["inspect", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "inventory" and doc["architecture"] == "llama"
    assert {t["name"]: t["use"] for t in doc["tensors"]}["model.layers.1.mlp.down_proj.weight"] == SCANNED
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["inspect", str(folder)])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout and "model.layers.{0-1}.self_attn.q_proj.weight" in result.stdout
    assert " ".join(result.stdout.split()).startswith(f"{folder} (hf-folder, llama):")  # the summary first
    full = runner.invoke(app, ["inspect", str(folder), "--full"])
    assert full.exit_code == 0 and "model.layers.1.self_attn.q_proj.weight" in full.stdout


def test_inspect_of_the_embedded_model_fits_30_lines_summary_first_one_row_per_role_and_layer_range(monkeypatch):
    import math

    from rich.cells import cell_len

    monkeypatch.setenv("COLUMNS", "80")
    brief, full = (runner.invoke(app, ["inspect", *flag]) for flag in ([], ["--full"]))
    assert brief.exit_code == full.exit_code == 0, brief.output
    lines = brief.stdout.rstrip().splitlines()
    assert sum(max(1, math.ceil(cell_len(line) / 80)) for line in lines) <= 30, brief.stdout
    assert lines[0].startswith("SmolLM2-135M-Instruct.Q4_1.gguf (embedded default) (gguf, llama): 272 tensors")
    names = [line.split("│")[1].strip() for line in lines if line.startswith("│") and line.split("│")[1].strip()]
    assert names == ["token_embd.weight", *(f"blk.{{0-29}}.{n}.weight" for n in (
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_norm")),
        "output_norm.weight", "blk.{0-29}.ffn_norm.weight"]
    flat = " ".join(brief.stdout.split())
    assert "scanned: Q, layers 0-29" in flat and "folded only" not in flat and "--full" in flat
    assert "(folded and canonical views)" in flat  # where the norm gains are used: no stale "--view folded only"
    assert all(f"blk.{layer}.attn_q.weight" in full.stdout for layer in range(30))  # --full: every tensor


def test_inspect_lists_tensors_grouped_by_role_in_layer_number_order():
    rows = inventory(open_checkpoint(None))
    names = [r.name for r in rows]
    assert names.index("blk.2.attn_q.weight") < names.index("blk.10.attn_q.weight")  # numbers, not text
    groups = [r.kind for r in rows]
    assert groups == sorted(groups, key=groups.index)  # each role's rows are contiguous
    q = [r.layer for r in rows if r.kind == "attn_q"]
    assert q == list(range(30))
    assert [r.kind for r in rows][:2] == ["embed", "attn_q"]
    assert groups.index("attn_q") < groups.index("attn_k") < groups.index("mlp_down") < groups.index("norm_attn")
