"""Issue 33: every file a scan writes - named or derived - follows one policy, the set is replaced as a whole, and
every cell prints literally.

- A user's ``fig_trajectory.png``, ``fig_experts.png`` or ``s.pairs.csv`` beside ``--plot fig.png`` / ``--csv
  s.csv`` is refused before the work (it was replaced, exit 0); the Python API's ``report.plot(path)`` refuses a
  file geodrift did not write unless ``overwrite=True``.
- A run interrupted between its files leaves the previous run's set whole (no new JSON beside an old CSV).
- A markup string that is not valid markup (``[/]``, the rank-0 verdict cell) and control characters print
  literally in every table (all tables go through ``geodrift.render.layout``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, mixtral_state, write_hf_folder
from rich.console import Console
from rich.text import Text

import geodrift
from geodrift.cli.main import main
from geodrift.errors import GeodriftError
from geodrift.render.layout import Col, Grid, print_grid

HOSTILE = ["[/]", "[bold]", "[]undefined[/]", "a\x1b[2Jb", "c\rd", "\u202eevil", "x[/bold]"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_hf_folder(tmp_path_factory.mktemp("m") / "llama", llama_state(3, 32, 4, 2, 48, seed=4),
                           hf_config(n_layers=3), dtype=torch.float32)


def _scan(model: Path, *args: str) -> tuple[int, str]:
    err = io.StringIO()
    import contextlib

    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(["scan", str(model), "--k", "2", "--null-draws", "4", "--quiet", "--json", *args])
            code = 0
        except SystemExit as done:
            code = int(done.code or 0)
    return code, err.getvalue()


@pytest.fixture(scope="module")
def mixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = hf_config(n_layers=3) | {"model_type": "mixtral", "num_local_experts": 2}
    return write_hf_folder(tmp_path_factory.mktemp("moe") / "mixtral", mixtral_state(n_experts=2), config,
                           dtype=torch.float32)


@pytest.mark.parametrize(("which", "option", "name", "derived"), [("model", "--plot", "fig.png", "fig_trajectory.png"),
                                                                  ("mixture", "--plot", "fig.png", "fig_experts.png"),
                                                                  ("model", "--csv", "s.csv", "s.pairs.csv")])
def test_a_users_file_under_a_derived_name_is_refused_before_the_work(request: pytest.FixtureRequest, tmp_path: Path,
                                                                     which: str, option: str, name: str,
                                                                     derived: str) -> None:
    mine = tmp_path / derived
    mine.write_bytes(b"the user's own file")
    code, err = _scan(request.getfixturevalue(which), option, str(tmp_path / name))
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(mine) in err, err
    assert mine.read_bytes() == b"the user's own file"
    assert sorted(p.name for p in tmp_path.iterdir()) == [derived]  # nothing written, not even the named file


def test_a_dense_model_leaves_a_users_experts_figure_alone(model: Path, tmp_path: Path) -> None:
    mine = tmp_path / "fig_experts.png"
    mine.write_bytes(b"the user's own file")
    assert _scan(model, "--plot", str(tmp_path / "fig.png"))[0] == 0  # a dense model writes no experts' figure
    assert mine.read_bytes() == b"the user's own file" and (tmp_path / "fig_trajectory.png").exists()


def test_a_second_run_replaces_its_own_derived_files(model: Path, tmp_path: Path) -> None:
    args = ["--plot", str(tmp_path / "fig.png"), "--csv", str(tmp_path / "s.csv")]
    assert _scan(model, *args)[0] == 0
    assert (tmp_path / "fig_trajectory.png").exists() and (tmp_path / "s.pairs.csv").exists()
    assert _scan(model, *args, "--seed", "3")[0] == 0


def test_an_interrupted_run_leaves_the_previous_runs_set_whole(model: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = ["--json-out", str(tmp_path / "r.json"), "--csv", str(tmp_path / "s.csv"),
               "--plot", str(tmp_path / "fig.png")]
    assert _scan(model, *outputs)[0] == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert {"r.json", "s.csv", "s.pairs.csv", "fig.png", "fig_trajectory.png"} <= set(before)
    import geodrift.render.scan_plot as scan_plot

    def interrupted(*args: object, **kwargs: object) -> Path:  # after the JSON, the CSVs and the first figure
        raise KeyboardInterrupt

    monkeypatch.setattr(scan_plot, "write_trajectory_plot", interrupted)
    code, err = _scan(model, *outputs, "--seed", "5")  # another seed: every file of this run differs
    assert code == 130, (code, err)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # the old set, whole; no .tmp file


def test_report_plot_refuses_a_file_geodrift_did_not_write_unless_overwrite(tmp_path: Path) -> None:
    report = geodrift.scan(llama_state(3, 32, 4, 2, 48, seed=4), k=2, null_draws=4, ov=False)
    mine = tmp_path / "fig.png"
    mine.write_bytes(b"the user's figure")
    with pytest.raises(GeodriftError) as info:
        report.plot(mine)
    assert "overwrite=True" in str(info.value) and str(mine) in str(info.value)
    assert mine.read_bytes() == b"the user's figure"
    report.plot(mine, overwrite=True)
    assert mine.read_bytes()[:4] == b"\x89PNG"
    report.plot(mine)  # now geodrift's own (recorded in the folder's manifest): replaced without overwrite
    with pytest.raises(GeodriftError, match="overwrite="):
        report.plot(tmp_path / "g.png", overwrite="yes")  # type: ignore[arg-type]


def test_every_table_prints_markup_and_control_characters_literally() -> None:
    grid = Grid("[/]title \x1b[2J", [Col("[bold]key", justify="left"), Col("[/]"), Col("prose [/]", prose=True)],
                caption="[/]caption")
    for cell in HOSTILE:
        grid.add(cell, Text(cell), cell + " words that wrap " * 3)
    out = io.StringIO()
    print_grid(grid, console=Console(file=out, width=60, color_system=None))
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    for shown in ("[/]", "[bold]", "[]undefined[/]", "a\\x1b[2Jb", "c\\rd", "\\u202eevil", "x[/bold]"):
        assert shown in text, (shown, text)


def test_all_zero_projections_render_their_table_without_a_markup_error(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    state = llama_state(3, 32, 4, 2, 48)
    for i in range(3):
        state[f"model.layers.{i}.self_attn.v_proj.weight"] = torch.zeros(16, 32)
    folder = write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3), dtype=torch.float32)
    for extra in ([], ["--full"]):
        with pytest.raises(SystemExit) as done:
            main(["scan", str(folder), "--k", "2", "--null-draws", "4", "--quiet", "--no-ov", *extra])
        assert done.value.code in (0, None)
        assert "undefined" in capsys.readouterr().out


def test_a_corrupt_tensor_is_refused_by_name_or_skipped_and_listed(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Random bytes in tensor data: one finite value of 2e21 among weights of magnitude 1 (found by the fuzz).
    state = llama_state(3, 32, 4, 2, 48)
    state["model.layers.1.mlp.up_proj.weight"][3, 5] = 2e21
    folder = write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3), dtype=torch.float32)
    code, err = _scan(folder)
    assert code == 2 and "model.layers.1.mlp.up_proj.weight" in err and "--skip-nonfinite" in err, err
    with pytest.raises(SystemExit) as done:
        main(["scan", str(folder), "--k", "2", "--null-draws", "4", "--quiet", "--json", "--skip-nonfinite"])
    assert done.value.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert any("skipped mlp_up[1]" in note and "up_proj" in note for note in doc["notes"]), doc["notes"]
    assert "nonfinite" not in doc


# Issue 39, item 4: one run's outputs are checked against each other before any work; a replaced set loses the
# members the new run does not write (geodrift's only).
COLLISIONS = [
    (["scan"], ["--plot", "f.png", "--json-out", "f_trajectory.png"], "--plot f.png (which also writes"),
    (["scan"], ["--csv", "s.csv", "--json-out", "s.pairs.csv"], "--csv s.csv (which also writes"),
    (["scan"], ["--json-out", "r.csv", "--csv", "r.csv"], "--json-out r.csv and --csv r.csv"),
    (["scan"], ["--plot", "f.png", "--json-out", "f_experts.png"], "--plot f.png (which also writes"),
    (["drift", "{model}"], ["--plot", "d.png", "--json-out", "d_rotation.png"], "--plot d.png (which also writes"),
    (["drift", "{model}"], ["--csv", "d.csv", "--json-out", "d.rotation.csv"], "--csv d.csv (which also writes"),
    (["compare", "{model}"], ["--csv", "c.json", "--json-out", "./c.json"], "--json-out c.json and --csv c.json"),
]


@pytest.mark.parametrize(("command", "outputs", "said"), COLLISIONS)
def test_two_outputs_of_one_run_naming_the_same_file_are_refused_before_any_work(
        model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], outputs: list[str],
        said: str) -> None:
    # The later one silently won (exit 0): a JSON report written over the trajectory figure, the CSV over the JSON.
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    import contextlib

    argv = [command[0], str(model), *[str(model) if a == "{model}" else a for a in command[1:]], "--k", "2",
            "--null-draws", "4", "--quiet", *outputs]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as done:
        main(argv)
    lines = err.getvalue().strip().splitlines()
    assert done.value.code == 2 and len(lines) == 1 and said in lines[0] and "same file" in lines[0], lines
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_the_compress_save_folder_and_an_output_file_of_the_same_name_are_refused(tmp_path: Path) -> None:
    from geodrift.errors import GeodriftError
    from geodrift.jobs.compress import ShareRequest, run_share

    with pytest.raises(GeodriftError, match="--json-out .* and --save .* would write the same file"):
        run_share(ShareRequest(model=tmp_path / "nope", save=tmp_path / "x", json_out=tmp_path / "x"))


def test_a_replaced_set_loses_the_earlier_members_this_run_does_not_write(model: Path, tmp_path: Path) -> None:
    # The old f_gauge.png (--full) and f_trajectory.png (3 layers) stayed beside a later run's f.png, which drew
    # neither: a set of figures from two runs.
    fig = tmp_path / "f.png"
    assert _scan(model, "--plot", str(fig), "--full")[0] == 0
    assert (tmp_path / "f_gauge.png").exists() and (tmp_path / "f_trajectory.png").exists()
    assert _scan(model, "--plot", str(fig), "--layers", "0-1")[0] == 0  # no --full, 2 layers: no trajectory
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["f.png"]


def test_a_users_file_under_a_member_name_the_run_does_not_write_is_left_alone(model: Path, tmp_path: Path) -> None:
    mine = tmp_path / "f_gauge.png"
    mine.write_bytes(b"the user's own gauge figure")
    assert _scan(model, "--plot", str(tmp_path / "f.png"))[0] == 0  # no --full: f_gauge.png is not this run's
    assert mine.read_bytes() == b"the user's own gauge figure"
