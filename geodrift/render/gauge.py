"""The gauge diagnosis (``geodrift scan --full``): a table per layer and a figure across depth.

Each number (nats) locates the checkpoint on one generator's orbit (:mod:`geodrift.gauge.diagnose`), beside the
band trained models span; none is gauge-invariant - they measure where the checkpoint sits in its orbit.
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

NAMES = {"mlp": "Up/Down", "attn_in": "attn in", "mlp_in": "MLP in", "qk": "Q/K", "vo": "V/O", "residual": "basis"}
COLORS = {"mlp": "tab:red", "attn_in": "tab:green", "mlp_in": "tab:orange", "qk": "tab:blue", "vo": "tab:purple",
          "residual": "tab:gray"}


def gauge_grid(diag: GaugeDiagnosis) -> Grid:
    """Per layer each family's value (nats); first the trained band and the margin that flags.

    Example:
        >>> from geodrift.gauge.diagnose import diagnose
        >>> from geodrift.gauge.orbit import GaugeShape, toy_state_dict
        >>> import torch
        >>> s = GaugeShape(1, 2, 1, 4); sd = toy_state_dict(s, 8, 6, 5, torch.Generator().manual_seed(0))
        >>> len(gauge_grid(diagnose([(0, sd)], s, "toy")).rows)
        2
    """
    cols = [Col("layer", "left")] + [Col(NAMES[f]) for f in FAMILIES]
    rows: list[list[Any]] = [["trained"] + [f"{lo:.2f}-{hi:.2f}" for lo, hi in (diag.reference[f] for f in FAMILIES)]]
    for x in diag.layers:
        rows.append([str(x.layer)] + [f"{x.values[f]:.3f}" for f in FAMILIES])
    return Grid("Gauge diagnosis: where each layer sits on each generator's orbit (nats)", cols, rows,
                caption="Not gauge-invariant: these numbers locate the checkpoint in its orbits. Up/Down: spread of "
                        "log(‖Up_j‖/‖Down_j‖) (mlp_scale); attn/MLP in: largest log deviation of a raw reader column's "
                        "norm (fold: SmoothQuant, AWQ); Q/K: spread of log(‖Q_p‖/‖K_p‖) over RoPE pairs (qk_rope); "
                        "V/O: log of the V/O norm beyond its balanced point (vo); basis: spread of the folded "
                        f"readers' log channel norms (rotate: low = no privileged basis). trained: the band of "
                        f"trained models; flagged beyond it by {diag.margin:g}x.")


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
            ax.plot(layers, diag.values(family), color=COLORS[family], marker=".", label=NAMES[family])
            ax.axhline(max(diag.reference[family][1], 1e-4), color=COLORS[family], linestyle="--", linewidth=0.7)
        log_scale(ax)
        ax.set_xlabel("layer")
        ax.set_ylabel("nats")
        flag = "OFF BALANCE: " + ", ".join(diag.flagged_families) if diag.flagged else "balanced"
        ax.set_title(f"Gauge diagnosis — {diag.model}\n(dashed: top of the trained band): {flag}", fontsize=6)
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
