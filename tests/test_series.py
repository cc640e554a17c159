"""`geodrift drift` and `geodrift compare` on the Hugging Face folders the transformer simulator saves while it trains."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from geodrift.cli.main import main
from geodrift.continuity import MeasureSpec
from geodrift.continuity.series import paired_abs_cos, rotation_drift, subspace_comparison
from geodrift.errors import GeodriftError
from geodrift.io.atomic import document, to_json
from geodrift.linalg import SVDTriplets
from geodrift.lm.hf import hf_step_dir
from geodrift.scanner.series import compare, drift
from geodrift.sim.presets import preset
from geodrift.sim.run import run

TEXT = "\n\n".join(f"The quick brown fox {i} jumps over the lazy dog near the river bank, paragraph {i}." * 4
                   for i in range(120))


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three checkpoints (steps 0, 2, 4) saved by the simulator's own training loop (tiny preset, short)."""
    root = tmp_path_factory.mktemp("sim")
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    spec = preset("transformer", "tiny")[0]
    spec = replace(spec, data=replace(spec.data, corpus=str(corpus)), train=replace(spec.train, steps=4))
    out = root / "runs"
    (result,) = run(spec, [42], out=out, save_hf_every=2, track=False)
    assert result.path is not None
    folders = [hf_step_dir(result.path, step) for step in (0, 2, 4)]
    assert all((f / "model.safetensors").is_file() and (f / "config.json").is_file() for f in folders)
    return folders


def test_the_simulator_saves_loadable_hugging_face_folders_whose_last_one_is_the_final_model(series: list[Path]):
    from safetensors.torch import load_file

    config = json.loads((series[-1] / "config.json").read_text())
    assert config["model_type"] == "llama" and config["geodrift_step"] == 4 and config["num_hidden_layers"] == 3
    first, last = load_file(series[0] / "model.safetensors"), load_file(series[-1] / "model.safetensors")
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(first[name], last[name])  # training moved the weights


def test_drift_reads_each_checkpoint_once_and_measures_rotation_against_the_first(series: list[Path]):
    seen: list[str] = []
    rep = drift([str(p) for p in series], MeasureSpec(k=2, null_draws=12), progress=seen.append)
    assert len(seen) == 3 * 7 * 3  # checkpoints x projections x layers: every matrix read exactly once
    assert len(rep.reports) == 3 and {r.checkpoint for r in rep.rotation} == {1, 2}
    for r in rep.rotation:
        assert 0.0 <= r.angle_deg <= 90.0 and math.isclose(r.angle_deg, math.degrees(math.acos(r.abs_cos)), abs_tol=1e-6)
        assert 0.0 < r.null_mean < 1.0 and r.random_floor == pytest.approx(math.sqrt(2 / (math.pi * r.dim)))
    # A series of one checkpoint repeated does not rotate at all.
    same = drift([str(series[1])] * 2, MeasureSpec(k=1, null_draws=4), ov=False)
    assert max(r.angle_deg for r in same.rotation) < 0.1


def test_compare_gives_zero_angles_for_a_model_with_itself_and_a_null_below_one(series: list[Path]):
    rep = compare(str(series[2]), str(series[2]), MeasureSpec(k=3, null_draws=12), ov=False)
    assert all(r.overlap == pytest.approx(1.0, abs=1e-5) and max(r.principal_angles_deg) < 0.5 for r in rep.subspaces)
    assert all(r.overlap_null_mean < 0.9 and r.overlap_random == pytest.approx(3 / r.dim) for r in rep.subspaces)
    other = compare(str(series[0]), str(series[2]), MeasureSpec(k=3, null_draws=12))
    assert {r.role for r in other.subspaces} >= {"attn_q", "mlp_down", "attn_ov"}
    assert any(r.overlap < 0.99 for r in other.subspaces)


def test_drift_and_compare_commands_write_tables_json_csv_and_figures(series: list[Path], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]):
    paths = [str(p) for p in series]
    with pytest.raises(SystemExit) as done:
        main(["drift", *paths, "--null-draws", "8", "--k", "2", "--quiet", "--json-out", str(tmp_path / "d.json"),
              "--csv", str(tmp_path / "d.csv"), "--plot", str(tmp_path / "d.png")])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "rotation from #0" in out and "3 checkpoints" in out
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["kind"] == "drift_report" and len(doc["reports"]) == 3
    assert (tmp_path / "d.rotation.csv").read_text().startswith("model,role,label,space,dim,layer,checkpoint,abs_cos")
    assert (tmp_path / "d_rotation.png").stat().st_size > 0 and (tmp_path / "d_continuity.png").stat().st_size > 0
    with pytest.raises(SystemExit) as done:
        main(["compare", paths[0], paths[-1], "--null-draws", "8", "--k", "2", "--quiet", "--csv",
              str(tmp_path / "c.csv"), "--plot", str(tmp_path / "c.svg"), "--json-out", str(tmp_path / "c.json")])
    assert done.value.code == 0
    assert "overlap (null · random)" in capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text())["kind"] == "compare_report"
    assert (tmp_path / "c.csv").read_text().splitlines()[0].startswith("a,b,role,label,space,dim,layer,k,principal")
    assert (tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")


def test_bad_series_input_is_a_one_line_error_before_any_work(series: list[Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]):
    for argv in (["drift", str(series[0])], ["drift", str(series[0]), str(series[1]), "--plot", str(tmp_path / "x.bmp")],
                 ["compare", str(series[0]), str(tmp_path / "missing")]):
        with pytest.raises(SystemExit) as done:
            main(argv + ["--quiet"])
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def _triplets(vectors_v: torch.Tensor, vectors_u: torch.Tensor) -> SVDTriplets:
    k = vectors_v.shape[0]
    return SVDTriplets(vectors_u.T.contiguous(), torch.ones(k), vectors_v, float(k), 0.0, "exact")


def test_rotation_and_subspace_math_on_known_vectors():
    # Layer 0's v1 turns by exactly 30 degrees out of span{e0, e1}; v2 = e1 and u1 stay put.
    e = torch.eye(64)
    turned = math.cos(math.radians(30)) * e[0] + math.sin(math.radians(30)) * e[5]
    a = {("attn_q", 0): _triplets(e[:2], e[:2]), ("attn_q", 1): _triplets(e[2:4], e[2:4])}
    b = {("attn_q", 0): _triplets(torch.stack([turned, e[1]]), e[:2]), ("attn_q", 1): _triplets(e[2:4], e[2:4])}
    rows = {(r.space, r.layer): r for r in rotation_drift([a, b], draws=16, seed=0)}
    assert rows[("v", 0)].angle_deg == pytest.approx(30.0, abs=1e-4)
    assert rows[("u", 0)].angle_deg == pytest.approx(0.0, abs=1e-4) and rows[("v", 1)].angle_deg < 1e-3
    sub = {(r.space, r.layer): r for r in subspace_comparison(a, b, k=2, draws=16, seed=0)}
    # span{turned, e1} vs span{e0, e1}: principal angles 0 and 30 degrees.
    assert sub[("v", 0)].principal_angles_deg == pytest.approx([0.0, 30.0], abs=1e-3)
    assert sub[("v", 0)].overlap == pytest.approx((1 + math.cos(math.radians(30)) ** 2) / 2, abs=1e-6)
    from geodrift.continuity import PermutationBank

    observed, samples = paired_abs_cos(e[:3].unsqueeze(1), e[:3].unsqueeze(1), 50,
                                       PermutationBank(torch.Generator().manual_seed(1)))
    assert observed.flatten().tolist() == [1.0, 1.0, 1.0] and samples.shape == (50, 3, 1)


def test_drift_and_compare_json_fields_and_csv_columns_are_documented(series: list[Path]):
    from test_output_schema import DOC, _section, fields

    from geodrift.render.files import csv_text

    paths = [str(p) for p in series]
    d = drift(paths[:2], MeasureSpec(k=1, null_draws=4), layers=[0, 1, 2])
    c = compare(paths[0], paths[1], MeasureSpec(k=2, null_draws=4))
    for kind, rep in (("drift_report", d), ("compare_report", c)):
        doc = json.loads(to_json(document(kind, rep.to_dict())))
        text = _section(f"## kind: `{kind}`") + _section("## kind: `continuity_report`") + _section("## Conventions")
        missing = sorted(f for f in fields(doc) if f"`{f}`" not in text)
        assert not missing, (kind, missing)
    csv_doc = _section("## The series and comparison CSVs")
    for rows in (d.continuity_rows(), d.rotation_rows(), c.subspace_rows()):
        header = csv_text(rows).splitlines()[0].split(",")
        assert not [h for h in header if f"`{h}`" not in csv_doc], header
    assert "## kind: `drift_report`" in DOC


@pytest.mark.parametrize("view", [None, "raw"])
def test_every_face_of_drift_and_compare_names_the_view_and_shows_no_aligned_space_as_a_measurement(
        series: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], view: str | None):
    """Terminal, JSON, CSV and figures of both commands, in the default (canonical) view and the raw one: the view
    and gauge fixing named; an aligned space (the canonical view's head/hidden side, continuity across depth) never a
    number, a counted subspace or an unmarked line. Cross-checkpoint numbers are measurements in every space: the
    canonical view aligns every checkpoint to the reference, its head and hidden side too (issue 38)."""
    import csv
    import re

    paths, chosen = [str(p) for p in series], ["--view", view] if view else []
    for command, inputs in (("drift", paths), ("compare", [paths[0], paths[-1]])):
        out_dir = tmp_path / f"{command}-{view}"
        with pytest.raises(SystemExit) as done:
            main([command, *inputs, "--null-draws", "8", "--k", "2", "--quiet", *chosen, "--json-out",
                  str(out_dir / "r.json"), "--csv", str(out_dir / "r.csv"), "--plot", str(out_dir / "f.svg")])
        assert done.value.code == 0
        text = capsys.readouterr().out
        doc = json.loads((out_dir / "r.json").read_text())
        expected = view or "canonical"
        assert doc["view"] == expected and doc["gauge_fixing"]
        flat = " ".join(text.split())
        assert f"({expected} view, gauge: {doc['gauge_fixing']}" in flat  # the title names both
        rows = doc["rotation"] if command == "drift" else doc["subspaces"]
        assert {r["gauge"] for r in rows} == ({"invariant"} if expected == "canonical" else {"varies"})
        continuity = {(r["role"], s): space["gauge"] for rep in doc["reports"] for r in rep["roles"]
                      for s, space in r["spaces"].items()}
        aligned = {key for key, gauge in continuity.items() if gauge == "aligned"}
        assert bool(aligned) == (expected == "canonical")  # the head/hidden side's continuity across depth
        table = [line for line in text.splitlines() if line.startswith("│") and "aligned" in line]
        if command == "compare":  # every subspace compared and counted
            assert not table
            above = sum(r["overlap"] > r["overlap_null_mean"] + 3 * r["overlap_null_std"] for r in rows)
            assert f"{above}/{len(rows)} (projection, space, layer) subspaces" in flat
        else:  # an aligned space's continuity cell reads "aligned", no number beside it; its rotation is a number
            keys = {tuple(c.strip() for c in line.strip("│").split("│")[:2]) for line in table}
            assert len(keys) == len(aligned)
            assert all(not re.search(r"\d\.\d{3}", line) for line in table)
            assert "aligned spaces not counted" not in flat
        with open(out_dir / "r.csv", newline="") as handle:
            csv_rows = list(csv.DictReader(handle))
        assert {r["view"] for r in csv_rows} == {expected} and all(r["gauge"] for r in csv_rows)
        if command == "drift":  # no verdict on an aligned space's row
            assert all(r["verdict"] == "" for r in csv_rows if r["gauge"] == "aligned")
        svgs = [figure.read_text() for figure in sorted(out_dir.glob("f*.svg"))]  # drift: rotation, continuity
        assert len(svgs) == (2 if command == "drift" else 1) and all(f"{expected} view" in svg for svg in svgs)
        # an aligned space's continuity across depth is a grey line named in the legend (drift's continuity figure)
        assert any("aligned by the view, not measured" in svg for svg in svgs) == (bool(aligned) and command == "drift")


def test_geodrift_drift_and_compare_give_the_clis_numbers_with_summary_to_frame_and_plot(series: list[Path],
                                                                                          tmp_path: Path):
    """The Python face on the same weights as the command line: the same report (the JSON's fields, numbers to the
    bit), DataFrames whose rows carry the view, the gauge fixing and each space's gauge, and the --plot figures."""
    import geodrift

    paths = [str(p) for p in series]
    options = ["--null-draws", "8", "--k", "2", "--layers", "0-2", "--quiet"]
    for command, inputs in (("drift", paths), ("compare", [paths[0], paths[-1]])):
        with pytest.raises(SystemExit):
            main([command, *inputs, *options, "--json-out", str(tmp_path / f"{command}.json")])
    cli_drift, cli_compare = (json.loads((tmp_path / f"{c}.json").read_text()) for c in ("drift", "compare"))
    py_drift = geodrift.drift(paths, null_draws=8, k=2, layers="0-2")
    py_compare = geodrift.compare(paths[0], paths[-1], null_draws=8, k=2, layers="0-2")
    for cli, py in ((cli_drift, py_drift), (cli_compare, py_compare)):
        doc = json.loads(to_json(py.to_dict()))  # NaN written as null and listed, as the CLI's
        for drop in ("schema_version", "kind"):
            cli.pop(drop)
        for report in cli["reports"] + doc["reports"]:  # the call and time: the only difference
            report.pop("provenance", None)
        assert doc == cli
    summary = py_drift.summary()
    assert {"angle_deg", "null_angle_deg", "random_angle_deg", "view", "gauge_fixing", "gauge"} <= set(summary)
    assert len(summary) == 2 * len(py_drift.reports[0].roles) and set(summary.view) == {py_drift.view}
    aligned = summary[summary.gauge == "aligned"]
    assert len(aligned) and set(aligned.space) <= {"u", "v"}  # the canonical view's head/hidden side, marked
    assert len(py_drift.to_frame()) == len(py_drift.rotation)
    assert len(py_drift.to_frame(kind="continuity")) == 3 * len(summary)
    assert len(py_compare.to_frame()) == len(py_compare.subspaces)
    assert py_compare.summary().above_null.sum() <= len(py_compare.subspaces)
    rotation = py_drift.plot(tmp_path / "drift.png", dpi=80)
    assert (tmp_path / "drift.png").read_bytes()[:4] == b"\x89PNG"
    assert "canonical view" in rotation._suptitle.get_text()
    assert py_drift.plot(kind="continuity")._suptitle.get_text().startswith("Continuity across depth")
    assert py_compare.plot()._suptitle.get_text().startswith("Top-2 subspaces")
    with pytest.raises(GeodriftError, match=r"^k=2\.5: must be an integer"):
        geodrift.drift(paths, k=2.5)
