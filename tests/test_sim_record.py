"""Run records and the `geodrift simulate mlp|transformer` commands: files, reload, shared options, errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from sim_helpers import smoke_spec, strict_json
from typer.testing import CliRunner

from geodrift.cli.main import app, main
from geodrift.continuity import Report
from geodrift.errors import GeodriftError
from geodrift.io.atomic import to_json
from geodrift.io.outdir import MANIFEST
from geodrift.sim.record import SERIES_COLUMNS, RunRecord, load_record
from geodrift.sim.run import load_result, run

runner = CliRunner()
SHARED = ("--seeds", "--steps", "--track-every", "--data", "--device", "--out", "--resume", "--reload", "--plot",
          "--json", "--checkpoint-every", "--threads", "--ablation", "--detail")


def test_record_and_report_round_trip_through_the_run_folder(tmp_path):
    res = run(smoke_spec(0), [42], out=tmp_path, device="cpu")[0]
    folder = tmp_path / "Res+ReLU" / "seed42"
    assert res.path == folder and {p.name for p in folder.iterdir()} == {"run.json", "report.json"}
    again = load_record(folder / "run.json")
    assert again.rows == res.record.rows and again.summary == res.record.summary
    assert again.config["model"]["d_model"] == 32 and again.config["sim"] == "mlp" and again.seed == 42
    assert "seed" not in again.config["train"]
    assert set(again.versions) >= {"python", "torch", "numpy", "geodrift"}
    payload = strict_json((folder / "run.json").read_text())
    assert payload["series"]["columns"] == list(SERIES_COLUMNS) == [
        "step", "epoch", "source", "role", "metric", "space", "k", "layer", "value"]
    report = Report.from_dict(strict_json((folder / "report.json").read_text()))
    assert to_json(report.to_dict()) == to_json(res.report.to_dict())
    assert [r.role for r in report.roles] == ["block"] and len(report.roles[0].spaces["v"].vectors) == 4  # final_k
    loaded = load_result(folder)
    assert loaded.record.rows == res.record.rows and to_json(loaded.report.to_dict()) == to_json(report.to_dict())
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("checkpoint.pt"))


def test_record_value_of_missing_series_is_nan_and_role_selects():
    rec = RunRecord(label="x", seed=1, config={}, data="d", device="cpu", git_revision=None)
    assert rec.value("W", "block", "cont", "v", 1) != rec.value("W", "block", "cont", "v", 1)
    rec.add_rows([[0, 0.0, "W", "attn_q", "cont", "v", 1, None, 0.5], [0, 0.0, "W", "attn_k", "cont", "v", 1, None, 0.7],
                  [5, 0.5, "W", "attn_q", "cont", "v", 1, None, 0.6], [5, 0.5, "train", None, "loss", None, None, None, 2.0]])
    assert rec.select("W", "attn_q", "cont", "v", 1) == [(0, 0.5), (5, 0.6)]
    assert rec.value("W", "attn_k", "cont", "v", 1) == 0.7 and rec.value("W", "attn_q", "cont", "v", 1, step=0) == 0.5
    assert rec.value("train", None, "loss") == 2.0
    assert RunRecord.from_dict(json.loads(to_json(rec.to_dict()))).rows == rec.rows


def test_corrupt_or_missing_records_are_geodrift_errors(tmp_path):
    with pytest.raises(GeodriftError, match="no run record"):
        load_record(tmp_path)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(GeodriftError, match="not a geodrift run record"):
        load_record(tmp_path)


def _text_corpus(path: Path) -> Path:
    # 300 paragraphs of pseudo-English (a deterministic word salad): enough bytes for the tiny preset.
    words = ("the layer weight gradient vector space of a network residual stream is continuous across depth "
             "and its singular direction rotates slowly while training").split()
    rng = random.Random(0)
    path.write_text("\n\n".join(" ".join(rng.choice(words) for _ in range(40)) for _ in range(300)), encoding="utf-8")
    return path


def _options(sim: str, tmp_path: Path) -> list[str]:
    if sim == "mlp":
        return ["simulate", "mlp", "--preset", "smoke", "--seeds", "7", "--data", "mnist5k", "--ablation", "d_model=16"]
    return ["simulate", "transformer", "--preset", "tiny", "--seeds", "5", "--no-smollm2",
            "--data", str(_text_corpus(tmp_path / "corpus.txt")), "--ablation", "relu"]


@pytest.mark.parametrize("sim", ["mlp", "transformer"])
def test_both_simulators_take_the_shared_options_json_reload_and_resume(sim, tmp_path):
    out, plots = tmp_path / "runs", tmp_path / "plots"
    threads = torch.get_num_threads()
    args = _options(sim, tmp_path) + ["--steps", "6", "--track-every", "3", "--device", "cpu", "--out", str(out),
                                      "--plot", str(plots), "--json", "--checkpoint-every", "2", "--threads", "1",
                                      "--detail"]
    try:
        result = runner.invoke(app, args)
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, (result.output, result.exception)
    payload = strict_json(result.stdout)
    seed = 7 if sim == "mlp" else 5
    assert payload["sim"] == sim and payload["seeds"] == [seed]
    assert {r["seed"] for r in payload["runs"]} == {seed} and all(r["status"] == "complete" for r in payload["runs"])
    records = sorted(out.rglob("run.json"))
    assert len(records) == (2 if sim == "mlp" else 1) and not list(out.rglob("checkpoint.pt"))
    rec = load_record(records[0])
    assert sorted({r[0] for r in rec.rows if r[2] == "W"}) == [0, 3, 6]  # --track-every 3, --steps 6
    model = rec.config["model"]
    assert (model["d_model"] == 16) if sim == "mlp" else (model["activation"] == "relu")
    assert rec.config["data"]["name" if sim == "mlp" else "corpus"] == ("mnist5k" if sim == "mlp" else
                                                                          str(tmp_path / "corpus.txt"))
    figures = [p for p in plots.iterdir() if p.name != MANIFEST]  # the manifest lists geodrift's files there
    assert figures and all(p.read_bytes()[:4] == b"\x89PNG" for p in figures)
    # --reload re-renders the saved runs without training: the same reproduction
    reloaded = runner.invoke(app, ["simulate", sim, "--reload", "--out", str(out), "--json"]
                             + (["--no-smollm2"] if sim == "transformer" else []))
    assert reloaded.exit_code == 0, (reloaded.output, reloaded.exception)
    assert strict_json(reloaded.stdout) == payload
    # --resume reuses the finished records (not rewritten)
    stamp = records[0].stat().st_mtime_ns
    resumed = runner.invoke(app, [a for a in args if a not in ("--plot", str(plots))] + ["--resume"])
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    assert strict_json(resumed.stdout)["configs"] == payload["configs"]
    assert records[0].stat().st_mtime_ns == stamp
    # the human-readable rendering, with --detail's k table
    text = runner.invoke(app, ["simulate", sim, "--reload", "--out", str(out), "--detail"]
                         + (["--no-smollm2"] if sim == "transformer" else []), env={"COLUMNS": "220"})
    assert text.exit_code == 0, (text.output, text.exception)
    assert rec.label in text.stdout and "run record" in text.stdout


def test_both_commands_declare_the_same_shared_options():
    import typer.main

    group = typer.main.get_command(app).commands["simulate"]  # type: ignore[attr-defined]
    for name in ("mlp", "transformer"):
        declared = {opt for p in group.commands[name].params for opt in p.opts}
        assert set(SHARED) <= declared, (name, set(SHARED) - declared)
    assert "--batch-seeds" in {o for p in group.commands["mlp"].params for o in p.opts}


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("sim,preset", [("mlp", "smoke"), ("transformer", "tiny")])
def test_user_errors_are_one_line_geodrift_errors(sim, preset, capsys, tmp_path):
    base = ["simulate", sim, "--preset", preset] + (["--no-smollm2"] if sim == "transformer" else [])
    assert "--out" in _one_line_error(capsys, base + ["--resume"])
    assert "--out" in _one_line_error(capsys, base + ["--reload"])
    assert "--ablation" in _one_line_error(capsys, base + ["--ablation", "nope", "--out", str(tmp_path)])
    assert "--ablation" in _one_line_error(capsys, base + ["--ablation", "n_layers=many"])
    assert "'--preset': 'nope' is not one of" in _one_line_error(capsys, ["simulate", sim, "--preset", "nope"])
    assert "--steps" in _one_line_error(capsys, base + ["--steps", "0"])
    assert "--seeds" in _one_line_error(capsys, base + ["--seeds", "4x"])
    assert "--reload" in _one_line_error(capsys, base + ["--reload", "--out", str(tmp_path)])  # nothing saved there
    for args in (base + ["--resume"], base + ["--ablation", "nope"]):
        result = runner.invoke(app, args)
        assert result.exit_code != 0 and isinstance(result.exception, GeodriftError)
    assert not list(tmp_path.iterdir())


def test_batch_seeds_is_refused_for_the_transformer(capsys):
    assert "--batch-seeds" in _one_line_error(capsys, ["simulate", "transformer", "--preset", "tiny", "--batch-seeds",
                                                       "--seeds", "1,2", "--no-smollm2"])
    from sim_helpers import tiny_spec

    with pytest.raises(GeodriftError, match="--batch-seeds"):
        run(tiny_spec(steps=2), [1, 2], device="cpu")
