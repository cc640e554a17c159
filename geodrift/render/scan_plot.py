"""The scan's figure: adjacent-layer |cos| of v1 and u1 across depth, one panel per projection.

Each panel shows both spaces with each pair's own permutation null (a band from its mean to
+3 sd, its mean dashed) and the analytic floor ``sqrt(2/(pi d))`` (dotted; one line per space when their
widths differ). The predicted space's line is thick; a space the view aligns itself (the canonical view's
head/hidden side) is a thin grey line without a null, never a measurement. The panel title names the
projection and the space the theory predicts (first line) and both verdicts (second line; V's as what was
found: ``no frame, no path, as predicted``); the figure's title gives the overall verdict and the view
(``frame 8/8, path 7/8 · SmolLM2 · canonical view``). The legend names every line style and band.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.ticker import MaxNLocator

from geodrift.continuity import Report, RoleReport
from geodrift.gauge.status import ALIGNED
from geodrift.jobs.outputs import trajectory_plot_path as trajectory_plot_path
from geodrift.render.figures import (
    PREDICTED_WIDTH,
    RANDOM_LABEL,
    draw_aligned,
    draw_null_band,
    draw_random_floor,
    figure_legend,
    label_outer,
    null_label,
    panels,
    predicted_proxy,
    save_figure,
    style,
)
from geodrift.render.verdicts import found_phrase
from geodrift.weights import split_expert_role

SPACE_COLORS = {"v": "tab:blue", "u": "tab:orange"}
SPACE_NAMES = {"v": "v1 (input space)", "u": "u1 (output space)"}
# The characters a panel title's line holds at 6.5 pt in a 2-column figure one journal column wide.
TITLE_CHARS = 32


def write_plot(report: Report, path: str | Path, dpi: int = 300, title: str | None = None) -> Path:
    """Write the depth-profile figure of ``report`` (:func:`continuity_figure`) to ``path`` (.png, .pdf or .svg).

    Raises:
        GeodriftError: an unsupported suffix or dpi.
    """
    with style():
        return save_figure(continuity_figure(report, title), path, dpi)


def continuity_figure(report: Report, title: str | None = None) -> Any:
    """The depth-profile figure of ``report`` (a matplotlib Figure): one panel per projection.

    A mixture of experts' per-expert roles are left to ``geodrift.render.experts_plot``.
    """
    roles = [r for r in report.roles if split_expert_role(r.role) is None]
    with style():
        cols = 2
        fig, axes = panels(len(roles), cols=cols, sharex=False)
        for ax, role in zip(axes, roles, strict=True):
            _panel(ax, role)
        label_outer(fig, axes, cols, "layer l (pair l, l+1)", "|cos| (Eq. 1)")
        fig.suptitle(title or figure_title(report))
        figure_legend(fig, axes, extra=_space_proxies(roles)
                      + ([predicted_proxy()] if any(r.predicted_space for r in roles) else []))
        return fig


def _space_proxies(roles: list[RoleReport]) -> list[tuple[Any, str]]:
    # One legend entry per measured space, drawn at the ordinary width (a panel's predicted line is thicker).
    from matplotlib.lines import Line2D

    shown = [x for x in ("v", "u") if any(r.spaces[x].gauge != ALIGNED for r in roles)]
    return [(Line2D([], [], color=SPACE_COLORS[x], marker="."), SPACE_NAMES[x]) for x in shown]


def figure_title(report: Report) -> str:
    """The overall verdict and the view, then the model: ``frame 8/8, path 7/8 · canonical view`` / ``m.gguf``.

    Example:
        >>> from geodrift.continuity import Report
        >>> figure_title(Report("m.gguf", "raw", 8, 20, 0, []))
        'frame 0/0, path 0/0 · raw view\\nm.gguf'
    """
    judged = [r for r in report.roles if r.verdict in ("holds", "fails") and split_expert_role(r.role) is None]
    paths = [r for r in judged if r.path_verdict in ("holds", "fails")]
    verdict = (f"frame {sum(r.verdict == 'holds' for r in judged)}/{len(judged)}, "
               f"path {sum(r.path_verdict == 'holds' for r in paths)}/{len(paths)}")
    return f"{verdict} · {report.view} view\n{report.origin}"


def _panel(ax: Any, role: RoleReport) -> None:
    x = role.layers[:-1]
    floors = set()
    for space in ("v", "u"):
        vc = role.spaces[space].vectors[0]
        if role.spaces[space].gauge == ALIGNED:
            draw_aligned(ax, x, vc.per_pair)
            continue
        color = SPACE_COLORS[space]
        if vc.per_pair_null_mean:
            draw_null_band(ax, x, vc.per_pair_null_mean, vc.per_pair_null_std, color, null_label(f"{space}1"))
        width = PREDICTED_WIDTH if role.predicted_space == space and role.verdict != "no prediction" else None
        ax.plot(x, vc.per_pair, color=color, marker=".", lw=width)  # its legend entry: _space_proxies
        floors.add(round(vc.baseline, 6))
    for i, floor in enumerate(sorted(floors)):
        draw_random_floor(ax, floor, RANDOM_LABEL if i == 0 else None)
    predicted = {"v": "v1", "u": "u1", None: "neither"}[role.predicted_space]
    if role.verdict == "no prediction":
        title = f"{role.label}\nno prediction"
    else:
        found = found_phrase(role)  # up to 46 characters (V's): more than a panel's width holds on one line
        title = f"{role.label} · predicted {predicted}\n" + (found.replace(", ", "\n", 1) if len(found) > TITLE_CHARS
                                                              else found)
    ax.set_title(title, pad=2, fontsize=6.5, linespacing=1.1)
    ax.set_ylim(0, 1.02)
    ax.set_xlim(min(x) - 0.5, max(x) + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def write_trajectory_plot(report: Report, path: str | Path, dpi: int = 300) -> Path:
    """Write :func:`trajectory_figure` to ``path`` (.png, .pdf or .svg).

    Raises:
        GeodriftError: an unsupported suffix or dpi.
    """
    with style():
        return save_figure(trajectory_figure(report), path, dpi)


def trajectory_figure(report: Report) -> Any:
    """App. A.2 as numbers (a matplotlib Figure): per projection, mean |cos| of layers l and l+k against k for
    v1 and u1, each with its permutation-null band and the random floor; the 3-PC explained variance (and its
    random baseline) in the panel title.
    """
    labels = list(dict.fromkeys(t.label for t in report.trajectory))
    aligned = {(r.role, x) for r in report.roles for x, space in r.spaces.items() if space.gauge == ALIGNED}
    with style():
        fig, axes = panels(len(labels), cols=2, sharex=False, panel_height=1.6)
        for ax, label in zip(axes, labels, strict=True):
            evr = []
            for t in (t for t in report.trajectory if t.label == label):
                if (t.role, t.space) in aligned:
                    draw_aligned(ax, t.lags, t.lag_abs_cos)
                    continue
                color = SPACE_COLORS[t.space]
                draw_null_band(ax, t.lags, t.lag_null_mean, t.lag_null_std, color, null_label(f"{t.space}1"))
                ax.plot(t.lags, t.lag_abs_cos, color=color, marker=".", label=SPACE_NAMES[t.space])
                draw_random_floor(ax, t.lag_floor, RANDOM_LABEL)
                evr.append(f"{t.space} {t.evr:.2f}")  # e.g. "v 0.48"
            rand = next(t.evr_random_mean for t in report.trajectory if t.label == label)
            ax.set_title(f"{label}\n3-PC EVR {', '.join(evr)} · rand {rand:.2f}", pad=2, fontsize=6)
            ax.set_ylim(0, 1.02)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        label_outer(fig, axes, 2, "layer distance k", "mean |cos(l, l+k)|")
        fig.suptitle(f"Trajectory shape across depth · {report.view} view\n{report.origin}")
        figure_legend(fig, axes)
        return fig
