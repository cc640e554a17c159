"""PNG plots of simulator runs: continuity over training, per-layer rotation, 3-D PCA of v1 across layers."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from geodrift.atomic import write_with  # noqa: E402
from geodrift.sim.record import RunRecord, slug  # noqa: E402


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
            for source, color in (("W", "C0"), ("G", "C1"), ("Gcum", "C2")):
                pairs = rec.select(source, "cont", "v", 1)
                if pairs:
                    ax.plot(_epoch_axis(rec, [p[0] for p in pairs]), [p[1] for p in pairs], color=color,
                            alpha=0.8, label=f"{source} v1" if rec.seed == records[0].seed else None)
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
        rows = [r for r in rec.rows if r[2] == "W" and r[3] == "rotation_deg" and r[6] is not None]
        layers = sorted({r[6] for r in rows})
        cmap = plt.get_cmap("viridis")
        for layer in layers:
            pts = [(r[0], r[7]) for r in rows if r[6] == layer]
            ax.plot(_epoch_axis(rec, [p[0] for p in pts]), [p[1] for p in pts],
                    color=cmap(layer / max(1, len(layers) - 1)), lw=1)
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


def write_plots(records: list[RunRecord], out: str | Path, preset: str, floor: float) -> list[Path]:
    """Write the three PNGs under ``out`` and return their paths."""
    out = Path(out)
    done = [r for r in records if r.rows]
    if not done:
        return []
    return [
        continuity_plot(done, out / f"{slug(preset)}_continuity.png", floor),
        rotation_plot(done, out / f"{slug(preset)}_rotation.png"),
        pca_plot(done, out / f"{slug(preset)}_pca_v1.png"),
    ]
