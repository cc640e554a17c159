"""The experts' figure of a mixture-of-experts scan: each expert across depth, and experts within a layer.

Top row, one panel per expert family (Gate, Up, Down): every expert's adjacent-layer ``|cos|`` in the
space the theory predicts (one thin line per expert), the mean over experts of the other space, the
permutation null (mean over experts of each pair's null: a band from its mean to +3 sd) and the random
floor. Bottom row, one panel per family: per layer, the mean ``|cos|`` of experts adjacent in index
order in both spaces, each with its null band and the random floor - no prediction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.ticker import MaxNLocator

from geodrift.continuity import Report, RoleReport
from geodrift.jobs.outputs import experts_plot_path as experts_plot_path
from geodrift.render.experts import experts_by_family
from geodrift.render.figures import (
    RANDOM_LABEL,
    draw_null_band,
    draw_random_floor,
    figure_legend,
    null_label,
    panels,
    save_figure,
    style,
)
from geodrift.render.scan_plot import SPACE_COLORS, SPACE_NAMES
from geodrift.weights import EXPERT_ROLES, ROLE_LABELS, split_across_experts_role


def write_experts_plot(report: Report, path: str | Path, dpi: int = 300) -> Path:
    """Write the experts' figure of ``report`` (:func:`experts_figure`) to ``path``.

    Raises:
        GeodriftError: an unsupported suffix or dpi.
    """
    with style():
        return save_figure(experts_figure(report), path, dpi)


def experts_figure(report: Report) -> Any:
    """The experts' figure of ``report`` (which must hold per-expert roles), a matplotlib Figure: per expert
    family, each expert across depth (top) and the experts of each layer compared (bottom)."""
    families = experts_by_family(report)
    within: dict[str, list[RoleReport]] = {}
    for r in report.across_experts:
        split = split_across_experts_role(r.role)
        if split is not None:
            within.setdefault(split[0], []).append(r)
    order = [f for f in EXPERT_ROLES if f in families]
    with style():
        cols = len(order)
        fig, axes = panels(2 * cols, cols=cols, sharex=False, panel_height=1.5)
        for ax, family in zip(axes[:cols], order, strict=True):
            _depth_panel(ax, family, families[family])
        for ax, family in zip(axes[cols:], order, strict=True):
            _within_panel(ax, family, within.get(family, []))
        axes[0].set_ylabel("|cos| (Eq. 1)")
        axes[cols].set_ylabel("|cos| (Eq. 1)")
        fig.suptitle(f"Experts of {report.origin}, {report.view} weights")
        figure_legend(fig, axes)
        return fig


def _depth_panel(ax: Any, family: str, roles: list[RoleReport]) -> None:
    pred = roles[0].predicted_space or "v"
    other = "u" if pred == "v" else "v"
    x = roles[0].layers[:-1]
    for r in roles:
        ax.plot(r.layers[:-1], r.spaces[pred].vectors[0].per_pair, color=SPACE_COLORS[pred], lw=0.6, alpha=0.6)
    ax.plot([], [], color=SPACE_COLORS[pred], lw=0.6, alpha=0.6, label=f"each expert, {pred}1 (predicted)")
    mean_other = [sum(r.spaces[other].vectors[0].per_pair[i] for r in roles) / len(roles) for i in range(len(x))]
    ax.plot(x, mean_other, color="0.25", ls="-.", marker=".", label="other space (mean over experts)")
    vcs = [r.spaces[pred].vectors[0] for r in roles]
    if all(vc.per_pair_null_mean for vc in vcs):
        null_mean = [sum(vc.per_pair_null_mean[i] for vc in vcs) / len(vcs) for i in range(len(x))]
        null_std = [sum(vc.per_pair_null_std[i] for vc in vcs) / len(vcs) for i in range(len(x))]
        draw_null_band(ax, x, null_mean, null_std, SPACE_COLORS[pred], null_label(f"{pred}1"))
    draw_random_floor(ax, vcs[0].baseline, RANDOM_LABEL)
    held = sum(r.verdict == "holds" for r in roles)
    ax.set_title(f"{ROLE_LABELS[family]}, across depth\npred. {pred}1 · {held}/{len(roles)} hold", fontsize=6.5)
    ax.set_xlabel("layer l (l, l+1)")
    ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _within_panel(ax: Any, family: str, roles: list[RoleReport]) -> None:
    layers = [split_across_experts_role(r.role)[1] for r in roles]  # type: ignore[index]
    for space in ("v", "u"):
        vcs = [r.spaces[space].vectors[0] for r in roles]
        draw_null_band(ax, layers, [v.null_mean for v in vcs], [v.null_std for v in vcs], SPACE_COLORS[space],
                       null_label(f"{space}1"))
        ax.plot(layers, [v.mean for v in vcs], color=SPACE_COLORS[space], marker=".", label=SPACE_NAMES[space])
        draw_random_floor(ax, vcs[0].baseline if vcs else 0.0)
    ax.set_title(f"{ROLE_LABELS[family]}, e vs e+1\nwithin a layer\nno prediction", fontsize=6.5)
    ax.set_xlabel("layer")
    ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
