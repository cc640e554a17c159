"""Render a checkpoint series (``geodrift drift``) and a model pair (``geodrift compare``): tables and figures.

Tables are :class:`~geodrift.render.layout.Grid` (split to fit, never cut). Every similarity is shown
with its floors: the permutation null (mean ± std, or a band in figures) and the random floor
(``sqrt(2/(pi d))`` for ``|cos|``, ``k/d`` for a subspace overlap; as an angle ``arccos`` of it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.text import Text

from geodrift.render import console, fmt, lit
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.scanner.series import CompareReport, DriftReport

SPACE_NAMES = {"v": "v1 (input)", "u": "u1 (output)"}


def _deg(value: float) -> str:
    return "—" if value != value else f"{value:.0f}°"


def drift_grid(rep: DriftReport) -> Grid:
    """Per projection and space, per checkpoint: continuity across depth (null) and mean rotation from the first."""
    rot: dict[tuple[str, str, int], list[Any]] = defaultdict(list)
    for r in rep.rotation:
        rot[(r.role, r.space, r.checkpoint)].append(r)
    cols = [Col("Proj", "left", style="bold"), Col("space", "left")]
    cols += [Col(f"#{t}" + (" (ref)" if t == 0 else "")) for t in range(len(rep.checkpoints))]
    grid = Grid(
        "Training series: continuity across depth and rotation from checkpoint #0",
        cols, keys=2, lines=True,
        caption=("Line 1: mean |cos| of adjacent layers (Eq. 1) with its permutation-null mean; line 2: mean over "
                 "layers of the angle arccos|cos(x_t, x_0)| of each layer's vector to checkpoint #0, with the "
                 "angle of the permutation null (unrelated vectors) in brackets. Checkpoints: "
                 + "; ".join(f"#{i} {c}" for i, c in enumerate(rep.checkpoints))),
    )
    for role in rep.reports[0].roles:
        for space in ("v", "u"):
            cells = []
            for t, report in enumerate(rep.reports):
                rr = report.role(role.role)
                if rr is None:
                    cells.append("—")
                    continue
                vc = rr.spaces[space].vectors[0]
                line = f"{fmt(vc.mean)} [dim]({fmt(vc.null_mean)})[/dim]"
                rows = rot.get((role.role, space, t), [])
                if rows:
                    line += (f"\n{_deg(fmean(r.angle_deg for r in rows))} "
                             f"[dim]({_deg(fmean(r.null_angle_deg for r in rows))})[/dim]")
                cells.append(line)
            grid.add(lit(role.label), SPACE_NAMES[space], *cells)
    return grid


def compare_grid(rep: CompareReport) -> Grid:
    """Per projection and space, means over layers: subspace overlap, mean principal angle, top-1 |cos|, with floors."""
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for row in rep.subspaces:
        groups[(row.label, row.space)].append(row)
    grid = Grid(
        f"Top-{rep.k} subspaces of {rep.a} vs {rep.b} (means over layers)",
        [Col("Proj", "left", style="bold"), Col("space", "left"), Col("layers"), Col("overlap (null · random)"),
         Col("mean angle (null)"), Col("top-1 |cos| (null · random)")],
        keys=2,
        caption=("overlap: mean cos² of the principal angles between the two models' top-k subspaces (1 = same "
                 f"subspace); null: the second model's coordinates permuted ({rep.null_draws} draws, seed {rep.seed}); "
                 "random: k/d. Angles in degrees; top-1: |cos| of the two first singular vectors, random "
                 "floor sqrt(2/(πd))."),
    )
    for (label, space), rows in groups.items():
        angle = fmean(fmean(r.principal_angles_deg) for r in rows)
        null_angle = math.degrees(math.acos(math.sqrt(min(1.0, fmean(r.overlap_null_mean for r in rows)))))
        grid.add(lit(label), SPACE_NAMES[space], str(len(rows)),
                 f"{fmt(fmean(r.overlap for r in rows))} [dim]({fmt(fmean(r.overlap_null_mean for r in rows))} · "
                 f"{fmt(rows[0].overlap_random)})[/dim]",
                 f"{_deg(angle)} [dim]({_deg(null_angle)})[/dim]",
                 f"{fmt(fmean(r.top1_abs_cos for r in rows))} [dim]({fmt(fmean(r.top1_null_mean for r in rows))} · "
                 f"{fmt(rows[0].random_floor)})[/dim]")
    return grid


def render_drift(rep: DriftReport, wide: bool = False) -> None:
    """Print the series table, notes, and a one-line summary."""
    print_grid(drift_grid(rep), wide=wide)
    for note in rep.notes:
        console.print(Text.assemble(lit("note:", "yellow"), " ", lit(note)))
    last = [r for r in rep.rotation if r.checkpoint == len(rep.checkpoints) - 1]
    moved = fmean(r.angle_deg for r in last) if last else float("nan")
    console.print(lit(f"{len(rep.checkpoints)} checkpoints; mean rotation of v1/u1 from #0 to "
                      f"#{len(rep.checkpoints) - 1}: {_deg(moved)} (unrelated vectors: "
                      f"{_deg(fmean(r.null_angle_deg for r in last) if last else math.nan)})", "bold"))  # wrapped


def render_compare(rep: CompareReport, wide: bool = False) -> None:
    """Print the comparison table, notes, and the summary (one sentence, wrapped to the terminal)."""
    print_grid(compare_grid(rep), wide=wide)
    for note in rep.notes:
        console.print(Text.assemble(lit("note:", "yellow"), " ", lit(note)))
    above = sum(r.overlap > r.overlap_null_mean + 3 * r.overlap_null_std for r in rep.subspaces)
    console.print(lit(f"{above}/{len(rep.subspaces)} (projection, space, layer) subspaces of {rep.b} overlap "
                      f"{rep.a}'s above their permutation null (+3 sd)", "bold"))  # wrapped to the terminal


def write_drift_plot(rep: DriftReport, path: str | Path, dpi: int = 300) -> Path:
    """Fig. 2's analogue: per projection, each layer's rotation angle from checkpoint #0 (its predicted space;
    v1 for V), with the angle of the permutation null dashed and of the random floor dotted."""
    from geodrift.render.figures import figure_legend, label_outer, panels, save_figure, style
    from geodrift.weights import PREDICTED_SPACE

    roles = [r for r in rep.reports[0].roles]
    with style():
        fig, axes = panels(len(roles), cols=2, sharey=True)
        x = list(range(len(rep.checkpoints)))
        for ax, role in zip(axes, roles, strict=True):
            space = PREDICTED_SPACE.get(role.role) or "v"
            rows = [r for r in rep.rotation if r.role == role.role and r.space == space]
            layers = sorted({r.layer for r in rows})
            cmap = _cmap()
            for i, layer in enumerate(layers):
                mine = sorted((r for r in rows if r.layer == layer), key=lambda r: r.checkpoint)
                ax.plot(x, [0.0] + [r.angle_deg for r in mine], color=cmap(i / max(1, len(layers) - 1)), lw=0.8)
            if rows:
                nulls = [fmean(r.null_angle_deg for r in rows if r.checkpoint == t) for t in x[1:]]
                ax.plot(x[1:], nulls, color="k", ls="--", lw=0.8, label="permutation null (mean)")
                ax.axhline(math.degrees(math.acos(rows[0].random_floor)), color="0.35", ls=":", lw=0.9,
                           label="random floor arccos √(2/πd)")
            ax.set_title(f"{role.label} · {space}1", pad=2, fontsize=7.5)
            ax.set_ylim(0, 92)
        all_layers = sorted({r.layer for r in rep.rotation}) or [0]
        _layer_colorbar(fig, axes, all_layers[0], all_layers[-1])
        label_outer(fig, axes, 2, "checkpoint", "angle to #0 (°)")
        fig.suptitle("Rotation of each layer's first singular vector along the series")
        figure_legend(fig, axes)
        return save_figure(fig, path, dpi)


def write_series_continuity_plot(rep: DriftReport, path: str | Path, dpi: int = 300) -> Path:
    """Continuity across depth (v1 and u1) at each checkpoint, per projection, with null band and random floor."""
    from geodrift.render.figures import (
        RANDOM_LABEL,
        draw_null_band,
        draw_random_floor,
        figure_legend,
        label_outer,
        null_label,
        panels,
        save_figure,
        style,
    )

    colors = {"v": "tab:blue", "u": "tab:orange"}
    roles = rep.reports[0].roles
    with style():
        fig, axes = panels(len(roles), cols=2)
        x = list(range(len(rep.checkpoints)))
        for ax, role in zip(axes, roles, strict=True):
            for space in ("v", "u"):
                stats = [_first(rp, role.role, space) for rp in rep.reports]
                draw_null_band(ax, x, [s.null_mean for s in stats], [s.null_std for s in stats], colors[space],
                               null_label(f"{space}1"))
                ax.plot(x, [s.mean for s in stats], color=colors[space], marker=".", label=SPACE_NAMES[space])
            for i, floor in enumerate(sorted({round(role.spaces[s].vectors[0].baseline, 6) for s in ("v", "u")})):
                draw_random_floor(ax, floor, RANDOM_LABEL if i == 0 else None)
            ax.set_title(role.label, pad=2, fontsize=7.5)
            ax.set_ylim(0, 1.02)
        label_outer(fig, axes, 2, "checkpoint", "|cos| (Eq. 1)")
        fig.suptitle("Continuity across depth along the series")
        figure_legend(fig, axes)
        return save_figure(fig, path, dpi)


def write_compare_plot(rep: CompareReport, path: str | Path, dpi: int = 300) -> Path:
    """Per projection: subspace overlap of the two models across layers in both spaces, with null band and k/d."""
    from geodrift.render.figures import (
        draw_null_band,
        figure_legend,
        label_outer,
        null_label,
        panels,
        save_figure,
        style,
    )

    colors = {"v": "tab:blue", "u": "tab:orange"}
    labels = list(dict.fromkeys(r.label for r in rep.subspaces))
    with style():
        fig, axes = panels(len(labels), cols=2)
        for ax, label in zip(axes, labels, strict=True):
            for space in ("v", "u"):
                rows = sorted((r for r in rep.subspaces if r.label == label and r.space == space), key=lambda r: r.layer)
                if not rows:
                    continue
                x = [r.layer for r in rows]
                draw_null_band(ax, x, [r.overlap_null_mean for r in rows], [r.overlap_null_std for r in rows],
                               colors[space], null_label(f"{space} overlap"))
                ax.plot(x, [r.overlap for r in rows], color=colors[space], marker=".", label=f"{space} (top-{rows[0].k})")
                ax.axhline(rows[0].overlap_random, color=colors[space], ls=":", lw=0.9,
                           label="random k/d" if space == "v" else None)
            ax.set_title(label, pad=2, fontsize=7.5)
            ax.set_ylim(0, 1.02)
        label_outer(fig, axes, 2, "layer", "overlap (mean cos²)")
        fig.suptitle(f"Top-{rep.k} subspaces: {Path(rep.a).name} vs {Path(rep.b).name}")
        figure_legend(fig, axes)
        return save_figure(fig, path, dpi)


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
