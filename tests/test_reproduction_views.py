"""The reproduction's views section: the eight predictions on the embedded SmolLM2 in the raw, folded and
canonical views, each with its null, both verdicts and its gauge status, beside the paper's values."""

from __future__ import annotations

import json
import re

import pytest

from geodrift.continuity import MeasureSpec
from geodrift.io.provenance import stamp
from geodrift.render.paper_report import write_report
from geodrift.reproduction import PaperReproduction, Section
from geodrift.scanner.views import PREDICTIONS, compare_views
from geodrift.sim.reference import PAPER_TABLE2

LAYERS = [0, 1, 2, 3]


@pytest.fixture(scope="module")
def views():
    return compare_views(None, MeasureSpec(k=2, null_draws=8, seed=0), layers=LAYERS,
                         reference=PAPER_TABLE2["Llama-3.1-8B"], reference_name="paper, Llama-3.1-8B")


def test_every_prediction_has_its_number_null_verdicts_and_gauge_status_in_each_view(views):
    assert views.views == ("raw", "folded", "canonical") and views.layers == LAYERS
    assert [(r.role, r.space) for r in views.rows] == list(PREDICTIONS)
    by_role = {r.role: r for r in views.rows}
    # the reference column is the paper's, shown only; OV has no adjacent-|cos| value in the paper
    assert by_role["attn_q"].reference == PAPER_TABLE2["Llama-3.1-8B"]["attn_q"] and by_role["attn_ov"].reference is None
    assert by_role["attn_v"].predicted is None and by_role["attn_o"].predicted == "u"
    for row in views.rows:
        for view, cell in row.cells.items():
            assert 0.0 <= cell.mean <= 1.0 and cell.null_std > 0 and cell.verdict and cell.path_verdict
            # the canonical view's residual-side numbers are gauge-invariant; the others are moved by named gauges
            assert (cell.gauge == "invariant") == (view == "canonical"), (row.label, view, cell.gauge)
            assert (cell.moved_by == []) == (view == "canonical")
    q = by_role["attn_q"].cells
    assert q["raw"].moved_by == ["fold", "rotate", "qk_rope"] and q["folded"].moved_by == ["rotate", "qk_rope"]
    # folding the gains moves Q v1 (the gains scale its input coordinates); Gate has no gauge of its own, so
    # only the residual basis (null, z) separates folded and canonical, never the mean
    assert q["raw"].mean != pytest.approx(q["folded"].mean, abs=1e-4)
    gate = by_role["mlp_gate"].cells
    assert gate["folded"].mean == pytest.approx(gate["canonical"].mean, abs=1e-5)
    assert gate["folded"].null_mean != pytest.approx(gate["canonical"].null_mean, abs=1e-9)


def test_the_report_shows_the_views_table_and_the_canonical_verdicts_as_claims(views, tmp_path):
    section = Section("views", "The eight predictions in the raw, folded and canonical views", "views",
                      "geodrift scan --view raw && geodrift scan --view folded && geodrift scan --view canonical",
                      views, seconds=1.0)
    write_report(PaperReproduction("smoke", [section], 1.0, stamp("geodrift reproduce --smoke")), tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "| Proj | number | paper, Llama-3.1-8B | raw | folded | canonical |" in md
    table = [line for line in md.splitlines() if re.match(r"\| (Q|K|V|O|Gate|Up|Down|OV) \|", line)]
    assert len(table) == 8
    q_row = next(line for line in table if line.startswith("| Q |"))
    assert "| v1 | 0.82 |" in q_row and "varies (fold, rotate, qk_rope)" in q_row and "; invariant |" in q_row
    assert re.search(r"\d\.\d{3} \(null \d\.\d{3} ± \d\.\d{3}, z -?[\d.]+\); frame \w+, path [\w /]+;", q_row)
    assert next(line for line in table if line.startswith("| OV |")).split(" | ")[2] == "—"
    assert "(predicted: neither)" in next(line for line in table if line.startswith("| V |"))
    assert "The canonical verdicts are the gauge-invariant ones; the raw view is the paper's metric" in md
    claims = [line for line in md.splitlines() if line.startswith("| [views]")]
    assert len(claims) == 16 and all("canonical view (gauge-invariant)" in c for c in claims)
    data = json.loads((tmp_path / "report.json").read_text())
    result = data["sections"][0]["result"]
    assert result["views"] == ["raw", "folded", "canonical"] and len(result["rows"]) == 8
    assert result["rows"][0]["cells"]["canonical"]["gauge"] == "invariant"
    from test_output_schema import _documented

    _documented(data, "## kind: `paper_reproduction`", "## kind: `scan_views`")
