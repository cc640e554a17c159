"""geodrift reads back every JSON it writes (issue 39, item 8): one round trip per command.

Each command runs for real on a real file (a random Llama as a Hugging Face folder, the simulator's smoke preset);
``geodrift.read`` gives back the object the command's job returns, and that object written again is the same
document, non-finite numbers included. ``Report.from_dict`` reads ``scan --full --json-out``'s file (it refused
the ``gauge_diagnosis`` key and advised re-creating the file "with this version", the version that wrote it).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

import geodrift
from geodrift.cli.main import main
from geodrift.continuity import Report
from geodrift.errors import GeodriftError
from geodrift.io.atomic import document, to_json

FAST = ["--k", "2", "--null-draws", "4", "--quiet"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("read_back")
    from _fuzz_commands import _small_tokenizer

    made = []
    for seed in (1, 2):
        folder = write_hf_folder(root / f"llama{seed}", {k: 0.3 * v for k, v in llama_state(
            3, 32, 4, 2, 48, vocab=512, seed=seed).items()}, hf_config(n_layers=3, vocab=512), dtype=torch.float32)
        _small_tokenizer().save(str(folder / "tokenizer.json"))
        made.append(folder)
    return made[0], made[1]


def _run(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as done:
        main(list(argv))
    assert done.value.code in (0, None), err.getvalue()
    return out.getvalue()


def _same_document(path_or_text: Path | str, obj: Any) -> None:
    text = path_or_text.read_text() if isinstance(path_or_text, Path) else path_or_text
    written = json.loads(text)
    again = json.loads(to_json(document(written["kind"], obj.to_dict())))
    assert again == written


@pytest.mark.parametrize("extra", [[], ["--full"], ["--view", "raw", "--layers", "0-1"]])
def test_scan_json_reads_back_whole(models: tuple[Path, Path], tmp_path: Path, extra: list[str]) -> None:
    target = tmp_path / "scan.json"
    _run("scan", str(models[0]), *FAST, *extra, "--json-out", str(target))
    result = geodrift.read(target)
    assert isinstance(result.report, geodrift.ScanReport) and (result.gauge is not None) == ("--full" in extra)
    _same_document(target, result)
    report = Report.from_dict(json.loads(target.read_text()))  # the defect: --full's gauge_diagnosis was refused
    assert to_json(report.to_dict()) == to_json(result.report.to_dict())


def test_report_from_dict_reads_scan_full_json_out(models: tuple[Path, Path], tmp_path: Path) -> None:
    # The defect alone: "not a geodrift continuity report ('gauge_diagnosis'); re-create it with this version".
    target = tmp_path / "scan.json"
    _run("scan", str(models[0]), *FAST, "--full", "--json-out", str(target))
    doc = json.loads(target.read_text())
    assert "gauge_diagnosis" in doc
    assert Report.from_dict(doc).k == 2


def test_a_report_holding_non_finite_numbers_reads_back_with_them(tmp_path: Path) -> None:
    state = llama_state(3, 32, 4, 2, 48)
    for i in range(3):
        state[f"model.layers.{i}.self_attn.v_proj.weight"] = torch.zeros(16, 32)  # undefined: NaN numbers
    folder = write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3), dtype=torch.float32)
    target = tmp_path / "scan.json"
    _run("scan", str(folder), *FAST, "--view", "raw", "--json-out", str(target))
    assert "nonfinite" in json.loads(target.read_text())
    result = geodrift.read(target)
    v = result.report.role("attn_v").spaces["v"].vectors[0]
    assert v.mean != v.mean  # NaN again, not None
    _same_document(target, result)


def test_drift_and_compare_json_read_back_whole(models: tuple[Path, Path], tmp_path: Path) -> None:
    for command in ("drift", "compare"):
        target = tmp_path / f"{command}.json"
        _run(command, str(models[0]), str(models[1]), *FAST, "--view", "raw", "--json-out", str(target))
        back = geodrift.read(target)
        assert type(back).__name__ == {"drift": "DriftReport", "compare": "CompareReport"}[command]
        assert all(isinstance(r, Report) for r in back.reports)
        _same_document(target, back)


def test_inspect_and_prove_json_read_back_whole(models: tuple[Path, Path]) -> None:
    text = _run("inspect", str(models[0]), "--json")
    inventory = geodrift.read(json.loads(text))
    assert type(inventory).__name__ == "Inventory" and isinstance(inventory.tensors[0].shape, tuple)
    _same_document(text, inventory)
    text = _run("prove", "equivariance", "--json", "--quiet")
    proofs = geodrift.read(json.loads(text))
    assert type(proofs).__name__ == "ProveReport" and proofs.results[0].name == "equivariance"
    _same_document(text, proofs)


@pytest.mark.parametrize("command", ["prune", "share"])
def test_compress_json_reads_back_whole_with_what_it_saved(models: tuple[Path, Path], tmp_path: Path,
                                                            command: str) -> None:
    options = {"prune": ["--max-remove", "1", "--methods", "geom-v1", "--random-seeds", "2", "--null-draws", "2",
                         "--k", "1"],
               "share": ["--ratios", "0.3", "--methods", "svd-llm", "--select-windows", "0", "--verdict-ratio", "0",
                         "--save-method", "svd-llm"]}[command]
    target = tmp_path / "c.json"
    _run("compress", command, str(models[0]), "--seq-len", "8", "--eval-windows", "1", "--calib-windows", "8",
         "--greedy-windows", "1", "--quiet", *options, "--save", str(tmp_path / "saved"), "--json-out", str(target))
    back = geodrift.read(target)
    assert back.saved is not None and back.saved.folder == str(tmp_path / "saved")
    _same_document(target, back)


def test_simulate_records_and_tables_read_back(tmp_path: Path) -> None:
    text = _run("simulate", "mlp", "--preset", "smoke", "--steps", "2", "--out", str(tmp_path / "runs"), "--json",
                "--quiet")
    table = geodrift.read(json.loads(text))  # kind reproduction: the JSON object, its numbers restored
    assert table["kind"] == "reproduction" and table["runs"]
    for record in (tmp_path / "runs").rglob("run.json"):
        back = geodrift.read(record)
        assert type(back).__name__ == "RunRecord"
        _same_document(record, back)
    for report in (tmp_path / "runs").rglob("report.json"):
        _same_document(report, geodrift.read(report))


@pytest.mark.parametrize(("doc", "said"), [({"roles": []}, "no schema_version and kind"),
                                           ({"schema_version": "9.0", "kind": "continuity_report"}, "9.0"),
                                           ({"schema_version": "1.2", "kind": "drift_report"}, "drift_report")])
def test_what_cannot_be_read_back_says_why(doc: dict[str, Any], said: str) -> None:
    with pytest.raises(GeodriftError) as info:
        geodrift.read(doc) if "roles" in doc else Report.from_dict(doc)
    assert said in str(info.value) and "with this version" not in str(info.value), str(info.value)
