"""The forgetting grid's figure: measured forgetting against the best weights-only indicator and against the
Taylor / EWC baseline (every (run, checkpoint) point, with its paired SE), and where the forgetting lives per
layer (single-layer reverts) beside that indicator's per-layer values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from geodrift.render.figures import pyplot, save_figure, style

MARKERS = {0: "o", 1: "s", 2: "^", 3: "D"}


def plot_forgetting(rows: list[dict[str, Any]], best: str, best_label: str, best_floor: float | None,
                    layers: dict[str, tuple[list[float], list[float], list[float]]], path: str | Path,
                    dpi: int = 200) -> Path:
    """Write the figure.

    Args:
        rows: :func:`geodrift.finetune.analysis.points`.
        best, best_label: the indicator of the first panel and its axis label.
        best_floor: a horizontal reference for it (its value for a random update, mean over points), or None.
        layers: run label -> (per-layer recovery, its SE, the indicator's per-layer values), for the third panel.
        path: the file (.png, .pdf, .svg).
    """
    plt = pyplot()
    corpora = sorted({r["corpus"] for r in rows})
    rates = sorted({r["lr"] for r in rows})
    colors = {c: plt.get_cmap("tab10")(i) for i, c in enumerate(corpora)}
    with style():
        fig, axes = plt.subplots(1, 3, figsize=(11.5, 3.4))
        for ax, name, label in ((axes[0], best, best_label), (axes[1], "taylor", "Taylor + EWC prediction (nats)")):
            for r in rows:
                hollow = r["control"]
                ax.errorbar(r[name], r["forgetting"], yerr=r["forgetting_se"], fmt=MARKERS[rates.index(r["lr"]) % 4],
                            color=colors[r["corpus"]], mfc="white" if hollow else colors[r["corpus"]], ms=4, lw=0.8)
            ax.axhline(0, color="grey", lw=0.6)
            ax.set_xlabel(label)
            ax.set_ylabel("forgetting: Δ held-out NLL (nats)")
        if best_floor is not None:
            axes[0].axvline(best_floor, color="grey", ls=":", lw=0.8, label="a random update (mean)")
        for c in corpora:
            axes[0].plot([], [], "o", color=colors[c], label=c)
        for lr in rates:
            axes[0].plot([], [], MARKERS[rates.index(lr) % 4], color="black", mfc="white", label=f"lr {lr:g}")
        axes[0].legend(fontsize=6, loc="best")
        ax = axes[2]
        for i, (label, (recovery, se, values)) in enumerate(layers.items()):
            x = list(range(len(recovery)))
            color = plt.get_cmap("tab10")(i)
            ax.errorbar(x, recovery, yerr=se, color=color, lw=0.8, ms=2, fmt="-o", label=f"{label}: revert recovers")
            top = max(values) or 1.0
            scale = max(abs(v) for v in recovery) / top if top else 1.0
            ax.plot(x, [v * scale for v in values], ls="--", color=color, lw=0.8, label=f"{best} (scaled)")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xlabel("layer reverted to the base")
        ax.set_ylabel("probe NLL recovered (nats)")
        if layers:
            ax.legend(fontsize=5, loc="best")
        else:
            ax.text(0.5, 0.5, "no single-layer reverts in these runs", ha="center", va="center",
                    transform=ax.transAxes, fontsize=7)
        fig.tight_layout()
        return save_figure(fig, path, dpi)
