"""Terminal output never hides a number: at 80 columns and piped, every value of every table is printed whole.

The real commands run on the real embedded model (and the MLP smoke runs): their tables must fit the
width (no line longer than it), contain no elision ("…"), and contain every number of the report
as printed by ``fmt`` - so a value folded across two lines would fail too. ``--wide`` prints each
table whole, wider than the terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_helpers import smoke_result, smoke_spec, tiny_result, tiny_spec
from strategies import examples
from typer.testing import CliRunner

from geodrift.cli.main import app
from geodrift.continuity import Report
from geodrift.render import console, fmt, fmt_z
from geodrift.render.layout import Col, Grid, grid_markdown, grid_tables, plain
from geodrift.render.scan import summary_line as scan_summary_line
from geodrift.render.sim import render_reproduction, summary_line
from geodrift.sim.reproduce import assemble

runner = CliRunner()
SCAN = ["scan", "--layers", "0-4", "--k", "3", "--null-draws", "10"]


def _numbers(report: Report) -> set[str]:
    # Every number the scan's tables show, formatted as they are shown (the canonical view, the default, shows
    # a head/hidden-side space as "aligned": its numbers are in the JSON only).
    out = set()
    for r in report.roles:
        for s in r.spaces.values():
            if s.gauge == "aligned":
                continue
            out |= {fmt(s.sigma2_wa), fmt(s.sigma2_null_mean), fmt(s.subspace_overlap), fmt(s.subspace_baseline)}
            for vc in s.vectors:
                out |= {fmt(vc.mean), fmt(vc.null_mean)}
                if vc.k == 1:
                    out |= {fmt(vc.median), fmt(vc.null_std), fmt(vc.baseline), f"z={fmt_z(vc.z)}"}
    return out


def _assert_whole(text: str, width: int, numbers: set[str]) -> None:
    # Table lines fit the width; prose (captions, notes) wraps; the summary is one logical line by design.
    assert "…" not in text and "..." not in text
    too_long = [line for line in text.splitlines() if len(line) > width and set(line) & set("│┃┏┗┡└├")]
    assert not too_long, too_long[:3]
    missing = sorted(n for n in numbers if n not in text)
    assert not missing, missing[:10]


@pytest.fixture(scope="module")
def scan_report() -> Report:
    result = runner.invoke(app, [*SCAN, "--json"])
    assert result.exit_code == 0, result.output
    return Report.from_dict(json.loads(result.stdout))


def test_scan_at_80_columns_prints_every_value_whole(scan_report: Report, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, [*SCAN, "--full"])  # every table (the brief default: tests/test_scan_brief.py)
    assert result.exit_code == 0, result.output
    _assert_whole(result.stdout, 80, _numbers(scan_report))
    assert "(part 1 of" in result.stdout  # the wide table really was split, not squeezed
    lines = result.stdout.rstrip().splitlines()  # the summary line, last, wrapped between words at 80 columns
    first = max(i for i, line in enumerate(lines) if line.startswith(f"frame {len(scan_report.roles)}/"))
    assert " ".join(line.strip() for line in lines[first:]) == scan_summary_line(scan_report)
    assert all(len(line) <= 80 for line in lines)


def test_scan_piped_to_another_program_prints_every_value_whole(scan_report: Report):
    # A real pipe (no terminal anywhere, no COLUMNS): what a notebook's `!`, tee or a CI log sees.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-m", "geodrift", *SCAN, "--full"], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr
    _assert_whole(proc.stdout, 80, _numbers(scan_report))


def test_wide_prints_each_table_whole_beyond_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, [*SCAN, "--full", "--wide"])
    assert result.exit_code == 0, result.output
    assert "(part " not in result.stdout and "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) > 80


def test_simulator_tables_at_80_columns_print_every_value_whole(monkeypatch):
    monkeypatch.setattr(console, "_width", 80)
    rep = assemble("mlp", "smoke", [smoke_spec(0), smoke_spec(1)], [smoke_result(0), smoke_result(1)], [42])
    with console.capture() as captured:
        render_reproduction(rep)
    text = captured.get()
    numbers = {fmt(st_.mean, 1 if c == "rotation_deg" else 2 if c == "rel_change" else 3)
               for stats in rep.stats.values() for c, st_ in stats.items() if st_.n}
    _assert_whole(text, 80, numbers)
    lines = text.rstrip().splitlines()  # the summary, last, wrapped between words at 80 columns
    first = next(i for i, line in enumerate(lines) if line.startswith("geodrift simulate mlp --preset smoke: 2 config"))
    assert " ".join(line.strip() for line in lines[first:]) == summary_line(rep)
    assert all(len(line) <= 80 for line in lines[first:])


def test_the_transformer_s_default_output_fits_80_lines_and_full_prints_the_rest(monkeypatch):
    monkeypatch.setattr(console, "_width", 80)
    rep = assemble("transformer", "tiny", [tiny_spec(steps=12)], [tiny_result()], [42])
    outputs = {}
    reference = rep.results[0].report  # any report serves as the reference column
    for detail in (False, True):
        with console.capture() as captured:
            render_reproduction(rep, reference, detail=detail)
        outputs[detail] = captured.get()
    brief, full = outputs[False], outputs[True]
    assert len(brief.splitlines()) <= 80, brief
    assert "\\n" not in brief + full  # no escaped line break printed inside a cell
    numbers = {fmt(st_.mean) for stats in rep.stats.values() for c, st_ in stats.items() if st_.n and c != "ppl"}
    _assert_whole(brief, 80, numbers)
    assert brief.count("criterion of claim") == len({v.criterion for v in rep.verdicts}) < len(rep.verdicts)
    assert all(f"│ {i:>2} │" in brief for i in range(1, len(rep.verdicts) + 1))  # every claim numbered, one row
    assert "--full:" in brief and "Over training" not in brief and "Trajectory shape" not in brief
    q = reference.role("q").spaces["v"].vectors[0]
    assert f"Q v1 {fmt(q.mean)} ({fmt(q.null_mean)})" in " ".join(brief.split())  # the reference, with its null
    assert "Final weights beside pretrained models" in full
    assert "Over training" in full and "Trajectory shape" in full and "geodrift measured" in full
    from geodrift.render.sim import reference_grid
    from geodrift.render.verdicts import found_words

    rows = {plain(row[0]): plain(row[-1]) for row in reference_grid(rep, reference).rows}
    assert all(cell.count("\n") == 1 and "\\n" not in cell for cell in rows.values()), rows  # two real lines a cell
    v = reference.role("v")
    assert rows["V"] == "frame {}\npath {}".format(*found_words(v)) and "holds" not in rows["V"]  # V: none / found
    assert "has no frame across layers in either space" in " ".join(full.split())  # V's claim says what the theory predicts


def test_prove_table_at_80_columns_is_not_elided(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["prove", "equivariance"])
    assert result.exit_code == 0, result.output
    _assert_whole(result.stdout, 80, {"verified"})
    assert result.stdout.rstrip().splitlines()[-1].startswith("1/1 claims verified")


@examples(40, deadline=None)
@given(width=st.integers(40, 160), n_cols=st.integers(1, 12), cell=st.integers(1, 18),
       prose=st.booleans())
def test_a_grid_is_split_to_fit_any_width_and_keeps_every_cell(width: int, n_cols: int, cell: int, prose: bool):
    grid = Grid("title", [Col("key", "left")] + [Col(f"c{i}", prose=prose and i == 0) for i in range(n_cols)])
    values = [[f"r{r}"] + [f"{r}.{i}".ljust(cell, "x") for i in range(n_cols)] for r in range(3)]
    for row in values:
        grid.add(*row)
    parts = grid_tables(grid, width)
    shown = [[plain(c) for c in column.cells] for part in parts for column in part.table.columns]
    for row in values:  # every cell is in some part, whole
        for value in row[1:]:
            assert any(value in column for column in shown)
    from rich.console import Console

    test_console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    for part in parts:
        test_console.print(part.table)
    text = test_console.export_text()
    assert "…" not in text
    if 12 + cell + 5 <= width:  # the key column and one value column fit: nothing is folded
        assert all(len(line) <= width for line in text.splitlines())
        for row in values:
            assert all(value in text for value in row[1:])


def test_scan_files_get_the_users_umask_and_quiet_prints_nothing_on_stderr(tmp_path: Path):
    # (file modes in general are tested in test_atomic.py; here the CLI's own files, end to end)
    old = os.umask(0o022)
    try:
        result = runner.invoke(app, [*SCAN, "--json-out", str(tmp_path / "s.json"), "--csv", str(tmp_path / "s.csv"),
                                     "--quiet"])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    for name in ("s.json", "s.csv", "s.pairs.csv"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644
    assert result.stderr == ""  # --quiet: nothing on stderr


def test_a_grid_in_markdown_keeps_every_cell_and_escapes_pipes():
    grid = Grid("t", [Col("Proj", "left"), Col("|cos|")], caption="floor 0.05")
    grid.add("Q", "[dim]0.419[/dim]\n(null 0.03)")
    lines = grid_markdown(grid)
    assert lines[:4] == ["**t**", "", "| Proj | \\|cos\\| |", "|---|---:|"]
    assert lines[4] == "| Q | 0.419<br>(null 0.03) |" and "*floor 0.05*" in lines
