"""The default scan output fits a glance: the embedded model's scan (the canonical view, its default) fits 25 rows at
80 columns, each projection's frame and path verdicts on the row of its numbers, every |cos| beside its z and
permutation-null mean, one line on the view (what ``aligned`` means, where the paper's raw numbers are) and no
criterion; ``--full`` (and its older name ``--detail``) prints every table and criterion, ``geodrift explain``
what each verdict means.

The real CLI runs in a real pipe (``COLUMNS=80``) on the real embedded SmolLM2-135M, all layers, default ``--k``;
only ``--null-draws`` is small (it changes numbers, not the number of rows).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from rich.cells import cell_len
from typer.testing import CliRunner

from geodrift.cli.main import app
from geodrift.continuity import Report
from geodrift.io.atomic import payload_of
from geodrift.render import fmt
from geodrift.render.scan import summary_line

MAX_ROWS = 25
WIDTH = 80
runner = CliRunner()


def _rows_on_screen(text: str) -> int:
    # A line wider than the terminal (the one-line summary) takes several rows of it.
    return sum(max(1, math.ceil(cell_len(line) / WIDTH)) for line in text.splitlines())


def _cell(vc) -> str:
    return f"{fmt(vc.mean)} z={vc.z:.0f} ({fmt(vc.null_mean)})"


def test_the_default_scan_of_the_embedded_model_fits_25_rows_with_each_verdict_beside_its_numbers(tmp_path: Path):
    report_file = tmp_path / "scan.json"
    env = {**{k: v for k, v in os.environ.items() if k != "LINES"}, "COLUMNS": str(WIDTH)}
    proc = subprocess.run([sys.executable, "-m", "geodrift", "scan", "--null-draws", "10", "--quiet",
                           "--json-out", str(report_file), "--csv", str(tmp_path / "scan.csv")],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert _rows_on_screen(text) <= MAX_ROWS, text
    assert not [line for line in text.splitlines() if set(line) & set("│┃┏└") and cell_len(line) > WIDTH]
    report = Report.from_dict(payload_of(json.loads(report_file.read_text())))
    assert len(report.roles) == 8  # Q, K, V, O, Gate, Up, Down, OV
    table = [line for line in text.splitlines() if line.startswith("│")]
    assert len(table) == len(report.roles)  # one row per projection
    # the default view is canonical (SmolLM2's gauge group is derived): head/hidden-side spaces read "aligned"
    assert report.view == "canonical" and report.notes == []
    for role, line in zip(report.roles, table, strict=True):
        cells = [c.strip() for c in line.strip("│").split("│")]
        v1, u1 = (("aligned" if role.spaces[x].gauge == "aligned" else _cell(role.spaces[x].vectors[0]))
                  for x in ("v", "u"))
        found = {"holds": "none", "fails": "found"} if role.predicted_space is None else {}  # V: what was found
        assert cells == [role.label, {"v": "v", "u": "u", None: "none"}[role.predicted_space],
                         v1, u1, found.get(role.verdict, role.verdict),
                         found.get(role.path_verdict, role.path_verdict)], line
    # every similarity on screen sits beside its null: one "|cos| z=.. (null)" cell per shown space, no other
    # decimals (two for OV, whose spaces are both residual-side; one for the others)
    for role, line in zip(report.roles, table, strict=True):
        shown = sum(space.gauge != "aligned" for space in role.spaces.values())
        assert len(re.findall(r"\d\.\d{3}", line)) == 2 * len(re.findall(r"\d\.\d{3} z=-?\d+ \(\d\.\d{3}\)", line))
        assert len(re.findall(r"\d\.\d{3} z=-?\d+ \(\d\.\d{3}\)", line)) == shown == (2 if role.label == "OV" else 1)
    flat = " ".join(text.split())  # the view line: what aligned means, where the paper's metric is
    assert text.splitlines()[0].startswith("Geometric continuity") and "canonical view" in " ".join(text.splitlines()[:2])
    assert "aligned: ordered by the view itself, not measured; paper's numbers: --view raw" in flat
    assert "criterion:" not in text and "criterion (" not in text and "gauge:" not in text  # in --full, explain
    assert "Trajectory shape" not in text and "k=1" not in text and "--full" in text and "geodrift explain" in text
    # the summary line, last, wrapped between words to the terminal's width (no line of the output is wider)
    lines = text.rstrip().splitlines()
    first = [i for i, line in enumerate(lines) if line.startswith("frame 8/8, path ")]
    assert len(first) == 1 and all(cell_len(line) <= WIDTH for line in lines), text
    assert " ".join(line.strip() for line in lines[first[0]:]) == summary_line(report)
    assert "canonical view (gauge-invariant)" in summary_line(report)
    # the CSV: the view on every row; an aligned space's row marked and judged by no verdict; V's word as above
    import csv

    with open(tmp_path / "scan.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["k"] == "1"]
    assert {row["view"] for row in rows} == {"canonical"}
    assert all(row["verdict"] == row["path_verdict"] == "" for row in rows if row["gauge"] == "aligned")
    assert {row["verdict"] for row in rows if row["role"] == "attn_v" and row["gauge"] != "aligned"} <= {"none", "found"}
    assert "V (neither predicted): no frame, no path, as predicted" in summary_line(report)


def test_full_prints_every_table_and_detail_is_its_older_name(monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    small = ["scan", "--layers", "0-7", "--k", "3", "--null-draws", "8", "--quiet"]
    full, detail, brief = (runner.invoke(app, [*small, *flag]) for flag in (["--full"], ["--detail"], []))
    assert full.exit_code == detail.exit_code == brief.exit_code == 0, (full.output, brief.output)
    assert full.stdout == detail.stdout
    for title in ("Depth profile", "Continuity by singular-vector index k", "Trajectory shape", "σ²-WA v"):
        assert title in full.stdout and title not in brief.stdout
    assert "Q: frame " in full.stdout and "frame criterion (" not in full.stdout  # per projection, not grouped
    assert "path criterion: depth path" in full.stdout and "criterion:" not in brief.stdout
    assert full.stdout.splitlines()[-3:] == brief.stdout.splitlines()[-3:]  # the same summary (wrapped at 80)


def test_a_projection_without_a_prediction_shows_dashes_and_says_why(monkeypatch):
    from dataclasses import replace

    from geodrift.render.layout import plain
    from geodrift.render.scan import brief_grid

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    result = runner.invoke(app, ["scan", "--view", "raw", "--layers", "0-3", "--roles", "q,k", "--k", "2",
                                 "--null-draws", "8", "--json"])  # raw: both spaces shown with their numbers
    assert result.exit_code == 0, result.output
    report = Report.from_dict(payload_of(json.loads(result.stdout)))
    assert "no prediction" not in (brief_grid(report).caption or "")
    report.roles[1] = replace(report.roles[1], verdict="no prediction")
    grid = brief_grid(report)
    cells = [plain(c) for c in grid.rows[1]]
    assert [cells[1], cells[4], cells[5]] == ["—", "—", "—"] and "(" in cells[2] and "(" in cells[3]  # numbers stay
    assert plain(grid.rows[0][4]) == report.roles[0].verdict
    assert "—: the theory makes no prediction for this projection" in (grid.caption or "")
