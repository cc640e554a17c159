"""No silent loss (geodrift.io.outdir): only files geodrift wrote - listed in the folder's manifest, unchanged since -
are ever replaced or deleted; a folder holding anything else is refused, --force or not; never the input; a
whole-folder save is all or nothing. Real files written by geodrift's real writers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sim_helpers import smoke_result

from geodrift.cli.main import main
from geodrift.errors import GeodriftError
from geodrift.io.atomic import document, write_json, write_text, write_with
from geodrift.io.outdir import (
    MANIFEST,
    check_not_input,
    foreign_files,
    manage,
    prepare_out,
    replace_folder,
)
from geodrift.sim.record import save_checkpoint, write_record


def _old_run(out: Path) -> list[Path]:
    # What an earlier run left, each written by geodrift's writers into a folder it manages: its record and
    # report, a checkpoint, a figure, a cached reference scan.
    manage(out)
    result = smoke_result(0)
    record = write_record(out, result.record)
    report = record.parent / "report.json"
    write_json(report, document("continuity_report", result.report.to_dict()))
    ckpt = out / "Res+None" / "seed42" / "checkpoint.pt"
    save_checkpoint(ckpt, {"w": torch.zeros(2)})
    plot = out / "plots" / "smoke_continuity.png"
    write_with(plot, lambda tmp: tmp.write_bytes(b"png"))
    cache = out / "smollm2-135m_scan_k8_n100_s0.json"
    write_json(cache, {})
    return [record, report, ckpt, plot, cache]


def test_an_empty_or_missing_out_is_fine_and_gets_a_manifest(tmp_path: Path):
    assert prepare_out(tmp_path / "new", resume=False, reload=False, force=False) == []
    assert (tmp_path / "new" / MANIFEST).is_file()
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
    manage(tmp_path)
    write_json(tmp_path / "smollm2-135m_scan_k8_n100_s0.json", {})
    assert prepare_out(tmp_path, resume=False, reload=False, force=False) == []


def test_force_clears_old_outputs_plots_included_and_keeps_the_users_files(tmp_path: Path):
    files = _old_run(tmp_path / "out")
    figs = manage(tmp_path / "figs")
    write_with(figs / "smoke_rotation.pdf", lambda tmp: tmp.write_bytes(b"%PDF"))
    (figs / "notes.txt").write_text("mine")
    removed = prepare_out(tmp_path / "out", resume=False, reload=False, force=True, plot=figs)
    assert set(removed) == set(files) | {figs / "smoke_rotation.pdf"}
    assert [p.name for p in (tmp_path / "out").iterdir()] == [MANIFEST]  # emptied folders removed too
    assert (figs / "notes.txt").read_text() == "mine"  # not a figure name: kept, and no reason to refuse


def test_force_refuses_and_deletes_nothing_when_the_folder_holds_foreign_files(tmp_path: Path):
    files = _old_run(tmp_path)
    (tmp_path / "thesis.tex").write_text("precious")
    for force in (True, False):
        with pytest.raises(GeodriftError, match="thesis.tex"):
            prepare_out(tmp_path, resume=not force, reload=False, force=force)
    assert all(f.exists() for f in files) and (tmp_path / "thesis.tex").read_text() == "precious"


def test_a_users_figure_with_a_figure_name_is_never_deleted_or_overwritten(tmp_path: Path):
    # The bug of issue 23: `simulate --plot FIGS --force` deleted the user's own my_continuity.png and .pdf.
    figs = tmp_path / "figs"
    figs.mkdir()
    mine = [figs / "my_continuity.png", figs / "paper_rotation.pdf"]
    for path in mine:
        path.write_bytes(b"user's figure")
    with pytest.raises(GeodriftError, match="my_continuity.png"):
        prepare_out(tmp_path / "out", resume=False, reload=False, force=True, plot=figs)
    assert all(p.read_bytes() == b"user's figure" for p in mine)
    assert not (tmp_path / "out").exists()  # checked before anything was created


def test_a_file_geodrift_wrote_and_the_user_edited_is_the_users(tmp_path: Path):
    files = _old_run(tmp_path)
    files[1].write_text(files[1].read_text() + " ")  # the report, edited by hand
    assert foreign_files(tmp_path) == [files[1]]
    with pytest.raises(GeodriftError, match="report.json"):
        prepare_out(tmp_path, resume=False, reload=False, force=True)
    assert all(f.exists() for f in files)


def test_a_copied_folder_keeps_its_files_by_content(tmp_path: Path):
    _old_run(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # new mtimes, same bytes
    os.utime(tmp_path / "b" / "smollm2-135m_scan_k8_n100_s0.json", ns=(1, 1))
    assert foreign_files(tmp_path / "b") == []
    assert len(prepare_out(tmp_path / "b", resume=False, reload=False, force=True)) == 5


def test_links_and_folders_without_a_manifest_are_foreign(tmp_path: Path):
    legacy = tmp_path / "legacy"  # results of a geodrift that kept no manifest: not provably geodrift's
    legacy.mkdir()
    (legacy / "run.json").write_text("{}")
    with pytest.raises(GeodriftError, match="run.json"):
        prepare_out(legacy, resume=False, reload=False, force=True)
    out = manage(tmp_path / "out")
    (tmp_path / "elsewhere").mkdir()
    (out / "link").symlink_to(tmp_path / "elsewhere")
    assert foreign_files(out) == [out / "link"]
    with pytest.raises(GeodriftError, match="link"):
        prepare_out(out, resume=False, reload=False, force=True)
    assert (tmp_path / "elsewhere").is_dir()


def test_force_with_resume_is_contradictory(tmp_path: Path):
    with pytest.raises(GeodriftError, match="--force"):
        prepare_out(tmp_path, resume=True, reload=False, force=True)


@pytest.mark.parametrize(("relation", "needle"), [("same", "is the input"), ("parent", "holds the input"),
                                                  ("inside", "lies inside the input folder")])
def test_the_input_or_a_folder_holding_it_is_refused_even_with_force(tmp_path: Path, relation: str, needle: str):
    model = tmp_path / "models" / "llama"
    model.mkdir(parents=True)
    target = {"same": model, "parent": tmp_path / "models", "inside": model / "pruned"}[relation]
    with pytest.raises(GeodriftError, match=needle):
        check_not_input(target, [model], "--save")
    with pytest.raises(GeodriftError, match=needle):
        replace_folder(target, lambda d: None, force=True, inputs=[model])
    (tmp_path / "link").symlink_to(model)  # the same folder under another name
    with pytest.raises(GeodriftError, match="is the input"):
        check_not_input(tmp_path / "link", [model], "--save")
    check_not_input(tmp_path / "models" / "llama-pruned", [model], "--save")  # a sibling is fine
    check_not_input(tmp_path / "out", [model / "model.gguf"], "--save")


def _save(folder: Path, payload: str) -> None:
    write_json(folder / "config.json", {"payload": payload})
    write_text(folder / "model.safetensors", payload)


def test_replace_folder_writes_whole_folders_and_replaces_only_its_own(tmp_path: Path):
    target = tmp_path / "saved"
    replace_folder(target, lambda d: _save(d, "one"), force=False)
    assert (target / "model.safetensors").read_text() == "one" and foreign_files(target) == []
    with pytest.raises(GeodriftError, match="--force"):
        replace_folder(target, lambda d: _save(d, "two"), force=False)
    replace_folder(target, lambda d: _save(d, "two"), force=True)
    assert (target / "model.safetensors").read_text() == "two"
    (target / "README.md").write_text("my notes")
    with pytest.raises(GeodriftError, match="README.md"):
        replace_folder(target, lambda d: _save(d, "three"), force=True)
    assert (target / "model.safetensors").read_text() == "two" and (target / "README.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]  # no temporary sibling left


def test_a_save_that_fails_midway_leaves_the_old_folder_and_names_the_users_path(tmp_path: Path):
    target = tmp_path / "saved"
    replace_folder(target, lambda d: _save(d, "old"), force=False)
    before = {p.name: p.read_bytes() for p in target.iterdir()}

    def half_then_fail(folder: Path) -> None:
        write_text(folder / "model.safetensors", "new")
        write_with(folder / "config.json", lambda tmp: (_ for _ in ()).throw(OSError(28, "No space left on device")))

    with pytest.raises(GeodriftError) as info:
        replace_folder(target, half_then_fail, force=True)
    assert "No space left on device" in str(info.value) and str(target) in str(info.value)
    assert ".tmp" not in str(info.value)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]


def test_files_written_by_other_processes_are_recorded(tmp_path: Path):
    # The sweep's workers write into --out from their own processes: each records into the folder's manifest.
    out = manage(tmp_path / "out")
    code = ("import sys\nfrom geodrift.io.atomic import write_text\n"
            "write_text(sys.argv[1], sys.argv[2])\n")
    for i in range(3):
        subprocess.run([sys.executable, "-c", code, str(out / f"run{i}" / "run.json"), str(i)], check=True)
    assert foreign_files(out) == []
    assert len(prepare_out(out, resume=False, reload=False, force=True)) == 3


def test_the_cli_refuses_a_non_empty_out_in_one_line_before_training(tmp_path: Path, capsys):
    files = _old_run(tmp_path)
    before = {f: f.stat().st_mtime_ns for f in files}
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "mlp", "--preset", "smoke", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resume" in err[0] and "--force" in err[0]
    assert {f: f.stat().st_mtime_ns for f in files} == before


def test_a_manifest_of_an_earlier_geodrift_stays_one_after_a_run_lists_its_token(tmp_path: Path):
    # docs/results/ held a manifest of file entries only; a newer run appended its token and then refused the folder
    # ("a file named like geodrift's manifest is there and is not one") after its --force had removed the old set
    import json

    from geodrift.io import manifest

    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "report.md").write_text("old")
    entry = {"path": "report.md", "size": 3, "mtime_ns": 1, "sha256": "0" * 64}
    (folder / manifest.MANIFEST).write_text(json.dumps(entry) + "\n")
    assert manifest.is_manifest(folder / manifest.MANIFEST)
    manifest.list_token(folder)
    assert manifest.is_manifest(folder / manifest.MANIFEST)
    assert manifest.create(folder) == folder
    (folder / "user.txt").write_text(json.dumps({"token": "abc"}) + "\n")  # token lines alone: not a manifest
    assert not manifest.is_manifest(folder / "user.txt")
