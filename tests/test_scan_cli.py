"""`geodrift scan` end to end: the embedded model, real files in tmp_path, and bad options."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder
from typer.testing import CliRunner

from geodrift.cli.main import app, main
from geodrift.continuity import MeasureSpec, decompose
from geodrift.scanner.scan import load_weights, ov_composite_hook

runner = CliRunner()


def _scan(*args: str):
    return runner.invoke(app, ["scan", *args])


def test_scan_of_the_embedded_model_prints_json_with_floors_and_verdicts():
    result = _scan("--layers", "0-3", "--k", "2", "--null-draws", "20", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["origin"].startswith("SmolLM2-135M")
    assert [r["label"] for r in report["roles"]] == ["Q", "K", "V", "O", "Gate", "Up", "Down", "OV"]
    for role in report["roles"]:
        for space in role["spaces"].values():
            first = space["vectors"][0]
            assert len(first["per_pair"]) == 3
            assert 0 < first["baseline"] < 0.1 and first["null_std"] > 0
        assert role["verdict"] in ("holds", "fails")


def test_scan_writes_csv_json_and_png_for_a_safetensors_folder(tmp_path: Path):
    folder = write_hf_folder(tmp_path / "model", llama_state(n_layers=4), hf_config(n_layers=4))
    out_csv, out_json, out_png = tmp_path / "r.csv", tmp_path / "r.json", tmp_path / "r.png"
    result = _scan(str(folder), "--k", "2", "--null-draws", "10", "--csv", str(out_csv),
                   "--json-out", str(out_json), "--plot", str(out_png))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out_csv.open()))
    assert {row["role"] for row in rows} == {"attn_q", "attn_k", "attn_v", "attn_o", "mlp_gate", "mlp_up", "mlp_down",
                                            "attn_ov"}
    assert json.loads(out_json.read_text())["view"] == "canonical"  # the default for a llama with its config.json
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Geometric continuity" in result.stdout and "null" in result.stdout


def test_folded_view_is_named_in_the_report(tmp_path: Path):
    folder = write_hf_folder(tmp_path / "model", llama_state(n_layers=3), hf_config(n_layers=3))
    result = _scan(str(folder), "--view", "folded", "--k", "1", "--null-draws", "5", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["view"] == "folded"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["/no/such/model.gguf"], "/no/such/model.gguf"),
        (["--roles", "q,banana"], "--roles"),
        (["--layers", "1-x"], "--layers"),
        (["--layers", "500"], "--layers"),
        (["--k", "0"], "--k"),
        (["--view", "cooked"], "--view"),
        (["--null-draws", "1"], "--null-draws"),
        (["--layers", "3"], "at least 2 layers"),
    ],
)
def test_bad_options_give_one_line_error_and_exit_2(args, needle, tmp_path: Path, capsys):
    out = tmp_path / "report.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["scan", *args, "--json-out", str(out)])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert not out.exists()


def test_a_bad_path_from_the_shell_prints_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "geodrift", "scan", "/no/such/model.gguf"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "Traceback" not in proc.stderr


def test_an_existing_output_file_survives_a_failed_scan(tmp_path: Path):
    out = tmp_path / "report.json"
    out.write_text("precious")
    with pytest.raises(SystemExit):
        main(["scan", str(tmp_path / "missing.gguf"), "--json-out", str(out)])
    assert out.read_text() == "precious"


def _top1_agreement(layers: list[int] | None) -> float:
    # Through the scan's own route (decompose, with the OV hook: its composite is never formed there),
    # against a float64 LAPACK SVD of every matrix and of every explicitly formed OV composite.
    ws, heads = load_weights(None, layers=layers)
    assert heads is not None
    spectra = decompose(ws, MeasureSpec(k=8), derive=ov_composite_hook(*heads))
    worst = 1.0
    for (role, layer), fast in spectra.items():
        if role == "attn_ov":
            W = _ov_formed(heads, ws[("attn_o", layer)], ws[("attn_v", layer)])
        else:
            W = ws[(role, layer)]
        _, _, Vh = torch.linalg.svd(W.double(), full_matrices=False)
        worst = min(worst, float((fast.Vh[0].double() @ Vh[0]).abs()))
    assert {role for role, _ in spectra} >= {"attn_ov", "mlp_down"}
    return worst


def _ov_formed(heads: tuple[int, int], O: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    # W_O @ repeat_kv(W_V), formed explicitly as transformers would.
    n_heads, n_kv = heads
    hd = V.shape[0] // n_kv
    expanded = V.reshape(n_kv, hd, V.shape[1]).repeat_interleave(n_heads // n_kv, dim=0).reshape(n_heads * hd, -1)
    return O @ expanded


@pytest.mark.heavy  # full SVDs of embedded matrices; tests/test_krylov.py keeps the certified route in the default run
def test_fast_top1_vectors_agree_with_full_svd_on_embedded_layers():
    assert _top1_agreement([0, 15, 29]) >= 0.999


@pytest.mark.slow
def test_fast_top1_vectors_agree_with_full_svd_on_every_embedded_matrix():
    assert _top1_agreement(None) >= 0.999


def test_ov_composite_sums_each_query_head_with_its_shared_kv_head():
    g = torch.Generator().manual_seed(0)
    n_heads, n_kv, hd, d = 4, 2, 3, 5
    V = torch.randn(n_kv * hd, d, generator=g)
    O = torch.randn(d, n_heads * hd, generator=g)
    hook = ov_composite_hook(n_heads, n_kv)
    assert hook(("attn_v", 7), V) == {}
    (key, product), = hook(("attn_o", 7), O).items()
    ov = product.dense()
    group = n_heads // n_kv
    expected = sum(O[:, h * hd:(h + 1) * hd] @ V[(h // group) * hd:(h // group + 1) * hd] for h in range(n_heads))
    assert key == ("attn_ov", 7) and torch.allclose(ov, expected, atol=1e-5)


def test_an_unwritable_output_path_is_a_one_line_error(tmp_path: Path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        main(["scan", "--layers", "0-1", "--k", "1", "--null-draws", "2", "--json-out", str(blocker / "r.json")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "file" in err[0]
    assert blocker.read_text() == "x"
