"""Figures for papers: format by suffix, --dpi, one-column size, labelled axes, colorbars, noise floors.

Each figure is built from real results (the embedded model's scan, the MLP smoke runs, the tiny
transformer, the prove report) and inspected as a matplotlib figure just before it is saved, and as
the file written (PNG/PDF/SVG magic; SVG keeps its text, so labels can be read back).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sim_helpers import smoke_result, smoke_spec, tiny_result, tiny_spec
from typer.testing import CliRunner

from geodrift.cli.main import app
from geodrift.continuity import MeasureSpec, Report
from geodrift.errors import GeodriftError
from geodrift.prove import run_claims
from geodrift.render import figures
from geodrift.render.figures import COLUMN_WIDTH_IN, RANDOM_LABEL, null_label
from geodrift.render.proofs import write_proofs_plot
from geodrift.render.scan_plot import write_plot
from geodrift.render.sim_plots import write_plots
from geodrift.scanner.scan import load_weights, scan
from geodrift.sim.reproduce import assemble

MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF", "svg": b"<?xml"}
runner = CliRunner()


@pytest.fixture(scope="module")
def report() -> Report:
    ws, heads = load_weights(None, layers=list(range(6)))
    return scan(ws, MeasureSpec(k=2, null_draws=10), heads=heads)


@pytest.fixture
def saved(monkeypatch) -> list[Any]:
    """Every figure passed to save_figure, kept open for inspection (the file is still written)."""
    figs: list[Any] = []
    real = figures.save_figure

    def keep(fig: Any, path: Any, dpi: int = 300) -> Path:
        import matplotlib.pyplot as plt

        figs.append(fig)
        monkeypatch.setattr(plt, "close", lambda *a: None)  # keep it open for the checks
        return real(fig, path, dpi)

    for module in ("geodrift.render.figures", "geodrift.render.scan_plot", "geodrift.render.sim_plots"):
        monkeypatch.setattr(f"{module}.save_figure", keep)
    return figs


def _texts(fig: Any) -> str:
    return " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_fontsize")))


def _assert_paper_ready(fig: Any, similarity: bool) -> None:
    fig.canvas.draw()  # tick labels get their text at draw time
    width, _ = fig.get_size_inches()
    assert width == pytest.approx(COLUMN_WIDTH_IN)  # drawn at one-column width, so fonts are what print shows
    sizes = [t.get_fontsize() for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
             if t.get_text().strip()]
    assert min(sizes) >= 6.5  # readable in a one-column figure
    every = list(fig.axes) + [child for ax in fig.axes for child in ax.child_axes]  # inset colorbars too
    plots = [ax for ax in every if not hasattr(ax, "_colorbar")]
    colorbars = [ax for ax in every if hasattr(ax, "_colorbar")]
    for ax in plots:  # labelled, or sharing a labelled outer axis in its column / row
        pos = ax.get_position()
        same_col = [o for o in plots if abs(o.get_position().x0 - pos.x0) < 0.02]
        same_row = [o for o in plots if abs(o.get_position().y0 - pos.y0) < 0.02]
        assert ax.get_xlabel() or any(o.get_xlabel() for o in same_col), ax.get_title()
        assert ax.get_ylabel() or any(o.get_ylabel() for o in same_row), ax.get_title()
    for ax in colorbars:
        assert ax.get_xlabel() or ax.get_ylabel()
    for ax in plots:  # every colour-mapped artist has a colorbar
        mapped = [a for a in ax.get_children() if hasattr(a, "get_cmap") and getattr(a, "get_array", lambda: None)()
                  is not None]
        assert not mapped or colorbars
    if similarity:
        # each null band named, in its space's colour (null_label), or the one null of a single-colour figure
        assert ("(mean to +3 sd)" in _texts(fig)) and RANDOM_LABEL in _texts(fig)


@pytest.mark.parametrize("fmt", ["png", "pdf", "svg"])
def test_the_suffix_gives_the_format(report: Report, tmp_path: Path, fmt: str):
    path = write_plot(report, tmp_path / f"scan.{fmt}", dpi=100)
    assert path.read_bytes()[: len(MAGIC[fmt])] == MAGIC[fmt]


def test_dpi_sets_the_png_resolution(report: Report, tmp_path: Path):
    import matplotlib.image as mpimg

    low = mpimg.imread(write_plot(report, tmp_path / "a.png", dpi=100))
    high = mpimg.imread(write_plot(report, tmp_path / "b.png", dpi=200))
    assert high.shape[1] == pytest.approx(2 * low.shape[1], rel=0.02)


@pytest.mark.parametrize(("name", "dpi"), [("scan.jpg", 300), ("scan", 300), ("scan.png", 5)])
def test_a_bad_suffix_or_dpi_is_a_one_line_error_before_anything_is_written(report: Report, tmp_path: Path,
                                                                             name: str, dpi: int):
    with pytest.raises(GeodriftError) as info:
        write_plot(report, tmp_path / name, dpi=dpi)
    assert "\n" not in str(info.value) and not list(tmp_path.iterdir())


def test_the_scan_cli_refuses_an_unknown_figure_format_before_scanning(tmp_path: Path):
    result = runner.invoke(app, ["scan", "--layers", "0-2", "--plot", str(tmp_path / "s.jpg")])
    assert result.exit_code != 0 and ".png, .pdf or .svg" in str(result.exception or result.output)


def test_scan_figure_is_paper_ready(report: Report, tmp_path: Path, saved: list[Any]):
    svg = write_plot(report, tmp_path / "scan.svg", dpi=100).read_text()
    _assert_paper_ready(saved[-1], similarity=True)
    assert "|cos| (Eq. 1)" in svg and "layer l (pair l, l+1)" in svg and null_label("u1") in svg  # text stays text


def test_mlp_figures_are_paper_ready(tmp_path: Path, saved: list[Any]):
    rep = assemble("mlp", "smoke", [smoke_spec(0), smoke_spec(1)], [smoke_result(0), smoke_result(1)], [42])
    paths = write_plots(rep, tmp_path / "figs" / "smoke.pdf", dpi=100)
    assert [p.name for p in paths] == ["smoke_continuity.pdf", "smoke_rotation.pdf", "smoke_pca_v1.pdf"]
    assert all(p.read_bytes()[:4] == b"%PDF" for p in paths)
    continuity, rotation, pca = saved
    _assert_paper_ready(continuity, similarity=True)
    _assert_paper_ready(rotation, similarity=False)
    _assert_paper_ready(pca, similarity=False)
    assert any(hasattr(ax, "_colorbar") for ax in rotation.axes) and any(hasattr(ax, "_colorbar") for ax in pca.axes)
    assert "permutation null" in _texts(rotation)  # the rotation's floor: the null angle


def test_transformer_figures_are_paper_ready(tmp_path: Path, saved: list[Any]):
    result = tiny_result()
    rep = assemble("transformer", "tiny", [tiny_spec(steps=12)], [result], [42])
    paths = write_plots(rep, tmp_path, dpi=100)
    assert [p.suffix for p in paths] == [".png", ".png"]
    for fig in saved:
        _assert_paper_ready(fig, similarity=True)


def test_proofs_figure_is_paper_ready(tmp_path: Path, saved: list[Any]):
    report = run_claims(["breaking", "gauge"], seed=0)  # bars and a heatmap (equivariance: the slowest claim)
    path = write_proofs_plot(report, tmp_path / "proofs.svg", dpi=100)
    assert path is not None and "log10 rel. change" in path.read_text()
    _assert_paper_ready(saved[-1], similarity=False)
    assert any(hasattr(child, "_colorbar") for ax in saved[-1].axes for child in [ax, *ax.child_axes])


def test_old_reports_without_per_pair_nulls_still_plot(report: Report, tmp_path: Path):
    payload = json.loads(json.dumps(report.to_dict()))
    for role in payload["roles"]:
        for space in role["spaces"].values():
            for vc in space["vectors"]:
                del vc["per_pair_null_mean"], vc["per_pair_null_std"]
    assert write_plot(Report.from_dict(payload), tmp_path / "old.png", dpi=60).stat().st_size > 0


def test_the_checker_flags_what_a_reviewer_would():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 2))
    ax.scatter([0, 1], [0, 1], c=[0, 1])
    with pytest.raises(AssertionError):  # no axis labels
        _assert_paper_ready(fig, similarity=False)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    with pytest.raises(AssertionError):  # a colour scale without a colorbar
        _assert_paper_ready(fig, similarity=False)
    fig.colorbar(ax.collections[0], ax=ax, label="c")
    _assert_paper_ready(fig, similarity=False)
    with pytest.raises(AssertionError):  # a similarity plot without its floors
        _assert_paper_ready(fig, similarity=True)
    plt.close(fig)


@pytest.mark.parametrize("high", [900.0, 1e12])
def test_log_axes_label_their_ticks_as_plain_numbers_not_raw_tex(high):
    # The style turns TeX math off (literal names); matplotlib's default log labels would then read
    # "$\mathdefault{10^{2}}$" (the compress figures did, until log_scale).
    from geodrift.render.figures import log_scale, pyplot, style

    plt = pyplot()
    with style():
        fig, ax = plt.subplots()
        ax.plot([1, 2], [40.0, high])
        log_scale(ax)
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True) if t.get_text()]
        plt.close(fig)
    assert labels and not any("$" in t or "mathdefault" in t for t in labels), labels
    assert "100" in labels
