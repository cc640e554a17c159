"""Render a checkpoint series (``geodrift drift``) and a model pair (``geodrift compare``): tables and figures.

Tables are :class:`~geodrift.render.layout.Grid` (split to fit, never cut). Every similarity is shown
with its floors: the permutation null (mean ± std, or a band in figures) and the random floor
(``sqrt(2/(pi d))`` for ``|cos|``, ``k/d`` for a subspace overlap; as an angle ``arccos`` of it).
Every title names the view and the gauge fixing (:func:`~geodrift.jobs.series_results.gauge_fixing`); a
space the view aligns itself (``aligned``: the canonical view's head/hidden side) shows no number, is counted
in no summary and is drawn thin and grey.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.text import Text

from geodrift.gauge.status import ALIGNED
from geodrift.jobs.series_results import CompareResult, DriftResult, cross_gauges, gauge_fixing, space_gauges
from geodrift.render import console, fmt, lit, plural
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.render.scan import ALIGNED_CELL

SPACE_NAMES = {"v": "v1 (input)", "u": "u1 (output)"}


def _deg(value: float) -> str:
    return "—" if value != value else f"{value:.0f}°"


def view_title(rep: DriftResult | CompareResult) -> str:
    """``canonical view, gauge: each checkpoint in its own canonical form``: what every series title ends with."""
    return f"{rep.view} view, gauge: {gauge_fixing(rep)}"


def drift_grid(rep: DriftResult) -> Grid:
    """Per projection and space, per checkpoint: continuity across depth (null) and mean rotation from the first."""
    rot: dict[tuple[str, str, int], list[Any]] = defaultdict(list)
    for r in rep.rotation:
        rot[(r.role, r.space, r.checkpoint)].append(r)
    gauges, cross = space_gauges(rep), cross_gauges(rep)
    cols = [Col("Proj", "left", style="bold"), Col("space", "left")]
    cols += [Col(f"#{t}" + (" (ref)" if t == 0 else "")) for t in range(len(rep.checkpoints))]
    grid = Grid(
        f"Training series ({view_title(rep)}): continuity across depth and rotation from #0",
        cols, keys=2, lines=True,
        caption=("Line 1: mean |cos| of adjacent layers (Eq. 1) with its permutation-null mean; line 2: mean over "
                 "layers of the angle arccos|cos(x_t, x_0)| of each layer's vector to checkpoint #0, with the "
                 "angle of the permutation null (unrelated vectors) in brackets"
                 + ("; aligned: ordered by the view itself, not measured" if ALIGNED in gauges.values() else "")
                 + ". Checkpoints: " + "; ".join(f"#{i} {c}" for i, c in enumerate(rep.checkpoints))),
    )
    for role in rep.reports[0].roles:
        for space in ("v", "u"):
            aligned = gauges.get((role.role, space)) == ALIGNED
            if aligned and cross.get((role.role, space)) == ALIGNED:
                grid.add(lit(role.label), SPACE_NAMES[space], *[ALIGNED_CELL] * len(rep.reports))
                continue
            cells = []
            for t, report in enumerate(rep.reports):
                rr = report.role(role.role)
                if rr is None:
                    cells.append("—")
                    continue
                vc = rr.spaces[space].vectors[0]
                # line 1 is continuity across depth: an aligned space's is the view's ordering; its rotation is not
                line = ALIGNED_CELL if aligned else f"{fmt(vc.mean)} [dim]({fmt(vc.null_mean)})[/dim]"
                rows = rot.get((role.role, space, t), [])
                if rows:
                    line += (f"\n{_deg(fmean(r.angle_deg for r in rows))} "
                             f"[dim]({_deg(fmean(r.null_angle_deg for r in rows))})[/dim]")
                cells.append(line)
            grid.add(lit(role.label), SPACE_NAMES[space], *cells)
    return grid


def compare_grid(rep: CompareResult) -> Grid:
    """Per projection and space, means over layers: subspace overlap, mean principal angle, top-1 |cos|, with floors."""
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for row in rep.subspaces:
        groups[(row.role, row.space)].append(row)
    gauges = cross_gauges(rep)
    grid = Grid(
        f"Top-{rep.k} subspaces of {rep.a} vs {rep.b} ({view_title(rep)}; means over layers)",
        [Col("Proj", "left", style="bold"), Col("space", "left"), Col("layers"), Col("overlap (null · random)"),
         Col("mean angle (null)"), Col("top-1 |cos| (null · random)")],
        keys=2,
        caption=("overlap: mean cos² of the principal angles between the two models' top-k subspaces (1 = same "
                 f"subspace); null: the second model's coordinates permuted ({rep.null_draws} draws, seed {rep.seed}); "
                 "random: k/d. Angles in degrees; top-1: |cos| of the two first singular vectors, random "
                 "floor sqrt(2/(πd))."
                 + (" aligned: ordered by the view itself, not measured." if ALIGNED in gauges.values() else "")),
    )
    for (role, space), rows in groups.items():
        if gauges.get((role, space)) == ALIGNED:
            grid.add(lit(rows[0].label), SPACE_NAMES[space], str(len(rows)), *[ALIGNED_CELL] * 3)
            continue
        angle = fmean(fmean(r.principal_angles_deg) for r in rows)
        null_angle = math.degrees(math.acos(math.sqrt(min(1.0, fmean(r.overlap_null_mean for r in rows)))))
        grid.add(lit(rows[0].label), SPACE_NAMES[space], str(len(rows)),
                 f"{fmt(fmean(r.overlap for r in rows))} [dim]({fmt(fmean(r.overlap_null_mean for r in rows))} · "
                 f"{fmt(rows[0].overlap_random)})[/dim]",
                 f"{_deg(angle)} [dim]({_deg(null_angle)})[/dim]",
                 f"{fmt(fmean(r.top1_abs_cos for r in rows))} [dim]({fmt(fmean(r.top1_null_mean for r in rows))} · "
                 f"{fmt(rows[0].random_floor)})[/dim]")
    return grid


def drift_summary(rep: DriftResult) -> str:
    """The closing sentence: the mean rotation from #0 to the last checkpoint over the measured spaces (aligned
    ones left out), beside unrelated vectors' angle, with the view and gauge fixing.

    Example:
        >>> from geodrift.jobs.series_results import DriftResult
        >>> drift_summary(DriftResult(["a", "b"], 2, 4, 0, "raw", [], []))
        '2 checkpoints (raw view, gauge: none (raw weights)); mean rotation of v1/u1 from #0 to #1: — (unrelated vectors: —)'
    """
    gauges = cross_gauges(rep)
    last = [r for r in rep.rotation if r.checkpoint == len(rep.checkpoints) - 1
            and gauges.get((r.role, r.space)) != ALIGNED]
    moved = fmean(r.angle_deg for r in last) if last else math.nan
    unrelated = fmean(r.null_angle_deg for r in last) if last else math.nan
    left_out = sorted({f"{r.label} {r.space}1" for r in rep.rotation if gauges.get((r.role, r.space)) == ALIGNED})
    return (f"{len(rep.checkpoints)} checkpoint{plural(len(rep.checkpoints))} ({view_title(rep)}); mean rotation of "
            f"v1/u1 from #0 to #{len(rep.checkpoints) - 1}: {_deg(moved)} (unrelated vectors: {_deg(unrelated)})"
            + (f"; {len(left_out)} aligned space{plural(len(left_out))} not counted" if left_out else ""))


def compare_summary(rep: CompareResult) -> str:
    """The closing count: measured (projection, space, layer) subspaces above their null; aligned ones not counted.

    Example:
        >>> from geodrift.jobs.series_results import CompareResult
        >>> print(compare_summary(CompareResult("a", "b", 2, 4, 0, "raw", [], [])))
        0/0 (projection, space, layer) subspaces of b overlap a's above their permutation null (+3 sd); raw view, gauge: none (raw weights)
    """
    above, measured = rep.measured_above_null()
    aligned = len(rep.subspaces) - measured
    return (f"{above}/{measured} (projection, space, layer) subspaces of {rep.b} overlap {rep.a}'s above their "
            f"permutation null (+3 sd); {view_title(rep)}"
            + (f"; {aligned} aligned (not measured, not counted)" if aligned else ""))


def render_drift(rep: DriftResult, wide: bool = False) -> None:
    """Print the series table, notes, and a one-line summary."""
    print_grid(drift_grid(rep), wide=wide)
    for note in rep.notes:
        console.print(Text.assemble(lit("note:", "yellow"), " ", lit(note)))
    console.print(lit(drift_summary(rep), "bold"))  # wrapped to the terminal


def render_compare(rep: CompareResult, wide: bool = False) -> None:
    """Print the comparison table, notes, and the summary (one sentence, wrapped to the terminal)."""
    print_grid(compare_grid(rep), wide=wide)
    for note in rep.notes:
        console.print(Text.assemble(lit("note:", "yellow"), " ", lit(note)))
    console.print(lit(compare_summary(rep), "bold"))  # wrapped to the terminal


def write_drift_plot(rep: DriftResult, path: str | Path, dpi: int = 300) -> Path:
    """Write :func:`rotation_figure` to ``path`` (.png, .pdf or .svg)."""
    from geodrift.render.figures import save_figure, style

    with style():
        return save_figure(rotation_figure(rep), path, dpi)


def write_series_continuity_plot(rep: DriftResult, path: str | Path, dpi: int = 300) -> Path:
    """Write :func:`series_continuity_figure` to ``path`` (.png, .pdf or .svg)."""
    from geodrift.render.figures import save_figure, style

    with style():
        return save_figure(series_continuity_figure(rep), path, dpi)


def write_compare_plot(rep: CompareResult, path: str | Path, dpi: int = 300) -> Path:
    """Write :func:`compare_figure` to ``path`` (.png, .pdf or .svg)."""
    from geodrift.render.figures import save_figure, style

    with style():
        return save_figure(compare_figure(rep), path, dpi)


def rotation_figure(rep: DriftResult) -> Any:
    """Fig. 2's analogue: per projection, each layer's rotation angle from checkpoint #0 (its predicted space;
    v1 for V; an aligned one grey), with the angle of the permutation null dashed and of the random floor dotted."""
    from geodrift.render.figures import (
        ALIGNED_COLOR,
        ALIGNED_LABEL,
        figure_legend,
        label_outer,
        panels,
        style,
    )
    from geodrift.weights import PREDICTED_SPACE

    roles = list(rep.reports[0].roles)
    gauges = cross_gauges(rep)
    with style():
        fig, axes = panels(len(roles), cols=2, sharey=True)
        x = list(range(len(rep.checkpoints)))
        for ax, role in zip(axes, roles, strict=True):
            space = PREDICTED_SPACE.get(role.role) or "v"
            rows = [r for r in rep.rotation if r.role == role.role and r.space == space]
            layers = sorted({r.layer for r in rows})
            aligned = gauges.get((role.role, space)) == ALIGNED
            cmap = _cmap()
            for i, layer in enumerate(layers):
                mine = sorted((r for r in rows if r.layer == layer), key=lambda r: r.checkpoint)
                ax.plot(x, [0.0] + [r.angle_deg for r in mine], lw=0.8, label=ALIGNED_LABEL if aligned else None,
                        color=ALIGNED_COLOR if aligned else cmap(i / max(1, len(layers) - 1)))
            if rows and not aligned:
                nulls = [fmean(r.null_angle_deg for r in rows if r.checkpoint == t) for t in x[1:]]
                ax.plot(x[1:], nulls, color="k", ls="--", lw=0.8, label="permutation null (mean)")
                ax.axhline(math.degrees(math.acos(rows[0].random_floor)), color="0.35", ls=":", lw=0.9,
                           label="random floor arccos √(2/πd)")
            ax.set_title(f"{role.label} · {space}1" + (" (aligned)" if aligned else ""), pad=2, fontsize=7.5)
            ax.set_ylim(0, 92)
        all_layers = sorted({r.layer for r in rep.rotation}) or [0]
        _layer_colorbar(fig, axes, all_layers[0], all_layers[-1])
        label_outer(fig, axes, 2, "checkpoint", "angle to #0 (°)")
        fig.suptitle(f"Rotation of each layer's first singular vector\n{_figure_view(rep)}")
        figure_legend(fig, axes)
        return fig


def _figure_view(rep: DriftResult | CompareResult) -> str:
    # The view and gauge fixing on one line of a figure title (one column wide: about 60 characters).
    return f"{rep.view} view · gauge: {gauge_fixing(rep)}"


def series_continuity_figure(rep: DriftResult) -> Any:
    """Continuity across depth (v1 and u1) at each checkpoint, per projection, with null band and random floor;
    an aligned space thin and grey."""
    from geodrift.render.figures import (
        RANDOM_LABEL,
        draw_aligned,
        draw_null_band,
        draw_random_floor,
        figure_legend,
        label_outer,
        null_label,
        panels,
        style,
    )

    colors = {"v": "tab:blue", "u": "tab:orange"}
    roles = rep.reports[0].roles
    gauges = space_gauges(rep)
    with style():
        fig, axes = panels(len(roles), cols=2)
        x = list(range(len(rep.checkpoints)))
        for ax, role in zip(axes, roles, strict=True):
            for space in ("v", "u"):
                stats = [_first(rp, role.role, space) for rp in rep.reports]
                if gauges.get((role.role, space)) == ALIGNED:
                    draw_aligned(ax, x, [s.mean for s in stats])
                    continue
                draw_null_band(ax, x, [s.null_mean for s in stats], [s.null_std for s in stats], colors[space],
                               null_label(f"{space}1"))
                ax.plot(x, [s.mean for s in stats], color=colors[space], marker=".", label=SPACE_NAMES[space])
            for i, floor in enumerate(sorted({round(role.spaces[s].vectors[0].baseline, 6) for s in ("v", "u")})):
                draw_random_floor(ax, floor, RANDOM_LABEL if i == 0 else None)
            ax.set_title(role.label, pad=2, fontsize=7.5)
            ax.set_ylim(0, 1.02)
        label_outer(fig, axes, 2, "checkpoint", "|cos| (Eq. 1)")
        fig.suptitle(f"Continuity across depth along the series\n{_figure_view(rep)}")
        figure_legend(fig, axes)
        return fig


def compare_figure(rep: CompareResult) -> Any:
    """Per projection: subspace overlap of the two models across layers in both spaces, with null band and k/d; an
    aligned space thin and grey."""
    from geodrift.render.figures import (
        draw_aligned,
        draw_null_band,
        figure_legend,
        label_outer,
        null_label,
        panels,
        style,
    )

    colors = {"v": "tab:blue", "u": "tab:orange"}
    labels = list(dict.fromkeys((r.role, r.label) for r in rep.subspaces))
    gauges = cross_gauges(rep)
    with style():
        fig, axes = panels(len(labels), cols=2)
        for ax, (role, label) in zip(axes, labels, strict=True):
            for space in ("v", "u"):
                rows = sorted((r for r in rep.subspaces if r.role == role and r.space == space), key=lambda r: r.layer)
                if not rows:
                    continue
                x = [r.layer for r in rows]
                if gauges.get((role, space)) == ALIGNED:
                    draw_aligned(ax, x, [r.overlap for r in rows])
                    continue
                draw_null_band(ax, x, [r.overlap_null_mean for r in rows], [r.overlap_null_std for r in rows],
                               colors[space], null_label(f"{space} overlap"))
                ax.plot(x, [r.overlap for r in rows], color=colors[space], marker=".", label=f"{space} (top-{rows[0].k})")
                ax.axhline(rows[0].overlap_random, color=colors[space], ls=":", lw=0.9, label=f"random k/d ({space})")
            ax.set_title(label, pad=2, fontsize=7.5)
            ax.set_ylim(0, 1.02)
        label_outer(fig, axes, 2, "layer", "overlap (mean cos²)")
        fig.suptitle(f"Top-{rep.k} subspaces: {Path(rep.a).name} vs {Path(rep.b).name}\n{_figure_view(rep)}")
        figure_legend(fig, axes)
        return fig


def _first(report: Any, role: str, space: str) -> Any:
    rr = report.role(role)
    if rr is None:
        raise ValueError(f"{report.origin}: no {role}")  # drift keeps only roles every checkpoint has
    return rr.spaces[space].vectors[0]


def _layer_colorbar(fig: Any, axes: list[Any], first: int, last: int) -> None:
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    bar = fig.colorbar(ScalarMappable(Normalize(first, max(last, first + 1)), _cmap()), ax=axes, label="layer",
                       shrink=0.5, aspect=30, pad=0.02)
    bar.locator = MaxNLocator(integer=True)
    bar.update_ticks()


def _cmap() -> Any:
    from matplotlib import colormaps

    return colormaps["viridis"]
