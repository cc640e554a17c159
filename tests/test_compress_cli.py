"""`geodrift compress prune|share`: one-line errors before any work, and saved models that transformers loads
back with the same perplexity."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from test_compress import tiny_llama_folder

from geodrift.cli.main import main

FAST = ["--seq-len", "32", "--eval-windows", "4", "--quiet"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama_folder(tmp_path_factory.mktemp("cli") / "llama", n_layers=4)


def _fails(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines


@pytest.mark.parametrize(("args", "needle"), [
    (["prune", "{tiny}", "--max-remove", "4"], "--max-remove"),
    (["prune", "{tiny}", "--max-remove", "0"], "--max-remove"),
    (["prune", "{tiny}", "--methods", "geom-v1,banana"], "--methods"),
    (["prune", "{tiny}", "--random-seeds", "1"], "--random-seeds"),
    (["prune", "{tiny}", "--random-seeds", str(2**64)], "--random-seeds"),  # the command fuzz's hang
    (["prune", "{tiny}", "--plot", "fig.gif"], "--plot"),
    (["prune", "{tiny}", "--save", "x", "--save-method", "random"], "--save-method"),
    (["prune", "{tiny}", "--max-remove", "1", "--eval-windows", "100000"], "--eval-windows"),
    (["share", "{tiny}", "--ratios", "0.2,1.5"], "--ratios"),
    (["share", "{tiny}", "--ratios", "0"], "--ratios"),
    (["share", "{tiny}", "--ratios", "a,b"], "--ratios"),
    (["share", "{tiny}", "--methods", "geodrift,magic"], "--methods"),
    (["share", "{tiny}", "--group-size", "1"], "--group-size"),
    (["share", "{tiny}", "--ratios", "0.99", "--methods", "svd-llm", "--verdict-ratio", "0"], "--ratios"),
    (["share", "{tiny}", "--calib-windows", "1"], "widest projection input"),
    (["share", "{tiny}", "--calib-windows", "2", "--select-windows", "3"], "--select-windows"),
    (["share", "{tiny}", "--split", "sources", "--corpus", "{empty}"], "--split"),
    (["share", "{tiny}", "--corpus", "{empty}"], "--corpus"),
    (["share", "{tiny}", "--save", "{tiny}"], "--save"),
    (["share", "{tiny}", "--save", "x", "--save-format", "gguf"], "--save-format"),
])
def test_bad_options_give_one_line_error_and_exit_2(args, needle, tiny: Path, tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    given = [a.format(tiny=tiny, empty=empty) for a in args]
    _fails(["compress", *given[:2], *FAST, *given[2:]], needle, capsys)  # the option under test comes last


def test_other_architectures_and_missing_tokenizers_are_named(tmp_path: Path, capsys) -> None:
    qwen = tiny_llama_folder(tmp_path / "qwen", n_layers=2, model_type="qwen2")
    _fails(["compress", "prune", str(qwen), "--max-remove", "1"] + FAST, "qwen2", capsys)
    bare = tiny_llama_folder(tmp_path / "bare", n_layers=2)
    (bare / "tokenizer.json").unlink()
    _fails(["compress", "share", str(bare)] + FAST, "tokenizer.json", capsys)


def _hf_perplexity(folder: Path, windows: torch.Tensor) -> float:
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none").mean(1)
    return math.exp(float(nll.mean()))


def test_a_saved_pruned_model_loads_in_transformers_with_the_same_perplexity(tiny: Path, tmp_path: Path,
                                                                             capsys, monkeypatch) -> None:
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from geodrift.compress.model import load_setup

    (tiny / "tokenizer_config.json").write_text('{"model_max_length": 2048}')  # a folder's other tokenizer file
    out, saved = tmp_path / "prune.json", tmp_path / "pruned"
    main_args = ["compress", "prune", str(tiny), "--max-remove", "2", "--methods", "geom-v1,block-influence",
                 "--random-seeds", "2", "--null-draws", "10", "--k", "2", "--calib-windows", "2",
                 "--save", str(saved), "--save-method", "block-influence", "--save-n", "2",
                 "--json-out", str(out), "--csv", str(tmp_path / "p.csv"), "--plot", str(tmp_path / "p.png"),
                 *[a for a in FAST if a != "--quiet"]]
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_info:
        main(main_args)
    assert exit_info.value.code == 0
    result = json.loads(out.read_text())
    assert result["kind"] == "compress_prune"
    curve = next(c for c in result["curves"] if c["method"] == "block-influence")
    config = json.loads((saved / "config.json").read_text())
    assert config["num_hidden_layers"] == 2
    # the output names the layers removed (terminal and JSON), and the folder keeps the input's tokenizer files
    removed = curve["removed"][1]
    assert result["saved"]["removed"] == removed and result["saved"]["kept"] == [i for i in range(4) if i not in removed]
    assert f"(layers {', '.join(map(str, removed))} of the input)" in capsys.readouterr().out
    assert result["saved"]["tokenizer"] == ["tokenizer.json", "tokenizer_config.json"]
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (saved / name).read_bytes() == (tiny / name).read_bytes()
    assert AutoTokenizer.from_pretrained(saved).model_max_length == 2048
    windows = load_setup(tiny, seq_len=32, calib_windows=1, eval_windows_count=4).evaluation
    assert _hf_perplexity(saved, windows) == pytest.approx(curve["ppl"][1], rel=1e-4)
    assert (tmp_path / "p.png").stat().st_size > 0 and (tmp_path / "p.csv").read_text().startswith("model,method")
    with pytest.raises(SystemExit) as exit_info:  # every file of the folder is geodrift's: --force replaces it
        main([*main_args, "--force", "--save-n", "1", "--quiet"])
    assert exit_info.value.code == 0 and json.loads(out.read_text())["saved"]["n"] == 1


def test_compress_share_saves_a_smaller_factored_model_that_loads_back(tiny: Path, tmp_path: Path, capsys) -> None:
    pytest.importorskip("transformers")
    from geodrift.compress.factorized import load_factored
    from geodrift.compress.sources import load_compress_setup

    out, saved = tmp_path / "share.json", tmp_path / "small"
    with pytest.raises(SystemExit) as exit_info:
        main(["compress", "share", str(tiny), "--ratios", "0.4", "--methods", "svd-llm,geodrift", "--verdict-ratio",
              "0", "--calib-windows", "2", "--select-windows", "1", "--save", str(saved), "--json-out", str(out), "--csv",
              str(tmp_path / "s.csv"), "--plot", str(tmp_path / "s.png"), *FAST])
    assert exit_info.value.code == 0
    assert torch.get_num_threads() == min(2, len(os.sched_getaffinity(0)))  # --threads' default: usable CPUs, at most 2
    result = json.loads(out.read_text())
    run = next(r for r in result["runs"] if r["method"] == "geodrift")
    assert "Q4_1" not in result["weights"] and result["weights"].startswith("F32")
    windows = load_compress_setup(tiny, seq_len=32, calib_windows=2, eval_count=4)[0].evaluation
    model = load_factored(saved)
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none").mean(1)
    assert math.exp(float(nll.mean())) == pytest.approx(run["ppl"], rel=1e-4)
    saved_bytes = result["saved"]["bytes"]["model.safetensors"]
    assert saved_bytes < result["saved"]["dense_bytes"] and "model.safetensors" in capsys.readouterr().out
    assert (tmp_path / "s.png").stat().st_size > 0 and (tmp_path / "s.csv").read_text().startswith("model,weights")


def _without(value: object, skip: set[str]) -> object:
    if isinstance(value, dict):
        return {k: _without(v, skip) for k, v in value.items() if k not in skip}
    if isinstance(value, list):
        return [_without(v, skip) for v in value]
    return value


def test_the_json_fields_and_csv_columns_are_documented(tiny: Path, tmp_path: Path) -> None:
    from test_output_schema import DOC, _section, fields

    for kind, extra in (("prune", ["--max-remove", "1", "--methods", "geom-v1,angular", "--random-seeds", "2",
                                   "--null-draws", "10", "--k", "2", "--calib-windows", "1"]),
                        ("share", ["--ratios", "0.4", "--methods", "svd-llm,prune-bi,geodrift,geodrift:random-groups",
                                   "--verdict-ratio", "0.4", "--calib-windows", "2", "--select-windows", "1"])):
        out, csv = tmp_path / f"{kind}.json", tmp_path / f"{kind}.csv"
        with pytest.raises(SystemExit) as exit_info:
            main(["compress", kind, str(tiny), "--json-out", str(out), "--csv", str(csv), *extra, *FAST])
        assert exit_info.value.code == 0
        doc = json.loads(out.read_text())
        text = _section(f"## kind: `compress_{kind}`") + _section("## Conventions")
        skip = {"spaces", "differences", "corpus", "scores", "seconds", "beats_random", "groups", "overlap", "floor",
                "adjacent", "relative_loss"}  # data-keyed maps, documented by their contents
        missing = sorted(f for f in fields(_without(doc, skip)) if f"`{f}`" not in text)
        assert not missing, (kind, missing)
        header = csv.read_text().splitlines()[0].split(",")
        assert not [c for c in header if f"`{c}`" not in _section("## The compress CSVs")], header
    assert "## kind: `compress_share`" in DOC


def test_prune_at_its_default_depth_and_methods_prints_at_most_60_lines_at_80_columns(tmp_path: Path, monkeypatch,
                                                                                      capsys):
    """The brief default: the perplexity table (n = 1..10, every method, the random median), the claims with each
    criterion once at the full width, the --full pointer and the summary, every line wrapped to 80 columns; --full
    prints the rest. Only the text sizes are small (they change numbers, not rows)."""
    from test_compress import tiny_llama_folder

    from geodrift.jobs.compress import PruneRequest, run_prune
    from geodrift.render.compress import prune_summary, render_prune

    folder = tiny_llama_folder(tmp_path / "llama", n_layers=11)
    monkeypatch.setenv("COLUMNS", "80")
    result = run_prune(PruneRequest(model=folder, seq_len=16, eval_windows=2, calib_windows=2, greedy_windows=1))
    assert len(result.random_mean) == 10 and len(result.curves) == 5 and len(result.random_curves) == 20
    render_prune(result)
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert len(lines) <= 60 and max(map(len, lines)) <= 80, "\n".join(lines)
    flat = " ".join(" ".join(lines).split())
    assert all(flat.count(v.criterion) == 1 for v in {v.criterion: v for v in result.verdicts}.values())
    assert flat.endswith(prune_summary(result)) and "--full:" in flat  # the summary last, wrapped
    assert "Per-layer scores" not in flat and "Cost of each ranking" not in flat
    render_prune(result, full=True)
    full = capsys.readouterr().out
    assert "Per-layer scores" in full and "Cost of each ranking" in full
