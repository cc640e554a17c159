"""Figure conventions shared by every plot: one-column size, fonts, formats, the noise floor, saving.

- Size: every figure is one journal column wide (3.5 in, 89 mm) and is drawn at that size, so its
  fonts (7-8 pt) are what a reader of a one-column figure sees; multi-panel figures grow taller.
- Format: from the file suffix, ``.png``, ``.pdf`` or ``.svg`` (anything else is a one-line
  error); ``dpi`` sets the PNG resolution (and that of any raster part of a PDF/SVG).
- Every axis has a label, every colour scale a colorbar, and every similarity axis its floor:
  :func:`draw_null_band` (the permutation null) and :func:`draw_random_floor` (``sqrt(2/(pi d))``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from geodrift.io.atomic import write_with

# The figure options' checks live with the other option checks (a job checks them before its work); here too.
from geodrift.io.checks import check_dpi, figure_format

COLUMN_WIDTH_IN = 3.5
DEFAULT_DPI = 300
STYLE: dict[str, Any] = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
    "legend.fontsize": 7, "figure.titlesize": 8.5, "figure.labelsize": 8, "lines.linewidth": 1.1, "lines.markersize": 3,
    "axes.linewidth": 0.6, "xtick.major.width": 0.6, "ytick.major.width": 0.6, "legend.frameon": False,
    "svg.fonttype": "none", "pdf.fonttype": 42,  # text stays text (editable, searchable) in SVG and PDF
    "axes.spines.top": False, "axes.spines.right": False,
    # Titles carry names from files and options: a '$' in a model name must not start TeX math (nor fail on it).
    "text.parse_math": False,
}
NULL_LABEL = "permutation null (mean to +3 sd)"


def null_label(what: str) -> str:
    """The legend entry of one statistic's null band, e.g. ``null of v1 (mean to +3 sd)``: a figure that
    draws the null of two spaces in two colours names each of them.

    Example:
        >>> null_label("u1")
        'null of u1 (mean to +3 sd)'
    """
    return f"null of {what} (mean to +3 sd)"

RANDOM_LABEL = "random floor √(2/πd)"


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, imported on first use: a command without a figure never
    pays for matplotlib (about 1 s of start-up on 2 cores)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def style() -> Iterator[None]:
    """Matplotlib settings of every geodrift figure (fonts sized for a one-column figure)."""
    with pyplot().rc_context(STYLE):
        yield


def panels(n: int, *, cols: int = 2, panel_height: float = 1.45, extra_height: float = 1.0,
           sharex: bool = False, sharey: bool = True) -> tuple[Any, list[Any]]:
    """A one-column figure with ``n`` panels in ``cols`` columns; unused axes are removed.

    Returns:
        ``(figure, axes)`` with ``len(axes) == n``, in reading order.
    """
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    cols = max(1, min(cols, n))
    rows = math.ceil(n / cols)
    fig, grid = pyplot().subplots(rows, cols, figsize=(COLUMN_WIDTH_IN, panel_height * rows + extra_height),
                             squeeze=False, sharex=sharex, sharey=sharey,
                             layout=ConstrainedLayoutEngine(h_pad=0.02, w_pad=0.02, hspace=0.04, wspace=0.03))
    flat = list(grid.flat)
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n]


def label_outer(fig: Any, axes: Sequence[Any], cols: int, xlabel: str, ylabel: str) -> None:
    """Label the x axis under each column's lowest panel and the y axis of each row's first panel."""
    n = len(axes)
    for i, ax in enumerate(axes):
        if i + cols >= n:
            ax.set_xlabel(xlabel)
        if i % cols == 0:
            ax.set_ylabel(ylabel)


def figure_legend(fig: Any, axes: Sequence[Any], ncol: int = 2, extra: Sequence[tuple[Any, str]] = ()) -> None:
    """One legend for the whole figure, below the panels (entries from every panel, each label once, then
    ``extra`` ``(handle, label)`` pairs). A null band's entry shows its band and its dashed mean together
    (:func:`draw_null_band`), so every line style drawn has its entry."""
    from matplotlib.legend_handler import HandlerTuple

    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            partner = getattr(handle, "geodrift_partner", None)
            seen.setdefault(label, (handle, partner) if partner is not None else handle)
    for handle, label in extra:
        seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=ncol, handlelength=1.6,
                   columnspacing=1.0, handler_map={tuple: HandlerTuple(ndivide=1)})


def draw_null_band(ax: Any, x: Sequence[float], mean: Sequence[float], std: Sequence[float], color: str,
                   label: str | None = None) -> None:
    """The permutation null of a similarity: a band from its mean to mean + 3 sd, the mean dashed (both in one
    legend entry, :func:`figure_legend`)."""
    upper = [m + 3 * s for m, s in zip(mean, std, strict=True)]
    band = ax.fill_between(x, mean, upper, color=color, alpha=0.18, lw=0, label=label)
    (line,) = ax.plot(x, mean, color=color, ls="--", lw=0.7)
    band.geodrift_partner = line


# A space the view orders itself (the canonical view's head/hidden side, ``gauge == "aligned"``): no measurement,
# drawn thin and grey without a null, named so in the legend.
ALIGNED_COLOR = "0.72"
ALIGNED_LABEL = "aligned by the view, not measured"
# The space the theory predicts continuous is drawn thicker than the other (PREDICTED_LABEL in the legend).
PREDICTED_WIDTH = 1.9
PREDICTED_LABEL = "thick: predicted space"


def draw_aligned(ax: Any, x: Sequence[float], y: Sequence[float]) -> None:
    """An ``aligned`` space's values: a thin grey line, never a measurement (:data:`ALIGNED_LABEL`)."""
    ax.plot(x, y, color=ALIGNED_COLOR, lw=0.7, label=ALIGNED_LABEL)


def predicted_proxy() -> tuple[Any, str]:
    """The legend entry saying that the thick line is the predicted space (for :func:`figure_legend`'s ``extra``)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color="0.2", lw=PREDICTED_WIDTH), PREDICTED_LABEL


def draw_random_floor(ax: Any, floor: float, label: str | None = None) -> None:
    """The analytic floor ``sqrt(2/(pi d))`` of |cos| as a grey dotted line."""
    ax.axhline(floor, color="0.35", ls=":", lw=0.9, label=label)


def log_scale(ax: Any, axis: str = "y") -> None:
    """A log axis with plain tick labels (``100``, ``300``, ``1e+08``).

    The style turns TeX math off (:data:`STYLE`: names from files are printed literally), which would leave
    matplotlib's default log-axis labels as the raw text ``$\\mathdefault{10^{2}}$``; ``LogFormatter``
    writes no math, and labels minor ticks only where the axis spans few decades.
    """
    from matplotlib.ticker import LogFormatter

    getattr(ax, f"set_{axis}scale")("log")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(LogFormatter(labelOnlyBase=False))
    target.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def save_figure(fig: Any, path: str | Path, dpi: int = DEFAULT_DPI, close: bool = True) -> Path:
    """Write ``fig`` atomically in the format of ``path``'s suffix, then close it (unless ``close=False``).

    Raises:
        GeodriftError: an unsupported suffix or dpi.
    """
    fmt = figure_format(path)
    check_dpi(dpi)
    write_with(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight", pad_inches=0.03))
    if close:
        pyplot().close(fig)
    return Path(path)
