"""Files for pipelines: every JSON field geodrift writes is documented in docs/output-schema.md, the scan's
per-pair CSV is tidy (pandas loads it and groups it back into the summary), and the CSVs' columns are documented."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sim_helpers import smoke_result, smoke_spec, tiny_result
from typer.testing import CliRunner

from geodrift.cli.main import app
from geodrift.io.atomic import SCHEMA_VERSION, document, to_json
from geodrift.sim.reproduce import assemble

DOC = (Path(__file__).resolve().parent.parent / "docs" / "output-schema.md").read_text(encoding="utf-8")
runner = CliRunner()
# Objects whose keys are data (column names, metric names, package names ...), not schema fields.
MAPS = {"config", "summary", "timing", "versions", "methods", "geodrift", "paper_reference", "numeric_metrics",
        "tokenizer", "seconds", "scores", "differences", "wall_s", "extra",
        "sizes", "discrete", "draws", "group", "generators"}  # gauge_groups: sizes by symbol, generators by name


def _section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end > 0 else None]


def fields(value: Any, parent: str = "") -> set[str]:
    """Field names of a JSON document, not descending into data-keyed maps (``MAPS``; ``spaces`` keys v/u)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, child in value.items():
            if parent == "spaces":
                out |= fields(child, key)
                continue
            out.add(key)
            if key == "vectors" and isinstance(child, dict):  # run_record: name -> per-layer vectors
                continue
            if key not in MAPS and key != "series":
                out |= fields(child, key)
    elif isinstance(value, list):
        for child in value:
            out |= fields(child, parent)
    return out


def _documented(doc: dict[str, Any], *sections: str) -> None:
    text = "".join(_section(s) for s in sections) + _section("## Conventions")
    missing = sorted(f for f in fields(doc) if f"`{f}`" not in text)
    assert not missing, f"{doc['kind']}: fields not in docs/output-schema.md: {missing}"
    assert doc["schema_version"] == SCHEMA_VERSION


@pytest.fixture(scope="module")
def scan_doc(tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("scan")
    result = runner.invoke(app, ["scan", "--layers", "0-3", "--k", "2", "--null-draws", "10", "--json-out",
                                 str(out / "scan.json"), "--csv", str(out / "scan.csv"), "--quiet", "--brief"])
    assert result.exit_code == 0, result.output
    return {"json": json.loads((out / "scan.json").read_text()), "csv": out / "scan.csv",
            "pairs": out / "scan.pairs.csv"}


def test_scan_report_fields_are_documented(scan_doc):
    assert scan_doc["json"]["kind"] == "continuity_report"
    _documented(scan_doc["json"], "## kind: `continuity_report`")


def test_reproduction_and_run_record_fields_are_documented():
    rep = assemble("mlp", "smoke", [smoke_spec(0), smoke_spec(1)], [smoke_result(0), smoke_result(1)], [42])
    doc = json.loads(to_json(document("reproduction", rep.to_dict())))
    assert doc["nonfinite"]["count"] > 0  # one seed: every std is NaN, written as null with the note
    _documented(doc, "## kind: `reproduction`", "## kind: `continuity_report`")  # runs[].report is one
    record = json.loads(to_json(document("run_record", tiny_result().record.to_dict())))
    _documented(record, "## kind: `run_record`")
    for metric in {row[4] for row in record["series"]["rows"]} | {row[4] for row in smoke_result(0).record.rows}:
        assert f"`{metric}`" in _section("## kind: `run_record`"), metric


def test_proofs_and_inventory_fields_are_documented():
    result = runner.invoke(app, ["prove", "equivariance", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    _documented(json.loads(result.stdout), "## kind: `proofs`")
    result = runner.invoke(app, ["inspect", "--json"])
    assert result.exit_code == 0, result.output
    _documented(json.loads(result.stdout), "## kind: `inventory`")


def test_the_pairs_csv_is_tidy_and_groups_back_into_the_summary(scan_doc):
    pairs = pd.read_csv(scan_doc["pairs"])
    summary = pd.read_csv(scan_doc["csv"])
    keys = ["model", "view", "projection", "space", "k", "layer", "next_layer"]
    assert not pairs.duplicated(keys).any()  # one row per observation
    assert len(pairs) == 8 * 2 * 2 * 3  # 8 projections (OV included) x 2 spaces x k = 1..2 x 3 pairs of layers 0-3
    assert pairs[["abs_cos", "null_mean", "null_std", "z", "random_floor"]].notna().all().all()
    assert ((pairs["next_layer"] - pairs["layer"]) == 1).all() and pairs["abs_cos"].between(0, 1).all()
    means = pairs.groupby(["role", "space", "k"])["abs_cos"].mean()
    for _, row in summary.iterrows():
        assert means[(row["role"], row["space"], row["k"])] == pytest.approx(row["mean"], abs=1e-6)
    z = (pairs["abs_cos"] - pairs["null_mean"]) / pairs["null_std"]
    assert z.to_numpy() == pytest.approx(pairs["z"].to_numpy(), rel=1e-6)


def test_every_csv_column_is_documented(scan_doc):
    text = _section("## The scan CSVs")
    for path in (scan_doc["csv"], scan_doc["pairs"]):
        header = path.read_text().splitlines()[0].split(",")
        missing = [c for c in header if f"`{c}`" not in text]
        assert not missing, (path.name, missing)


def test_the_schema_page_names_every_kind_geodrift_writes():
    import geodrift

    root = Path(geodrift.__file__).resolve().parent.parent
    kinds = set()
    for source in [*root.joinpath("geodrift").rglob("*.py"), *root.joinpath("cli").rglob("*.py")]:
        kinds |= set(re.findall(r'document\("(\w+)"', source.read_text(encoding="utf-8")))
        kinds |= set(re.findall(r'\("(\w+)", \{"tokenizer"', source.read_text(encoding="utf-8")))
    assert kinds >= {"continuity_report", "reproduction", "run_record", "proofs", "inventory", "tokenizer"}
    for kind in kinds:
        assert f"## kind: `{kind}`" in DOC, kind


def test_a_scan_of_extreme_weights_writes_strict_finite_json(tmp_path: Path):
    # Weights near float32's limit would overflow the squares (Gram matrices, sigma^2, ||W||_F^2) in
    # float32: geodrift decomposes them rescaled / in float64, so the JSON is strict and every number of
    # the report is finite, and the OV composite does not crash the scan.
    import torch
    from _checkpoints import hf_config, llama_state, write_hf_folder

    state = {k: v * (3e37 if "proj" in k else 1.0) for k, v in llama_state(n_layers=3).items()}
    folder = write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3), dtype=torch.float32)
    result = runner.invoke(app, ["scan", str(folder), "--k", "2", "--null-draws", "10", "--json", "--quiet"])
    assert result.exit_code == 0, result.output

    def refuse(constant: str):
        raise ValueError(constant)

    doc = json.loads(result.stdout, parse_constant=refuse)
    assert "nonfinite" not in doc
    for role in doc["roles"]:
        for space in role["spaces"].values():
            assert 0.0 <= space["sigma2_wa"] <= 1.0 and 0.0 <= space["vectors"][0]["mean"] <= 1.0
    assert [r["label"] for r in doc["roles"]][-1] == "OV"
