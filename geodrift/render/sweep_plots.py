"""Figures of the grid presets: App. F (weight continuity vs gradient rank) and the data-size experiment.

Every similarity is drawn with its floors: each run's permutation-null mean (hollow marker / dashed
line of the same colour) and the analytic random floor ``sqrt(2/(pi d))`` (grey dotted line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.ticker import FuncFormatter

from geodrift.render.figures import (
    RANDOM_LABEL,
    draw_random_floor,
    figure_legend,
    label_outer,
    panels,
    save_figure,
    style,
)
from geodrift.sim.reproduce import COLUMN_TITLES, Reproduction

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
_STEP_STYLES = ("-", (0, (4, 1, 1, 1)), (0, (1, 1)))  # longest, next, shortest step count
_MARKERS = ("o", "s", "^", "D", "v", "P")


def _split(label: str) -> tuple[str, str, str]:
    # "Res+ReLU [digits] 938 steps" -> ("Res+ReLU", "digits", "938 steps")
    arch, _, rest = label.partition(" [")
    data, _, tail = rest.partition("]")
    return arch, data, tail.strip()


def write_appf_plot(rep: Reproduction, path: str | Path, dpi: int = 300) -> Path:
    """App. F: final weight v1 continuity against the gradient's effective rank (Eq. 3), one point per run.

    Colour = architecture, marker = data set; a hollow marker at the same x is that run's
    permutation-null mean of W v1; the dotted line is the random floor.
    """
    archs = sorted({_split(r.record.label)[0] for r in rep.results}, key=str)
    datas = sorted({_split(r.record.label)[1] for r in rep.results}, key=str)
    with style():
        fig, (ax,) = panels(1, cols=1, panel_height=2.3, extra_height=0.6)
        for r in rep.results:
            arch, data, _ = _split(r.record.label)
            x, y, null = (r.record.summary.get(k) for k in ("G erank", "W v1", "W v1 null"))
            if x is None or y is None:
                continue
            color, marker = _COLORS[archs.index(arch) % 6], _MARKERS[datas.index(data) % 6]
            ax.scatter([x], [y], color=color, marker=marker, s=14, label=f"{arch}", zorder=3)
            if null is not None:
                ax.scatter([x], [null], facecolors="none", edgecolors=color, marker=marker, s=14, lw=0.7,
                           label="permutation null of W v1 (hollow)", zorder=2)
        for i, data in enumerate(datas):
            ax.scatter([], [], color="0.4", marker=_MARKERS[i % 6], s=14, label=f"data: {data}")
        draw_random_floor(ax, rep.floor, RANDOM_LABEL)
        ax.set_xscale("log")
        plain = FuncFormatter(lambda value, _: f"{value:g}")  # 2, 3, 4 rather than 2x10^0
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain)
        ax.set_xlabel("gradient effective rank (Eq. 3), last mini-batch")
        ax.set_ylabel("final W v1 continuity")
        ax.set_ylim(0, 1)
        figure_legend(fig, [ax])
        return save_figure(fig, path, dpi)


def write_datasize_plot(rep: Reproduction, path: str | Path, images: dict[str, int], dpi: int = 300) -> Path:
    """The data-size experiment: W v1, Ḡ v1, Δ_GW and W σ²-WA (rows) against distinct training images (left
    column: one line per architecture and step count) and against optimiser steps (right column: one line per
    architecture and data set).

    Colour = architecture. Left: solid = the longest run, dash-dotted / dotted = shorter ones; right: marker =
    data set. W v1's permutation-null mean is a thin dashed line of the same colour; the random floor is dotted
    on the similarity panels (Δ_GW is a difference: no floor).

    Args:
        rep: the ``datasize`` reproduction; images: data set name -> distinct training images.
    """
    metrics = ("W v1", "Gcum v1", "delta_gw", "W s2wa(v)")
    runs = [(_split(s.label), rep.stats[s.label]) for s in rep.specs if _split(s.label)[1] in images]
    archs = sorted({arch for (arch, _, _), _ in runs})
    steps = sorted({tail for (_, _, tail), _ in runs}, key=lambda t: int(t.split()[0]) if t else 0)
    datas = sorted({data for (_, data, _), _ in runs}, key=lambda d: images[d])

    def line(ax: Any, points: list[tuple[float, Any]], metric: str, color: str, **kw: Any) -> None:
        points.sort(key=lambda p: p[0])
        ax.plot([p[0] for p in points], [p[1][metric].mean for p in points], color=color, ms=3, **kw)
        if metric == "W v1":
            ax.plot([p[0] for p in points], [p[1]["W v1 null"].mean if "W v1 null" in p[1] else float("nan")
                                              for p in points],
                    color=color, ls="--", lw=0.6, label="W v1 permutation null (thin dashed)")

    with style():
        fig, axes = panels(8, cols=2, panel_height=1.45, extra_height=1.3, sharey=False)
        for row, metric in enumerate(metrics):
            by_images, by_steps = axes[2 * row], axes[2 * row + 1]
            for arch in archs:
                color = _COLORS[archs.index(arch) % 6]
                for tail in steps:
                    rank = min(len(steps) - 1 - steps.index(tail), 2)
                    pts = [(float(images[d]), st) for (a, d, t), st in runs if a == arch and t == tail]
                    line(by_images, pts, metric, color, ls=_STEP_STYLES[rank], marker="os^"[rank],
                         label=f"{arch}, {tail or 'preset steps'}")
                for data in datas:
                    pts = [(float(t.split()[0]), st) for (a, d, t), st in runs if a == arch and d == data and t]
                    line(by_steps, pts, metric, color, ls="-", lw=0.8, marker=_MARKERS[datas.index(data) % 6],
                         label=f"{arch}, {data} ({images[data]:,} images)")
            step_counts = sorted({int(t.split()[0]) for t in steps if t})
            for ax, ticks, names in ((by_images, [images[d] for d in datas], [f"{images[d] / 1000:.2g}k" for d in datas]),
                                     (by_steps, step_counts, [f"{n:,}" for n in step_counts])):
                if metric != "delta_gw":
                    draw_random_floor(ax, rep.floor, RANDOM_LABEL)
                ax.set_xscale("log")
                ax.set_xticks(ticks, names, minor=False)
                ax.set_xticks([], minor=True)
                ax.set_title(COLUMN_TITLES.get(metric, metric))
        label_outer(fig, axes, 2, "", "value")
        axes[-2].set_xlabel("distinct training images")
        axes[-1].set_xlabel("optimiser steps")
        figure_legend(fig, axes)
        return save_figure(fig, path, dpi)
