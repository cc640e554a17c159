"""PNG plots of simulator runs, both simulators; the noise floor is drawn on every similarity plot.

MLP: continuity over training (W, G, Ḡ v1, each with its permutation-null mean dashed), per-layer
rotation, 3-D PCA of v1 across layers. Transformer: per projection, weight v1/u1 continuity over
training with the null dashed; the final weights' continuity vs depth (one PNG per run).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from geodrift.atomic import write_with  # noqa: E402
from geodrift.render.scan import write_plot  # noqa: E402
from geodrift.sim.record import RunRecord, slug  # noqa: E402
from geodrift.sim.reference import PAPER_TABLE2_SPACE  # noqa: E402
from geodrift.sim.reproduce import Reproduction  # noqa: E402


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)
    return path


def _epoch_axis(record: RunRecord, steps: list[int]) -> list[float]:
    epoch_steps = record.config.get("train", {}).get("epoch_steps") or 1
    return [s / epoch_steps for s in steps]


def continuity_plot(records: list[RunRecord], path: Path, floor: float) -> Path:
    """Weight, gradient and cumulative-gradient v1 continuity over training, one panel per configuration."""
    labels = list(dict.fromkeys(r.label for r in records))
    cols = min(4, len(labels))
    rows = math.ceil(len(labels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False, sharey=True)
    for ax, label in zip(axes.flat, labels, strict=False):
        for rec in (r for r in records if r.label == label):
            first = rec.seed == records[0].seed
            for source, color in (("W", "C0"), ("G", "C1"), ("Gcum", "C2")):
                pairs = rec.select(source, "block", "cont", "v", 1)
                nulls = rec.select(source, "block", "null_mean", "v", 1)
                if pairs:
                    ax.plot(_epoch_axis(rec, [p[0] for p in pairs]), [p[1] for p in pairs], color=color,
                            alpha=0.8, label=f"{source} v1" if first else None)
                if nulls:
                    ax.plot(_epoch_axis(rec, [p[0] for p in nulls]), [p[1] for p in nulls], color=color, ls="--",
                            lw=0.8, alpha=0.8, label=f"{source} v1 null" if first else None)
        ax.axhline(floor, color="grey", ls=":", lw=1, label="random floor")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 1.02)
    for ax in list(axes.flat)[len(labels):]:
        ax.axis("off")
    axes.flat[0].set_ylabel("v1 continuity (Eq. 1)")
    axes.flat[0].legend(fontsize=7)
    return _save(fig, path)


def rotation_plot(records: list[RunRecord], path: Path) -> Path:
    """Each layer's v1 angle from its epoch-1 reference over training (first seed of each configuration)."""
    labels = list(dict.fromkeys(r.label for r in records))
    cols = min(4, len(labels))
    fig, axes = plt.subplots(math.ceil(len(labels) / cols), cols, figsize=(4 * cols, 3 * math.ceil(len(labels) / cols)),
                             squeeze=False, sharey=True)
    for ax in list(axes.flat)[len(labels):]:
        ax.axis("off")
    for ax, label in zip(axes.flat, labels, strict=False):
        rec = next(r for r in records if r.label == label)
        rows = [r for r in rec.rows if r[2] == "W" and r[4] == "rotation_deg" and r[7] is not None]
        layers = sorted({r[7] for r in rows})
        cmap = plt.get_cmap("viridis")
        for layer in layers:
            pts = [(r[0], r[8]) for r in rows if r[7] == layer]
            ax.plot(_epoch_axis(rec, [p[0] for p in pts]), [p[1] for p in pts],
                    color=cmap(layer / max(1, len(layers) - 1)), lw=1)
        null = rec.select("W", "block", "rotation_null_deg")
        if null:
            ax.plot(_epoch_axis(rec, [p[0] for p in null]), [p[1] for p in null], color="grey", ls="--", lw=1,
                    label="permutation null")
            ax.legend(fontsize=7)
        ax.set_title(f"{label} (seed {rec.seed})", fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 92)
    axes.flat[0].set_ylabel("v1 rotation from epoch-1 ref (°)")
    return _save(fig, path)


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


def pca_plot(records: list[RunRecord], path: Path) -> Path:
    """3-D PCA trajectory of W's v1 across layers at the end of training (and at init), per configuration."""
    labels = list(dict.fromkeys(r.label for r in records))
    cols = min(4, len(labels))
    rows = math.ceil(len(labels) / cols)
    fig = plt.figure(figsize=(4 * cols, 4 * rows))
    for i, label in enumerate(labels):
        rec = next(r for r in records if r.label == label)
        ax = fig.add_subplot(rows, cols, i + 1, projection="3d")
        for key, color in (("W v1 init", "grey"), ("W v1 final", "C3")):
            if key in rec.vectors:
                coords, evr = pca_trajectory(np.array(rec.vectors[key], dtype=np.float64))
                ax.plot(*coords.T, "-o", color=color, ms=3,
                        label=f"{key.split()[-1]} (3-PC EVR {evr.sum():.0%})")
        ax.set_title(f"{label} (seed {rec.seed})", fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, path)


def transformer_training_plot(records: list[RunRecord], path: Path) -> Path:
    """Per projection, weight v1 and u1 continuity vs step for every seed, each with its null dashed."""
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.4), squeeze=False, sharey=True)
    for ax, role in zip(axes.flat, PAPER_TABLE2_SPACE, strict=False):
        for space, color in (("v", "tab:blue"), ("u", "tab:orange")):
            for i, rec in enumerate(records):
                pts = rec.select("W", role, "cont", space, 1)
                null = rec.select("W", role, "null_mean", space, 1)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, alpha=0.9 if i == 0 else 0.5,
                        label=f"W {space}1" if i == 0 else None)
                ax.plot([p[0] for p in null], [p[1] for p in null], color=color, ls="--", lw=0.8,
                        label=f"{space}1 null" if i == 0 else None)
        ax.set_title(f"{role} (paper: {PAPER_TABLE2_SPACE[role]}1)")
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    axes.flat[-1].axis("off")
    axes.flat[0].set_ylabel("adjacent-layer |cos|")
    fig.suptitle(f"{records[0].label}: continuity over training")
    return _save(fig, path)


def write_plots(rep: Reproduction, out: str | Path) -> list[Path]:
    """Write the reproduction's PNGs under ``out`` and return their paths."""
    out = Path(out)
    done = [r for r in rep.records if r.rows]
    if not done:
        return []
    if rep.sim == "transformer":
        paths = []
        for spec in rep.specs:
            runs = [r for r in done if r.label == spec.label]
            if runs:
                paths.append(transformer_training_plot(runs, out / f"{slug(spec.label)}_training.png"))
        for result in rep.results:
            path = out / f"{slug(result.record.label)}_seed{result.record.seed}_depth.png"
            write_plot(result.report, path)
            paths.append(path)
        return paths
    floor = rep.floor
    return [
        continuity_plot(done, out / f"{slug(rep.preset)}_continuity.png", floor),
        rotation_plot(done, out / f"{slug(rep.preset)}_rotation.png"),
        pca_plot(done, out / f"{slug(rep.preset)}_pca_v1.png"),
    ]
