"""No silent loss: a run into a non-empty --out refuses unless --resume or --force; --force clears only
geodrift's own outputs (plots included) and refuses, deleting nothing, when anything else is there."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_helpers import smoke_result

from geodrift.atomic import document, write_json
from geodrift.cli.main import main
from geodrift.errors import GeodriftError
from geodrift.sim.outdir import prepare_out
from geodrift.sim.record import write_record


def _old_run(out: Path) -> list[Path]:
    # What an earlier run left: its record and report (real files), a checkpoint, a figure, a cached scan.
    result = smoke_result(0)
    record = write_record(out, result.record)
    report = record.parent / "report.json"
    write_json(report, document("continuity_report", result.report.to_dict()))
    ckpt = out / "Res+None" / "seed42" / "checkpoint.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"state")
    plot = out / "plots" / "smoke_continuity.png"
    plot.parent.mkdir()
    plot.write_bytes(b"png")
    cache = out / "smollm2-135m_scan_k8_n100_s0.json"
    cache.write_text("{}")
    return [record, report, ckpt, plot, cache]


def test_an_empty_or_missing_out_is_fine(tmp_path: Path):
    assert prepare_out(tmp_path / "new", resume=False, reload=False, force=False) == []
    (tmp_path / "empty").mkdir()
    assert prepare_out(tmp_path / "empty", resume=False, reload=False, force=False) == []


def test_a_non_empty_out_without_resume_or_force_is_refused_naming_both(tmp_path: Path):
    files = _old_run(tmp_path)
    with pytest.raises(GeodriftError) as info:
        prepare_out(tmp_path, resume=False, reload=False, force=False)
    message = str(info.value)
    assert "--resume" in message and "--force" in message and str(tmp_path) in message and "\n" not in message
    assert all(f.exists() for f in files)
    assert prepare_out(tmp_path, resume=True, reload=False, force=False) == []  # resume keeps everything
    assert all(f.exists() for f in files)


def test_only_a_cached_reference_scan_does_not_count_as_results(tmp_path: Path):
    (tmp_path / "smollm2-135m_scan_k8_n100_s0.json").write_text("{}")
    assert prepare_out(tmp_path, resume=False, reload=False, force=False) == []


def test_force_clears_old_outputs_plots_included(tmp_path: Path):
    files = _old_run(tmp_path / "out")
    separate = tmp_path / "figs"
    separate.mkdir()
    (separate / "smoke_rotation.pdf").write_bytes(b"%PDF")
    (separate / "notes.txt").write_text("mine")
    removed = prepare_out(tmp_path / "out", resume=False, reload=False, force=True, plot=separate)
    assert set(removed) == set(files) | {separate / "smoke_rotation.pdf"}
    assert not any((tmp_path / "out").iterdir())  # emptied folders removed too
    assert (separate / "notes.txt").read_text() == "mine"  # not a geodrift figure: kept


def test_force_refuses_and_deletes_nothing_when_the_folder_holds_foreign_files(tmp_path: Path):
    files = _old_run(tmp_path)
    (tmp_path / "thesis.tex").write_text("precious")
    with pytest.raises(GeodriftError, match="thesis.tex"):
        prepare_out(tmp_path, resume=False, reload=False, force=True)
    assert all(f.exists() for f in files) and (tmp_path / "thesis.tex").exists()


def test_force_with_resume_is_contradictory(tmp_path: Path):
    with pytest.raises(GeodriftError, match="--force"):
        prepare_out(tmp_path, resume=True, reload=False, force=True)


def test_the_cli_refuses_a_non_empty_out_in_one_line_before_training(tmp_path: Path, capsys):
    files = _old_run(tmp_path)
    before = {f: f.stat().st_mtime_ns for f in files}
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "mlp", "--preset", "smoke", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resume" in err[0] and "--force" in err[0]
    assert {f: f.stat().st_mtime_ns for f in files} == before
