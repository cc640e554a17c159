"""Figures of the grid presets: App. F (weight continuity vs gradient rank) and the data-size experiment.

Every similarity is drawn with its floors: each run's permutation-null mean (hollow marker / dashed
line of the same colour) and the analytic random floor ``sqrt(2/(pi d))`` (grey dotted line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from geodrift.render.figures import RANDOM_LABEL, draw_random_floor, label_outer, panels, save_figure, style
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
        ax.set_xlabel("gradient effective rank (Eq. 3), last mini-batch")
        ax.set_ylabel("final W v1 continuity")
        ax.set_ylim(0, 1)
        _legend(fig, ax)
        return save_figure(fig, path, dpi)


def write_datasize_plot(rep: Reproduction, path: str | Path, images: dict[str, int], dpi: int = 300) -> Path:
    """The data-size experiment: four panels (W v1, Ḡ v1, Δ_GW, W σ²-WA) against distinct training images.

    One line per architecture and step count (solid: the longest run; dash-dotted, dotted: shorter ones, each
    with its own marker); W v1's permutation-null mean is
    dashed; the random floor is dotted on the similarity panels (Δ_GW is a difference: no floor).

    Args:
        rep: the ``datasize`` reproduction; images: data set name -> distinct training images.
    """
    metrics = ("W v1", "Gcum v1", "delta_gw", "W s2wa(v)")
    keys = sorted({(_split(s.label)[0], _split(s.label)[2]) for s in rep.specs},
                  key=lambda k: (k[0], int(k[1].split()[0]) if k[1] else 0))
    archs = sorted({k[0] for k in keys})
    steps = sorted({k[1] for k in keys}, key=lambda s: int(s.split()[0]) if s else 0)
    with style():
        fig, axes = panels(4, cols=2, panel_height=1.6, extra_height=0.9, sharey=False)
        for ax, metric in zip(axes, metrics, strict=True):
            for arch, tail in keys:
                rows = sorted((images[_split(s.label)[1]], rep.stats[s.label][metric].mean,
                               rep.stats[s.label].get("W v1 null"))
                              for s in rep.specs if _split(s.label)[0] == arch and _split(s.label)[2] == tail
                              and _split(s.label)[1] in images)
                if not rows:
                    continue
                color = _COLORS[archs.index(arch) % 6]
                # The longest run solid; shorter ones dotted / dash-dotted, each with its own marker.
                rank = len(steps) - 1 - steps.index(tail)
                ax.plot([r[0] for r in rows], [r[1] for r in rows], color=color, ls=_STEP_STYLES[min(rank, 2)],
                        marker="os^"[min(rank, 2)], ms=3, label=f"{arch}, {tail}")
                if metric == "W v1":
                    ax.plot([r[0] for r in rows], [r[2].mean if r[2] else float("nan") for r in rows],
                            color=color, ls="--", lw=0.6, label="W v1 permutation null (dashed)")
            if metric != "delta_gw":
                draw_random_floor(ax, rep.floor, RANDOM_LABEL)
            ax.set_xscale("log")
            ax.set_title(COLUMN_TITLES.get(metric, metric))
        label_outer(fig, axes, 2, "distinct training images", "value")
        _legend(fig, axes[0], *axes[1:])
        return save_figure(fig, path, dpi)


def _legend(fig: Any, *axes: Any) -> None:
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=2, handlelength=1.6,
               columnspacing=1.0)
