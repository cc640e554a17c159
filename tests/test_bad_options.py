"""Options validated before any work, and numerical edge cases reported, not crashed on or hidden (issue 11).

Every bad option is one ``error:`` line naming the option, exit status 2, and nothing written.
Options are checked before the scan starts: each refusal here comes back without a single SVD.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from _checkpoints import (
    hf_config,
    hf_to_gguf_tensors,
    llama_metadata,
    llama_state,
    write_gguf,
    write_hf_folder,
)

from geodrift.cli.main import main
from geodrift.continuity import MeasureSpec, measure
from geodrift.errors import GeodriftError
from geodrift.linalg import robust_svd
from geodrift.scanner.gguf_header import read_gguf_header
from geodrift.weights import WeightSet


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(("args", "needles"), [
    (["--layers", "0-99999999999"], ["--layers", "0-99999999999"]),
    (["--layers", "25-40"], ["--layers", "layers 0..29"]),
    (["--layers", "9-3"], ["--layers", "'9-3'"]),
    (["--null-draws", "1000000000"], ["--null-draws 1000000000", "TiB", "--max-memory"]),
    (["--max-memory", "1M"], ["would need about", "above --max-memory 1.0 MiB"]),
    (["--max-memory", "lots"], ["--max-memory", "'lots'"]),
    (["--seed", str(2**64)], ["--seed", str(2**64)]),
    (["--seed", "-1"], ["--seed"]),
    (["--k", "10000"], ["--k 10000", "every selected projection", "attn_q, rank 576", "--k 576 or less"]),
])
def test_scan_options_are_refused_before_any_work(args: list[str], needles: list[str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    line = _refused(["scan", *args, "--json-out", str(out)], capsys)
    assert all(n in line for n in needles), line
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("option", ["--json-out", "--csv", "--plot"])
@pytest.mark.parametrize("blocked", ["parent_is_a_file", "is_a_folder", "read_only_folder"])
def test_unwritable_outputs_are_refused_first_naming_the_users_path(
        option: str, blocked: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = {"--json-out": "r.json", "--csv": "r.csv", "--plot": "r.png"}[option]
    if blocked == "parent_is_a_file":
        (tmp_path / "file").write_text("x")
        target = tmp_path / "file" / name
    elif blocked == "is_a_folder":
        target = tmp_path / name
        target.mkdir()
    else:
        if sys.platform != "linux" or __import__("os").geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        (tmp_path / "ro").mkdir(mode=0o555)
        target = tmp_path / "ro" / name
    line = _refused(["scan", "--layers", "0-99", option, str(target)], capsys)  # would fail later on --layers
    assert option in line and str(target) in line and ".tmp" not in line, line
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.parametrize(("args", "needle"), [
    (["--track-every", "-1"], "--track-every: must be >= 0"),
    (["--checkpoint-every", "-1"], "--checkpoint-every: must be >= 0"),
    (["--steps", "-5"], "--steps: must be >= 1"),
    (["--steps", "0"], "--steps: must be >= 1"),
    (["--seeds", f"1,{2**70}"], "--seeds: must be an integer in [0, 2**64 - 1]"),
    (["--threads", "0"], "--threads"),
])
def test_simulate_options_name_themselves(args: list[str], needle: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["simulate", "mlp", "--preset", "smoke", "--out", str(tmp_path / "o"), *args], capsys)
    assert needle in line and not (tmp_path / "o").exists()


def test_prove_seed_beyond_64_bits_is_refused_before_the_proofs(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--seed" in _refused(["prove", "--seed", str(2**64)], capsys)


def test_names_pattern_capturing_a_non_integer_layer_is_one_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_hf_folder(tmp_path / "m", llama_state(2), hf_config(n_layers=2))
    mapping = tmp_path / "names.json"
    mapping.write_text(json.dumps({r"model\.layers\.(\d+)\.self_attn\.(q)_proj\.weight": "attn_q",
                                   r"model\.(layers)\.\d+\.self_attn\.k_proj\.weight": "attn_k"}))
    line = _refused(["scan", str(folder), "--names", str(mapping)], capsys)
    assert "'layers'" in line and "not an integer" in line


def test_k_above_a_rank_is_clipped_by_the_library_and_the_report_says_so() -> None:
    g = torch.Generator().manual_seed(0)
    ws = WeightSet.from_tensors({("attn_k", i): torch.randn(3, 8, generator=g) for i in range(3)})
    report = measure(ws, MeasureSpec(k=5, null_draws=8))
    assert report.roles[0].k == 3 and any("k clipped from 5 to 3" in n for n in report.notes)


def _zero_v_folder(tmp_path: Path, rank_one: bool = False) -> Path:
    state = llama_state(3, 32, 4, 2, 48)
    g = torch.Generator().manual_seed(1)
    for i in range(3):
        name = f"model.layers.{i}.self_attn.v_proj.weight"
        state[name] = (torch.randn(16, 1, generator=g) @ torch.randn(1, 32, generator=g)) if rank_one \
            else torch.zeros(16, 32)
    return write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3), dtype=torch.float32)


def test_all_zero_projections_are_reported_undefined_not_continuous(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["scan", str(_zero_v_folder(tmp_path)), "--k", "2", "--null-draws", "10", "--json", "--quiet", "--no-ov"])
    assert exit_info.value.code == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    v = next(r for r in doc["roles"] if r["role"] == "attn_v")
    assert v["verdict"] == "undefined"
    for space in v["spaces"].values():
        assert space["vectors"][0]["mean"] is None and space["vectors"][0]["per_pair"] == [None, None]
    assert any("attn_v: all-zero matrices in layer(s) [0, 1, 2]" in n for n in doc["notes"])
    assert any(item["path"].startswith("/roles/2/") for item in doc["nonfinite"]["values"])


def test_rank_deficient_projections_report_only_their_defined_vectors(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        # --view raw: the stored rank. (The canonical view's balanced V/O factorisation in float64 leaves ~1e-8
        # instead of exact zeros in V's null space, so there v2 is measured, from rounding.)
        main(["scan", str(_zero_v_folder(tmp_path, rank_one=True)), "--view", "raw", "--k", "2", "--null-draws", "10",
              "--json", "--quiet", "--no-ov"])
    doc = json.loads(capsys.readouterr().out)
    v = next(r for r in doc["roles"] if r["role"] == "attn_v")
    first, second = v["spaces"]["v"]["vectors"][:2]
    assert first["mean"] is not None and 0 <= first["mean"] <= 1 and second["mean"] is None
    assert any("rank below k = 2 in layer(s) [0, 1, 2]" in n for n in doc["notes"])


def test_an_svd_that_does_not_converge_is_reported_in_one_line() -> None:
    # LAPACK's gesdd fails on this input, then the gesvd fallback does too: a GeodriftError, not LinAlgError.
    with pytest.raises(GeodriftError) as info:
        robust_svd(torch.full((6, 4), math.nan, dtype=torch.float64))
    assert "did not converge" in str(info.value) and "\n" not in str(info.value)


def test_robust_svd_reconstructs_a_batch_of_matrices() -> None:
    g = torch.Generator().manual_seed(0)
    W = torch.randn(2, 7, 5, generator=g, dtype=torch.float64)
    U, S, Vh = robust_svd(W)
    assert torch.allclose(U @ torch.diag_embed(S) @ Vh, W, atol=1e-10)


def test_torch_and_numpy_warnings_are_not_printed_before_the_error_line(tmp_path: Path) -> None:
    # A Q8_0 block whose scale is +inf: dequantizing it warns (inf * 0), then the NaN/Inf check refuses it.
    tensors = hf_to_gguf_tensors(llama_state(2, 32, 4, 2, 64), "llama", 4, 2)
    path = write_gguf(tmp_path / "m.gguf", "llama", tensors, llama_metadata(2, 32, 4, 2, 64),
                      {"blk.1.attn_v.weight": gguf.GGMLQuantizationType.Q8_0})
    info = next(t for t in read_gguf_header(path).tensors if t.name == "blk.1.attn_v.weight")
    data = bytearray(path.read_bytes())
    data[info.offset:info.offset + 2] = np.array([np.inf], dtype=np.float16).tobytes()
    data[info.offset + 2:info.offset + 34] = bytes(32)  # quants of that block all 0: inf * 0 = NaN
    path.write_bytes(bytes(data))
    proc = subprocess.run([sys.executable, "-W", "default", "-m", "geodrift", "scan", str(path), "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "blk.1.attn_v.weight" in lines[0] and "NaN or Inf" in lines[0], lines


def test_checking_an_output_path_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The scan fails on --layers after the output check: the folders the output would need are not made.
    _refused(["scan", "--layers", "0-99", "--json-out", str(tmp_path / "new" / "deeper" / "r.json")], capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "option", "listed"), [
    (["scan", "--view", "cooked"], "--view", "'raw', 'folded'"),
    (["drift", "a.gguf", "b.gguf", "--view", "cooked"], "--view", "'raw', 'folded'"),
    (["compare", "a.gguf", "b.gguf", "--view", "RAW"], "--view", "'raw', 'folded'"),
    (["simulate", "mlp", "--preset", "table2"], "--preset", "'table1', 'table3'"),
    (["simulate", "mlp", "--device", "tpu"], "--device", "'auto', 'cpu', 'cuda'"),
    (["simulate", "transformer", "--preset", "huge"], "--preset", "'paper', 'cpu', 'mid', 'tiny'"),
    (["simulate", "transformer", "--tokenizer", "words"], "--tokenizer", "'bpe', 'bytes'"),
    (["simulate", "transformer", "--backend", "spark"], "--backend", "'local', 'ray'"),
    (["sweep", "grid.toml", "--device", "tpu"], "--device", "'auto', 'cpu', 'cuda'"),
    (["reproduce", "--backend", "spark"], "--backend", "'local', 'ray'"),
    (["compress", "prune", "--save-method", "random"], "--save-method", "'geom-v1'"),
    (["compress", "share", "--save-method", "best"], "--save-method", "'svd-llm', 'svd-llm-v2'"),
])
def test_a_value_outside_a_choice_is_one_line_naming_the_option_and_its_choices(
        args: list[str], option: str, listed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused([*args, "--out", str(tmp_path / "o")] if args[0] in ("simulate", "reproduce") else args, capsys)
    assert line.startswith(f"error: Invalid value for '{option}': '{args[-1]}' is not one of ") and listed in line, line
    assert not (tmp_path / "o").exists()


def test_a_refused_choice_from_the_shell_prints_no_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "geodrift", "scan", "--view", "cooked"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == ["error: Invalid value for '--view': 'cooked' is not one of 'raw', 'folded', 'canonical'."]
