"""`geodrift reproduce --smoke`: the whole pipeline (proofs, scan, sweep of two presets, compression) into one report."""

from __future__ import annotations

import json
import re

import pytest

from geodrift.cli.main import main
from geodrift.reproduction import plan


def test_reproduce_writes_one_self_contained_report_with_every_claim(tmp_path, capsys):
    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "--smoke", "--out", str(out), "--workers", "2", "--quiet"])
    assert exit_info.value.code == 0
    summary = capsys.readouterr().out
    assert re.search(r"geodrift reproduce \(smoke\): \d+/\d+ simulator claims hold, \d+/[1-9]\d* compression claims",
                     summary)
    md = (out / "report.md").read_text()
    # provenance
    assert re.search(r"git revision: `[0-9a-f]{40}`", md) and "torch 2." in md
    # every section, its command, and its figures (files that exist)
    for key in ("proofs", "scan", "mlp-smoke", "transformer-tiny", "compress-prune", "compress-share"):
        assert f'<a id="{key}"></a>' in md
    assert "Command: `geodrift simulate mlp --preset smoke --seeds 42" in md
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (out / link).is_file(), link
    assert any(p.name.startswith("mlp-smoke_continuity") for p in (out / "figures").iterdir())
    assert "Command: `geodrift compress prune --max-remove 2 --methods geom-v1,block-influence" in md
    assert (out / "figures" / "compress-prune.png").is_file()
    # claims: verdict and criterion per row; the scan's rows carry nulls; pruning is judged against random
    # orders; what smoke mode leaves out (sharing) is marked, with no number
    rows = [line for line in md.splitlines() if line.startswith("| [")]
    assert any("[scan]" in r and "null" in r and ("**holds**" in r or "**fails**" in r) for r in rows)
    assert any("[transformer-tiny]" in r and "permutation null" in r for r in rows)
    assert any("[compress-prune]" in r and "beats random removal" in r and "rank test" in r
               and re.search(r"\*\*(holds|fails|tie|n/a)\*\*", r) for r in rows)
    assert any("[compress-share]" in r and "**not run**" in r and "not run in smoke mode" in r for r in rows)
    data = json.loads((out / "report.json").read_text())
    assert data["kind"] == "paper_reproduction" and data["mode"] == "smoke"
    assert {s["key"] for s in data["sections"]} >= {"proofs", "scan", "mlp-smoke", "transformer-tiny"}
    from test_output_schema import _documented

    _documented(data, "## kind: `paper_reproduction`", "## kind: `reproduction`", "## kind: `continuity_report`",
                "## kind: `proofs`", "## kind: `compress_prune`")
    # the records are where a sweep writes them; a second run without --resume/--force is refused
    assert (out / "runs" / "mlp-smoke" / "Res+ReLU" / "seed42" / "run.json").is_file()
    with pytest.raises(SystemExit) as again:
        main(["reproduce", "--smoke", "--out", str(out), "--quiet"])
    assert again.value.code == 2 and "--resume" in capsys.readouterr().err


def test_the_quick_plan_covers_the_papers_grids_and_the_full_plan_adds_the_long_runs():
    quick = {s.preset for s in plan("quick")}
    assert {"table1", "table3", "drift", "ema", "appf", "cpu"} <= quick
    full = {s.key for s in plan("full")}
    assert {"datasize", "mid-silu", "mid-none", "table1-9380"} <= full
    assert all(len(s.seeds) == 1 for s in plan("quick"))


def test_each_compression_section_names_the_command_that_reproduces_it():
    from geodrift.reproduction import compress_plan

    full, quick = compress_plan("full"), compress_plan("quick")
    assert full.command("prune") == "geodrift compress prune" and full.command("share") == "geodrift compress share"
    assert quick.command("prune") == ("geodrift compress prune --max-remove 4 --methods "
                                      "geom-v1,geom-s2wa,block-influence,angular --eval-windows 4")
    assert quick.command("share") == ("geodrift compress share --ratios 0.2 --methods svd-llm,basis-sharing,theory,"
                                      "geodrift,geodrift:random-groups --verdict-ratio 0 --calib-windows 12 "
                                      "--eval-windows 8")
    assert compress_plan("smoke").share is None


def test_the_gate_ablation_is_judged_on_the_section_without_the_activation():
    from test_sim_transformer import _with_gate

    from geodrift.reproduction import Section, _judge_gate_drop

    sections = [Section("mid-silu", "", "sim", "", _with_gate([(0.66, 0.05), (0.64, 0.05)], "mid")),
                Section("mid-none", "", "sim", "", _with_gate([(0.36, 0.05), (0.38, 0.05)], "mid+none"))]
    before = [len(s.result.verdicts) for s in sections]  # type: ignore[union-attr]
    _judge_gate_drop(sections)
    assert [len(s.result.verdicts) for s in sections] == [before[0], before[1] + 1]  # type: ignore[union-attr]
    assert sections[1].result.verdicts[-1].verdict == "holds"  # type: ignore[union-attr]
