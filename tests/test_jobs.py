"""The typed jobs behind both faces (geodrift/jobs/): one set of defaults, checks before the work, errors in
the command line's words (the Python face re-words them to keywords)."""

from __future__ import annotations

import inspect
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import torch

import geodrift
from geodrift.cli.inspect_cmd import inspect_command
from geodrift.cli.scan_cmd import scan_command
from geodrift.cli.series_cmd import compare_command, drift_command
from geodrift.errors import GeodriftError
from geodrift.jobs.inspect import InspectRequest
from geodrift.jobs.scan import ScanRequest, run_scan
from geodrift.jobs.series import CompareRequest, DriftRequest, run_compare, run_drift
from tests._checkpoints import hf_config, llama_state, write_hf_folder

# Options of a command that are its rendering, not its job's (inspect's --full; scan's --full is its job's too).
RENDERING = {"as_json", "wide", "quiet", "full"}
# Each command's positional inputs -> the request field that holds them.
INPUTS = {"checkpoints": "checkpoints", "a": "a", "b": "b", "model": "model"}


def _default(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


@pytest.mark.parametrize(("command", "request_type"), [
    (scan_command, ScanRequest), (drift_command, DriftRequest), (compare_command, CompareRequest),
    (inspect_command, InspectRequest)])
def test_every_option_of_a_command_is_a_field_of_its_request_with_the_same_default(command: Any,
                                                                                    request_type: type) -> None:
    defaults = {f.name: f.default for f in fields(request_type)}
    for name, parameter in inspect.signature(command).parameters.items():
        if name in RENDERING:
            continue
        field = INPUTS.get(name, name)
        assert field in defaults, (command.__name__, name)
        if name not in INPUTS or parameter.default is not inspect.Parameter.empty:
            assert _default(parameter.default) == defaults[field], (command.__name__, name)


@pytest.mark.parametrize(("face", "request_type"), [("scan", ScanRequest), ("drift", DriftRequest),
                                                    ("compare", CompareRequest)])
def test_the_python_face_has_the_requests_defaults(face: str, request_type: type) -> None:
    defaults = {f.name: f.default for f in fields(request_type)}
    for name, parameter in inspect.signature(getattr(geodrift, face)).parameters.items():
        if name != "progress" and parameter.default is not inspect.Parameter.empty:
            assert parameter.default == defaults[name], name


@pytest.mark.parametrize(("options", "message"), [
    ({"k": 2.5}, "--k: must be an integer (e.g. --k 8), got a float"),
    ({"roles": ["q", 3]}, '--roles: must be a string like "q,k" or a list of role names (strings), got an int in '
                          "the list"),
    ({"ov": "yes"}, "--ov: must be True or False, got a str"),
    ({"view": "cooked"}, "--view: 'cooked' is not a view; use raw, folded or canonical"),
    ({"max_memory": -1}, "--max-memory: must be a size such as '8G' or a positive number of bytes, got -1"),
    ({"plot": "f.gif"}, "--plot f.gif: cannot tell the figure format from '.gif'"),
    ({"config": ["x"]}, "config=['x']: must be a dict of config.json keys"),
])
def test_the_job_names_the_command_lines_option_and_the_python_face_the_keyword(options: dict[str, Any],
                                                                              message: str) -> None:
    given = {"k": 2, "null_draws": 4, **options}
    with pytest.raises(GeodriftError) as job:
        run_scan(ScanRequest(model=llama_state(3, 32, 4, 2, 48), **given))
    assert str(job.value).startswith(message), str(job.value)
    if set(options) <= set(inspect.signature(geodrift.scan).parameters):  # --plot is the CLI's (report.plot())
        with pytest.raises(GeodriftError) as face:
            geodrift.scan(llama_state(3, 32, 4, 2, 48), **given)
        name = next(iter(options))
        assert str(face.value).startswith(f"{name}=") and "--" not in str(face.value), str(face.value)


def test_a_progress_that_is_not_a_function_is_refused_by_every_job() -> None:
    state = llama_state(3, 32, 4, 2, 48)
    for call in (lambda: run_scan(ScanRequest(model=state), "x"),  # type: ignore[arg-type]
                 lambda: run_drift(DriftRequest([state, state]), "x"),  # type: ignore[arg-type]
                 lambda: run_compare(CompareRequest(state, state), "x")):  # type: ignore[arg-type]
        with pytest.raises(GeodriftError, match=r"^progress='x': must be a function"):
            call()


def test_the_jobs_claim_every_output_before_reading_a_model(tmp_path: Path) -> None:
    users = tmp_path / "s.pairs.csv"  # derived from --csv s.csv: a user's file there is never overwritten
    users.write_text("mine")
    missing = tmp_path / "unreadable-model.safetensors"  # it exists (a missing one is refused first of all)
    missing.write_bytes(b"not a checkpoint")
    with pytest.raises(GeodriftError, match=r"^--csv .*s\.pairs\.csv: the file exists and geodrift did not write it"):
        run_scan(ScanRequest(model=missing, csv_out=tmp_path / "s.csv"))
    (tmp_path / "d.rotation.csv").write_text("mine")
    with pytest.raises(GeodriftError, match=r"^--csv .*d\.rotation\.csv: the file exists"):
        run_drift(DriftRequest([missing, missing], csv_out=tmp_path / "d.csv"))
    assert users.read_text() == "mine"


@pytest.mark.parametrize("argv", [["scan", "nope.gguf"], ["drift", "nope-a", "nope-b"], ["compare", "a", "nope"],
                                  ["inspect", "nope.gguf"], ["scan", "--plot", "f.gif"], ["scan", "--max-memory", "3Q"],
                                  ["scan", "--names", "nope.json"], ["drift", "a", "b", "--plot", "f.png", "--dpi", "5"]])
def test_bad_paths_and_options_are_refused_before_torch_is_imported(argv: list[str], tmp_path: Path) -> None:
    """A missing model or --names file, a --plot suffix, --dpi, --max-memory: one line, exit 2, and torch never
    imported (what makes the refusal take well under a second; benchmarks/bench_cli_startup.py times it)."""
    import subprocess
    import sys

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code = ("import sys; from geodrift.cli.entry import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print('torch' in sys.modules, e.code, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and lines[-1] == "False 2", proc.stderr


def test_the_scan_job_reports_its_total_before_the_first_matrix_and_drift_takes_models_in_memory(
        tmp_path: Path) -> None:
    events: list[str] = []
    result = run_scan(ScanRequest(model=llama_state(3, 32, 4, 2, 48), k=2, null_draws=4, ov=False),
                      progress=events.append, on_total=lambda n: events.append(f"total {n}"))
    assert events[0] == "total 21" and len(events) == 22 and result.gauge is None
    folder = write_hf_folder(tmp_path / "m", llama_state(3, 32, 4, 2, 48, seed=1), hf_config(n_layers=3),
                             dtype=torch.float32)
    rep = run_drift(DriftRequest([llama_state(3, 32, 4, 2, 48), folder], k=1, null_draws=4))
    assert rep.checkpoints == ["state dict (in memory)", str(folder)] and rep.rotation


@pytest.mark.parametrize("option", ["--csv", "--json-out", "--plot"])
def test_an_empty_output_name_is_one_line_before_the_work(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Found fuzzing the jobs: --csv "" reached Path('.').with_name and ended in a ValueError traceback.
    from geodrift.cli.main import main

    with pytest.raises(SystemExit) as end:
        main(["scan", option, "", "--layers", "0-1", "--null-draws", "4", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert end.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {option}: must be a file name"), err
