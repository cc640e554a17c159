"""Figures of simulator runs, both simulators, in the conventions of ``geodrift.render.figures``.

MLP: continuity over training (W, G, Ḡ v1, each with its permutation null as a band, and the
random floor), per-layer rotation of v1 (colour = layer, with a colorbar; the null angle dashed)
and the PCA trajectory of the final v1 across layers (colour = layer, with a colorbar).
Transformer: per projection, W's v1/u1 continuity over training with nulls; the final weights'
continuity vs depth (the scan's figure, one per run).

``--plot`` names a folder (PNG figures named after the preset) or a file whose suffix gives the
format and whose stem prefixes every figure: ``figs/t1.pdf`` -> ``figs/t1_continuity.pdf``, ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import Normalize
from matplotlib.ticker import MaxNLocator

from geodrift.gauge.status import ALIGNED
from geodrift.render.figures import (
    NULL_LABEL,
    RANDOM_LABEL,
    check_dpi,
    draw_aligned,
    draw_null_band,
    draw_random_floor,
    figure_format,
    figure_legend,
    label_outer,
    null_label,
    panels,
    save_figure,
    style,
)
from geodrift.render.scan_plot import figure_title, write_plot
from geodrift.sim.record import RunRecord, slug
from geodrift.sim.reference import PAPER_TABLE2_SPACE
from geodrift.sim.reproduce import Reproduction
from geodrift.weights import ROLE_LABELS

SOURCES = (("W", "C0", "W (weights)"), ("G", "C1", "G (gradient)"), ("Gcum", "C2", "Ḡ (summed gradient)"))


def _epochs(record: RunRecord, steps: list[int]) -> list[float]:
    epoch_steps = record.config.get("train", {}).get("epoch_steps") or 1
    return [s / epoch_steps for s in steps]


def _seeds_note(records: list[RunRecord], note: str) -> str:
    seeds = sorted({r.seed for r in records})
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}; {note}"


def _labels(records: list[RunRecord]) -> list[str]:
    return list(dict.fromkeys(r.label for r in records))


def continuity_plot(records: list[RunRecord], path: Path, floor: float, dpi: int = 300) -> Path:
    """Weight, gradient and summed-gradient v1 continuity over training, one panel per configuration."""
    labels = _labels(records)
    with style():
        fig, axes = panels(len(labels), sharex=False)
        for ax, label in zip(axes, labels, strict=True):
            runs = [r for r in records if r.label == label]
            for i, rec in enumerate(runs):
                for source, color, name in SOURCES:
                    pts = rec.select(source, "block", "cont", "v", 1)
                    if not pts:
                        continue
                    x = _epochs(rec, [p[0] for p in pts])
                    ax.plot(x, [p[1] for p in pts], color=color, lw=1.1 if i == 0 else 0.7, alpha=1 if i == 0 else 0.6,
                            label=f"{name} v1")
                    if i == 0:
                        mean = [p[1] for p in rec.select(source, "block", "null_mean", "v", 1)]
                        std = [p[1] for p in rec.select(source, "block", "null_std", "v", 1)]
                        if len(mean) == len(std) == len(x):
                            draw_null_band(ax, x, mean, std, color, NULL_LABEL if source == "W" else None)
            draw_random_floor(ax, floor, RANDOM_LABEL)
            ax.set_title(label, pad=2)
            ax.set_ylim(0, 1.02)
        label_outer(fig, axes, 2, "epoch", "v1 |cos| (Eq. 1)")
        fig.suptitle("v1 continuity over training (mean |cos| of adjacent layers)\n"
                     + _seeds_note(records, "bands: first seed's null; thin lines: other seeds"))
        figure_legend(fig, axes)
        return save_figure(fig, path, dpi)


def rotation_plot(records: list[RunRecord], path: Path, dpi: int = 300) -> Path:
    """Each layer's v1 angle from its epoch-1 reference over training (first seed of each configuration).

    :func:`write_plots` draws it only when some run went past the reference step (one epoch).
    """
    labels = _labels(records)
    cmap = plt.get_cmap("viridis")
    with style():
        fig, axes = panels(len(labels), sharex=False, extra_height=1.4)
        n_layers = 1
        for ax, label in zip(axes, labels, strict=True):
            rec = next(r for r in records if r.label == label)
            rows = [r for r in rec.rows if r[2] == "W" and r[4] == "rotation_deg" and r[7] is not None]
            layers = sorted({r[7] for r in rows})
            n_layers = max(n_layers, len(layers))
            for layer in layers:
                pts = [(r[0], r[8]) for r in rows if r[7] == layer]
                ax.plot(_epochs(rec, [p[0] for p in pts]), [p[1] for p in pts], color=cmap(layer / max(1, len(layers) - 1)),
                        lw=0.8)
            if not rows:
                ax.text(0.5, 0.5, "no data: the run ends before\nthe epoch-1 reference step", transform=ax.transAxes,
                        ha="center", va="center", fontsize=6.5, color="0.4")
            null = rec.select("W", "block", "rotation_null_deg")
            if null:
                ax.plot(_epochs(rec, [p[0] for p in null]), [p[1] for p in null], color="0.3", ls="--", lw=1,
                        label="permutation null (fully drifted)")
            ax.set_title(label, pad=2)
            ax.set_ylim(0, 92)
            ax.set_yticks([0, 30, 60, 90])
        label_outer(fig, axes, 2, "epoch", "v1 angle to epoch 1 (°)")
        fig.suptitle("Rotation of each layer's W v1 from its epoch-1 direction\n"
                     + _seeds_note(records[:1], "one line per layer"))
        _layer_colorbar(fig, axes, n_layers, cmap)
        figure_legend(fig, axes, ncol=1)
        return save_figure(fig, path, dpi)


def _layer_colorbar(fig: Any, axes: list[Any], n_layers: int, cmap: Any) -> None:
    # One horizontal colorbar under the panels for the layer colour scale, integer ticks.
    bar = fig.colorbar(plt.cm.ScalarMappable(Normalize(0, max(1, n_layers - 1)), cmap), ax=axes, label="layer",
                       shrink=0.6, location="bottom", aspect=35, pad=0.08)
    bar.locator = MaxNLocator(integer=True)
    bar.update_ticks()


def pca_trajectory(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sign-align (Eq. 6), normalise, centre and project ``vectors (L, d)`` on 3 PCs.

    Returns:
        ``(coords (L, 3), explained_variance_ratio (3,))``.
    """
    v = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    for i in range(1, len(v)):
        if float(v[i] @ v[i - 1]) < 0:
            v[i] = -v[i]
    centred = v - v.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    evr = s**2 / max(float((s**2).sum()), 1e-300)
    k = min(3, vt.shape[0])
    coords = np.zeros((len(v), 3))
    coords[:, :k] = centred @ vt[:k].T
    return coords, np.pad(evr[:k], (0, 3 - k))


def pca_plot(records: list[RunRecord], path: Path, dpi: int = 300) -> Path:
    """PC1-PC2 trajectory of the final W v1 across layers (colour = layer), per configuration.

    The title gives the share of variance in 3 PCs for the final and the initial weights: a
    smooth path across depth is low-dimensional, random initial vectors are not.
    """
    labels = _labels(records)
    cmap = plt.get_cmap("viridis")
    with style():
        fig, axes = panels(len(labels), panel_height=1.6, sharey=False, extra_height=1.1)
        n_layers = 1
        for ax, label in zip(axes, labels, strict=True):
            rec = next(r for r in records if r.label == label)
            title = label
            if "W v1 final" in rec.vectors:
                coords, evr = pca_trajectory(np.array(rec.vectors["W v1 final"], dtype=np.float64))
                n_layers = max(n_layers, len(coords))
                ax.plot(coords[:, 0], coords[:, 1], color="0.6", lw=0.6, zorder=1)
                ax.scatter(coords[:, 0], coords[:, 1], c=np.arange(len(coords)), cmap=cmap, s=9, zorder=2,
                           vmin=0, vmax=max(1, len(coords) - 1))
                ax.set_xlabel(f"PC1 ({evr[0]:.0%})", labelpad=1)
                ax.set_ylabel(f"PC2 ({evr[1]:.0%})", labelpad=1)
                init = ""
                if "W v1 init" in rec.vectors:
                    _, evr0 = pca_trajectory(np.array(rec.vectors["W v1 init"], dtype=np.float64))
                    init = f" (init {evr0.sum():.0%})"
                title += f"\n3 PCs hold {evr.sum():.0%}{init}"
            ax.set_title(title, pad=2, fontsize=7)
            ax.tick_params(labelsize=6.5)
        _layer_colorbar(fig, axes, n_layers, cmap)
        fig.suptitle(f"Final W v1 across layers, PCA (sign-aligned, Eq. 6); seed {records[0].seed}")
        return save_figure(fig, path, dpi)


def transformer_training_plot(records: list[RunRecord], path: Path, floors: dict[tuple[str, str], float],
                              dpi: int = 300, view: str = "raw", aligned: frozenset[tuple[str, str]] = frozenset()
                              ) -> Path:
    """Per projection, W's v1 and u1 continuity vs step for every seed, each with its null band; a space the
    tracking ``view`` aligns itself (``aligned``: role, space) is a thin grey line of the first seed, no null."""
    roles = [r for r in PAPER_TABLE2_SPACE if records[0].select("W", r, "cont", "v", 1)]
    with style():
        fig, axes = panels(len(roles), sharex=False)
        for ax, role in zip(axes, roles, strict=True):
            for space, color in (("v", "tab:blue"), ("u", "tab:orange")):
                if (role, space) in aligned:
                    pts = records[0].select("W", role, "cont", space, 1)
                    draw_aligned(ax, [p[0] for p in pts], [p[1] for p in pts])
                    continue
                for i, rec in enumerate(records):
                    pts = rec.select("W", role, "cont", space, 1)
                    x = [p[0] for p in pts]
                    ax.plot(x, [p[1] for p in pts], color=color, lw=1.1 if i == 0 else 0.7,
                            alpha=1 if i == 0 else 0.6, label=f"W {space}1 ({'input' if space == 'v' else 'output'})")
                    if i == 0:
                        mean = [p[1] for p in rec.select("W", role, "null_mean", space, 1)]
                        std = [p[1] for p in rec.select("W", role, "null_std", space, 1)]
                        if len(mean) == len(std) == len(x):
                            draw_null_band(ax, x, mean, std, color, null_label(f"{space}1"))
                if (role, space) in floors:
                    draw_random_floor(ax, floors[(role, space)], RANDOM_LABEL if space == "v" else None)
            ax.set_title(f"{ROLE_LABELS[role]} (paper reports {PAPER_TABLE2_SPACE[role]}1)", pad=2)
            ax.set_ylim(0, 1.02)
        label_outer(fig, axes, 2, "training step", "W |cos| (Eq. 1)")
        seeds = ", ".join(str(r.seed) for r in records)
        fig.suptitle(f"{records[0].label}: continuity over training\n(seeds {seeds}; {view} view)")
        figure_legend(fig, axes)
        return save_figure(fig, path, dpi)


def plot_names(rep: Reproduction, target: str | Path) -> tuple[Path, str, str]:
    """``(folder, prefix, format)`` of the figures for ``--plot target`` (a folder, or a file naming the format)."""
    target = Path(target)
    if target.suffix:
        return target.parent, f"{target.stem}_", figure_format(target)
    # Per-projection figures are per configuration, named by its label; block figures cover the whole
    # preset in one file each, so they carry the preset's name (several presets may share a folder).
    return target, "" if rep.simulator.per_projection else f"{slug(rep.preset)}_", "png"


def write_plots(rep: Reproduction, target: str | Path, dpi: int = 300) -> list[Path]:
    """Write the reproduction's figures for ``--plot target`` and return their paths.

    Raises:
        GeodriftError: an unsupported suffix or dpi.
    """
    folder, prefix, fmt = plot_names(rep, target)
    check_dpi(dpi)
    done = [r for r in rep.records if r.rows]
    if not done:
        return []
    if rep.simulator.per_projection:
        paths = []
        for spec in rep.specs:
            runs = [r for r in rep.results if r.record.label == spec.label and r.record.rows]
            if runs:
                report = runs[0].report
                aligned = frozenset((r.role, x) for r in report.roles for x, sp in r.spaces.items() if sp.gauge == ALIGNED)
                paths.append(transformer_training_plot([r.record for r in runs],
                                                       folder / f"{prefix}{slug(spec.label)}_training.{fmt}",
                                                       _floors(report), dpi, spec.track.view, aligned))
        for result in rep.results:
            path = folder / f"{prefix}{slug(result.record.label)}_seed{result.record.seed}_depth.{fmt}"
            verdicts = figure_title(result.report).splitlines()[0]  # "frame 7/7, path 3/7 · canonical view"
            paths.append(write_plot(result.report, path, dpi,
                                    title=f"{verdicts}\n{result.record.label}, seed {result.record.seed}: final weights"))
        return paths
    paths = [continuity_plot(done, folder / f"{prefix}continuity.{fmt}", rep.floor, dpi)]
    if any(r[4] == "rotation_deg" for rec in done for r in rec.rows):  # only runs past the epoch-1 reference have it
        paths.append(rotation_plot(done, folder / f"{prefix}rotation.{fmt}", dpi))
    paths.append(pca_plot(done, folder / f"{prefix}pca_v1.{fmt}", dpi))
    if rep.preset == "appf":
        from geodrift.render.sweep_plots import write_appf_plot

        paths.append(write_appf_plot(rep, folder / f"{prefix}gradient_rank.{fmt}", dpi))
    if rep.preset == "datasize":
        from geodrift.render.sweep_plots import write_datasize_plot
        from geodrift.sim.data import training_images

        names = {s.data.name for s in rep.specs if hasattr(s.data, "name")}
        paths.append(write_datasize_plot(rep, folder / f"{prefix}datasize.{fmt}",
                                         {n: training_images(n) for n in names}, dpi))
    return paths


def _floors(report: Any) -> dict[tuple[str, str], float]:
    return {(r.role, space): r.spaces[space].vectors[0].baseline for r in report.roles for space in ("v", "u")}
