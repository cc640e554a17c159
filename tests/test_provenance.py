"""The stamp every generated results file carries, and the rule that geodrift writes only over its own results files."""

from __future__ import annotations

import json
import subprocess

import pytest

from geodrift.errors import GeodriftError
from geodrift.io.atomic import to_json
from geodrift.io.provenance import (
    MARKER,
    STAMP_MARKER,
    check_results_path,
    git_dirty,
    git_revision,
    load_average,
    stamp,
    stamp_markdown,
    write_results,
)


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_git_state_names_the_commit_and_sees_changes_but_not_ignored_files(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("runs/\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert git_revision(tmp_path) == head and git_dirty(tmp_path) is False
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run.json").write_text("{}")  # ignored output: still clean
    (tmp_path / "RESULTS_x.md").write_text("# results\n")  # results and docs are not code: still clean
    (tmp_path / "docs" / "results" / "figures").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "figures" / "scan.png").write_bytes(b"png")
    assert git_dirty(tmp_path) is False
    (tmp_path / "b.py").write_text("y = 2\n")  # a new source file: dirty
    assert git_dirty(tmp_path) is True
    (tmp_path / "b.py").unlink()
    (tmp_path / "a.py").write_text("x = 2\n")  # a changed file: dirty
    assert git_dirty(tmp_path) is True


def test_outside_a_checkout_the_state_is_unknown_not_made_up(tmp_path):
    assert git_revision(tmp_path) is None and git_dirty(tmp_path) is None
    text = stamp_markdown(stamp("x", git=(None, None)))
    assert "| git commit | `not a git checkout` (unknown) |" in text


def test_a_stamp_holds_every_field_and_is_strict_json():
    before = load_average()
    s = stamp("python benchmarks/bench_x.py --runs 8", load_before=before, wall_s={"total": 3.0, "a": 1.0},
              extra={"workers": "2"})
    doc = json.loads(to_json(s))
    assert doc["command"] == "python benchmarks/bench_x.py --runs 8" and doc["load_before"] == list(before)
    assert len(doc["load_after"]) == 3 and doc["threads"]["cpus"] >= 1
    assert {"python", "torch", "numpy", "scipy", "sympy", "gguf"} <= set(doc["versions"])
    assert list(doc["wall_s"]) == ["total", "a"] and doc["cpu"]["model"]
    text = stamp_markdown(s)
    assert text.splitlines()[0] == STAMP_MARKER
    assert "| wall time | total 3.0 s; a 1.0 s |" in text and "| workers | 2 |" in text


def test_text_from_the_command_is_printed_literally_and_cannot_break_the_table():
    text = stamp_markdown(stamp("geodrift scan a|b [red]x[/red]"))
    assert "| command | `geodrift scan a\\|b [red]x[/red]` |" in text


def test_results_files_are_rewritten_only_when_geodrift_wrote_them(tmp_path):
    target = tmp_path / "RESULTS_x.md"
    write_results(target, "X", "| n | 1 |", stamp("python bench_x.py"))
    first = target.read_text()
    assert first.startswith(MARKER) and STAMP_MARKER in first and first.rstrip().endswith("| n | 1 |")
    write_results(target, "X", "| n | 2 |", stamp("python bench_x.py"))
    assert target.read_text().rstrip().endswith("| n | 2 |")
    mine = tmp_path / "notes.md"
    mine.write_text("# my notes\n")
    with pytest.raises(GeodriftError, match=r"notes.md: not written by geodrift"):
        write_results(mine, "X", "body", stamp("python bench_x.py"))
    assert mine.read_text() == "# my notes\n"
    with pytest.raises(GeodriftError, match="is a folder"):
        check_results_path(tmp_path)
