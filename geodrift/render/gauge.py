"""The gauge diagnosis (``geodrift scan --full``): a table per layer and a figure across depth.

Each number is the spread (standard deviation, nats) of a family of log-imbalances
(:mod:`geodrift.gauge.diagnose`), beside a fresh initialisation's of the same shape; none is
gauge-invariant - they measure where the checkpoint sits in its orbit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from geodrift.gauge.diagnose import FAMILIES, GaugeDiagnosis
from geodrift.jobs.outputs import gauge_plot_path as gauge_plot_path
from geodrift.render import console, lit
from geodrift.render.figures import log_scale, save_figure, style
from geodrift.render.layout import Col, Grid, print_grid

NAMES = {"mlp": "Up/Down", "mlp_norm": "MLP g/W", "attn_norm": "attn g/W", "qk": "Q/K",
         "vo_log": "V/O"}
COLORS = {"mlp": "tab:red", "mlp_norm": "tab:orange", "attn_norm": "tab:green", "qk": "tab:blue",
          "vo_log": "tab:purple"}


def gauge_grid(diag: GaugeDiagnosis) -> Grid:
    """Per layer, each family's spread (nats) and the V/O Gram imbalance; the fresh initialisation first.

    Example:
        >>> from geodrift.gauge.diagnose import diagnose
        >>> from geodrift.gauge.orbit import GaugeShape, toy_state_dict
        >>> import torch
        >>> s = GaugeShape(1, 2, 1, 4); sd = toy_state_dict(s, 8, 6, 5, torch.Generator().manual_seed(0))
        >>> len(gauge_grid(diagnose([(0, sd)], s, 8, 6, "toy")).rows)
        2
    """
    cols = [Col("layer", "left")] + [Col(NAMES[f]) for f in FAMILIES] + [Col("Gram"), Col("×init")]
    ref = diag.reference
    rows: list[list[Any]] = [["init"] + [f"{ref.spreads[f].std:.3f}" for f in FAMILIES]
                             + [f"{ref.vo_gram:.2f}", "1.0"]]
    for x, ratio in zip(diag.layers, diag.ratios("mlp"), strict=True):
        rows.append([str(x.layer)] + [f"{x.spreads[f].std:.3f}" for f in FAMILIES]
                    + [f"{x.vo_gram:.2f}", f"{ratio:.1f}"])
    return Grid("Gauge diagnosis: spread of log-imbalances (nats; 0 = every unit at its balanced point)", cols, rows,
                caption="Not gauge-invariant: these numbers locate the checkpoint in its orbit. Up/Down: "
                        "log(‖Up_j‖/‖Down_j‖) over hidden units; g/W: log(|g_i|/‖W[:,i]‖) over channels; "
                        "Q/K: log(‖Q_p‖/‖K_p‖) over RoPE pairs; V/O: log(‖V‖/‖O‖) over KV heads, and the "
                        "relative V/O Gram imbalance (Gram); ×init: Up/Down over the fresh initialisation (init).")


def render_gauge(diag: GaugeDiagnosis | str, wide: bool = False, then: str | None = None) -> None:
    """Print the diagnosis table and its one-line summary (or the note saying why there is none), then
    ``then`` in bold (the scan's summary line, which stays last)."""
    if isinstance(diag, str):
        console.print(Text.assemble(lit("note:", "yellow"), " ", lit(diag)))
    else:
        print_grid(gauge_grid(diag), wide=wide)
        console.print(lit(diag.summary(), "bold" if diag.flagged else ""))
    if then is not None:
        console.print(lit(then, "bold"))  # wrapped at the terminal width, as render_scan prints it


def gauge_figure(diag: GaugeDiagnosis) -> Any:
    """Each family's spread across depth (solid) beside the fresh initialisation's (dashed), log scale."""
    from geodrift.render.figures import pyplot

    plt = pyplot()
    with style():
        fig, ax = plt.subplots(figsize=(3.4, 2.4))
        layers = [x.layer for x in diag.layers]
        for family in FAMILIES:
            ax.plot(layers, diag.spread(family), color=COLORS[family], marker=".", label=NAMES[family])
            ax.axhline(max(diag.reference.spreads[family].std, 1e-4), color=COLORS[family], linestyle="--",
                       linewidth=0.7)
        log_scale(ax)
        ax.set_xlabel("layer")
        ax.set_ylabel("spread of log-imbalance (nats)")
        flag = "OFF BALANCE" if diag.flagged else "balanced"
        ax.set_title(f"Gauge diagnosis — {diag.model}\nUp/Down spread {diag.mlp_median_ratio:.1f}× fresh init "
                     f"(median; dashed: fresh init): {flag}", fontsize=6)
        ax.legend(fontsize=5, ncol=2)
        fig.tight_layout()
        return fig


def write_gauge_plot(diag: GaugeDiagnosis, path: str | Path, dpi: int = 300) -> Path:
    """Write :func:`gauge_figure` to ``path`` (.png, .pdf or .svg).

    Raises:
        GeodriftError: an unsupported suffix or dpi.
    """
    with style():
        return save_figure(gauge_figure(diag), path, dpi)
