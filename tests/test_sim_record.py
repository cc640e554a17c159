"""Run records and the `geodrift simulate mlp` command: atomic JSON, reload, re-render, errors."""

from __future__ import annotations

import json

from sim_helpers import mnist5k, smoke_spec
from typer.testing import CliRunner

from geodrift.cli.main import _register, app
from geodrift.sim.ensemble import run_group
from geodrift.sim.record import RunRecord, load_record

_register()
runner = CliRunner()


def test_record_round_trips_through_run_json(tmp_path):
    rec = run_group(smoke_spec(0), [42], mnist5k(), out=tmp_path)[0]
    again = load_record(tmp_path / "Res+ReLU" / "seed42" / "run.json")
    assert again.rows == rec.rows and again.summary == rec.summary
    assert again.config["mlp"]["width"] == 32 and again.seed == 42
    assert set(again.versions) >= {"python", "torch", "numpy", "geodrift"}
    payload = json.loads((tmp_path / "Res+ReLU" / "seed42" / "run.json").read_text())
    assert payload["series"]["columns"] == ["step", "epoch", "source", "metric", "space", "k", "layer", "value"]
    assert not list(tmp_path.rglob("*.tmp"))


def test_record_value_of_missing_series_is_nan():
    rec = RunRecord(label="x", seed=1, config={}, data="d", device="cpu", git_revision=None)
    assert rec.value("W", "cont", "v", 1) != rec.value("W", "cont", "v", 1)


def test_cli_smoke_prints_json_then_reload_re_renders_without_training(tmp_path):
    result = runner.invoke(app, ["simulate", "mlp", "--preset", "smoke", "--out", str(tmp_path), "--json",
                                 "--plot", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert [c["label"] for c in payload["configs"]] == ["Res+ReLU", "Res+None"]
    assert (tmp_path / "plots" / "smoke_continuity.png").stat().st_size > 1000
    again = runner.invoke(app, ["simulate", "mlp", "--reload", "--out", str(tmp_path), "--json"])
    assert again.exit_code == 0, again.output
    reloaded = json.loads(again.stdout.strip().splitlines()[-1])
    assert reloaded["configs"] == payload["configs"]


def test_cli_bad_options_exit_with_one_line_errors(tmp_path):
    from geodrift.cli.main import main  # noqa: F401  (main() maps GeodriftError to exit 2)

    result = runner.invoke(app, ["simulate", "mlp", "--preset", "nope"])
    assert result.exit_code != 0 and "unknown 'nope'" in str(result.exception)
    result = runner.invoke(app, ["simulate", "mlp", "--reload"])
    assert "--out" in str(result.exception)
