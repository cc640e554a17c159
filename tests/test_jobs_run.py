"""The typed jobs behind prune, share, simulate, sweep, prove and reproduce (``geodrift.jobs``): the same
defaults, checks and numbers from Python as from the shell, one-line errors naming a mistyped keyword, and
``--save``'s typed record."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
from pathlib import Path

import pytest
from test_compress import tiny_llama_folder
from test_compress_cli import _without

from geodrift.cli import compress_cmd, prove_cmd, reproduce_cmd, simulate_cmd, sweep_cmd
from geodrift.cli.main import main
from geodrift.compress.saved import SHARED, Saved
from geodrift.errors import GeodriftError
from geodrift.jobs.compress import PruneRequest, ShareRequest, run_prune, run_share
from geodrift.jobs.events import SILENT, Events
from geodrift.jobs.prove import ProveRequest, run_prove
from geodrift.jobs.reproduce import ReproduceRequest
from geodrift.jobs.simulate import SimulateRequest, run_simulate
from geodrift.jobs.sweep import SweepRequest, run_sweep
from geodrift.render.progress import ConsoleEvents

# (command function, its request, the request fields whose default is the command's own by design)
FACES = [
    (compress_cmd.prune_command, PruneRequest, set()),
    (compress_cmd.share_command, ShareRequest, set()),
    (simulate_cmd.mlp_command, SimulateRequest, {"preset"}),
    # the transformer's command scans SmolLM2 beside by default; the request leaves it to the caller
    (simulate_cmd.transformer_command, SimulateRequest, {"preset", "smollm2"}),
    (sweep_cmd.sweep_command, SweepRequest, set()),
    (prove_cmd.prove, ProveRequest, set()),
    (reproduce_cmd.reproduce_command, ReproduceRequest, set()),
]


def _plain(value: object) -> object:
    # A command's default as the request holds it: an Enum by its value, a comma list as a tuple.
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, str) and "," in value:
        return tuple(float(v) for v in value.split(","))
    return value


@pytest.mark.parametrize(("command", "request_type", "own"), FACES, ids=lambda x: getattr(x, "__name__", ""))
def test_every_command_default_is_its_request_s_default(command, request_type, own) -> None:
    parameters = inspect.signature(command).parameters
    shared = [f for f in dataclasses.fields(request_type) if f.name in parameters and f.name not in own]
    assert len(shared) >= 5, [f.name for f in shared]
    differ = {f.name: (_plain(parameters[f.name].default), f.default) for f in shared
              if f.default is not dataclasses.MISSING and _plain(parameters[f.name].default) != f.default}
    assert not differ


@pytest.mark.parametrize(("call", "keyword"), [
    (lambda: run_prune(PruneRequest(k=2.5)), "k"),  # type: ignore[arg-type]
    (lambda: run_prune(PruneRequest(methods=["geom-v1"])), "methods"),  # type: ignore[arg-type]
    (lambda: run_prune(PruneRequest(force=1)), "force"),  # type: ignore[arg-type]
    (lambda: run_share(ShareRequest(ratios=(0.2, "0.3"))), "ratios"),  # type: ignore[arg-type]
    (lambda: run_share(ShareRequest(threads=True)), "threads"),
    (lambda: run_simulate(SimulateRequest(sim="mlp", preset="smoke", seeds=("1",))), "seeds"),  # type: ignore[arg-type]
    (lambda: run_sweep(SweepRequest(grid_file=3)), "grid_file"),  # type: ignore[arg-type]
    (lambda: run_prove(ProveRequest(claims="gauge")), "claims"),  # type: ignore[arg-type]
])
def test_a_mistyped_keyword_is_one_line_naming_it(call, keyword: str) -> None:
    with pytest.raises(GeodriftError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message and f"({keyword}=" in message and f"{keyword} must be" in message


def test_python_values_the_shell_cannot_give_are_refused_by_option(tmp_path: Path) -> None:
    with pytest.raises(GeodriftError, match="--save-format: 'gguf'"):
        run_share(ShareRequest(save=tmp_path / "x", save_format="gguf"))
    with pytest.raises(GeodriftError, match="--seeds"):
        run_simulate(SimulateRequest(sim="mlp", preset="smoke", seeds=(-1,)))
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama_folder(tmp_path_factory.mktemp("jobs") / "llama", n_layers=4)


TIMES = {"seconds", "eval_seconds", "build_seconds", "schema_version", "kind", "nonfinite", "saved"}


def test_share_from_python_gives_the_shell_s_numbers_and_a_typed_save(tiny: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from geodrift.compress.factorized import load_factored

    options = dict(ratios=(0.4,), methods=("svd-llm",), verdict_ratio=0.0, calib_windows=2, select_windows=1,
                   seq_len=32, eval_windows=4, save_method="svd-llm")
    with pytest.raises(SystemExit) as end:
        main(["compress", "share", str(tiny), "--ratios", "0.4", "--methods", "svd-llm", "--verdict-ratio", "0",
              "--calib-windows", "2", "--select-windows", "1", "--seq-len", "32", "--eval-windows", "4",
              "--save-method", "svd-llm", "--save", str(tmp_path / "shell"), "--json-out", str(tmp_path / "s.json"),
              "--quiet"])
    assert end.value.code == 0
    shell = json.loads((tmp_path / "s.json").read_text())
    result = run_share(ShareRequest(model=str(tiny), save=tmp_path / "python", **options))  # type: ignore[arg-type]
    assert _without(result.to_dict(), TIMES) == _without(shell, TIMES)
    saved = result.saved
    assert isinstance(saved, Saved) and saved.command == SHARED and saved.folder == str(tmp_path / "python")
    assert saved.to_dict().keys() == shell["saved"].keys() and saved.files.keys() == shell["saved"]["bytes"].keys()
    assert saved.files["model.safetensors"] == shell["saved"]["bytes"]["model.safetensors"]
    assert saved.load == f"geodrift.compress.factorized.load_factored({str(tmp_path / 'python')!r})"
    assert load_factored(saved.folder) is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        saved.folder = "elsewhere"  # type: ignore[misc]


def test_prune_from_python_claims_its_outputs_before_the_work(tiny: Path, tmp_path: Path) -> None:
    users = tmp_path / "mine.json"
    users.write_text("{}")
    with pytest.raises(GeodriftError, match="--json-out"):
        run_prune(PruneRequest(model=str(tiny), max_remove=1, json_out=users))
    assert users.read_text() == "{}"


def test_console_events_follow_the_protocol_and_close_a_bar_on_error(capsys) -> None:
    events: Events = ConsoleEvents(quiet=False)
    with pytest.raises(RuntimeError), events:  # type: ignore[attr-defined]
        events.stage("loading the model")
        events.begin("pruning", 2, "evaluations")
        events.advance(1, description="rank")
        raise RuntimeError("stop")
    assert capsys.readouterr().err.strip() == "… loading the model"
    for name in ("stage", "begin", "advance", "training", "sweep", "end"):
        assert callable(getattr(SILENT, name)) and callable(getattr(ConsoleEvents(), name))
