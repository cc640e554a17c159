"""Render a continuity Report in the terminal: brief by default, every table with ``full``.

Brief (the default of ``geodrift scan``, at most 25 lines at 80 columns on the embedded model): one row per
projection with its v1/u1 continuity, each beside its permutation-null mean, and its two verdicts on the same
row; a caption; one line on the view (what ``aligned`` means, where the paper's raw numbers are); a pointer to
``--full`` and ``geodrift explain``; the summary line. Full (``--full``): the per-projection table with both
floors and σ²-WA, the depth profiles, the k = 1..K table, the trajectory shape, each projection's criterion
and the gauge text.

Every table is a :class:`~geodrift.render.layout.Grid`, so at 80 columns or in a pipe it is split
by columns rather than truncated (``--wide`` prints each whole). Files (CSV) are written by
``geodrift.render.files``, figures by ``geodrift.render.scan_plot``.
"""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text

from geodrift.continuity import Report, RoleReport, VectorContinuity
from geodrift.continuity.verdicts import (
    FRAME_NOTE,
    NEITHER_PATH_CRITERION,
    PATH_CRITERION,
    depth_path,
    is_continuity,
)
from geodrift.gauge.status import ALIGNED, UNKNOWN
from geodrift.render import console, fmt, fmt_z, lit, plural, sparkline
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.render.verdicts import found_phrase, found_words

_VERDICT_STYLE = {"holds": "bold green", "fails": "bold red", "no prediction": "dim", "n/a": "dim",
                  "none": "bold green", "found": "bold red"}  # V (predicted neither): none found, as predicted


def _cell(vc: VectorContinuity) -> str:
    # Line 1: mean |cos| and z; line 2: median; line 3-4: the two floors.
    return (f"[bold]{fmt(vc.mean)}[/bold] z={_z(vc.z)}\n[dim]median {fmt(vc.median)}\n"
            f"null {fmt(vc.null_mean)}±{fmt(vc.null_std)}\nrandom {fmt(vc.baseline)}[/dim]")


def _z(z: float) -> str:
    return fmt_z(z)


def _p(p: float) -> str:
    return "—" if p != p else f"{p:.2g}"


def _predicted(role: RoleReport) -> str:
    if role.verdict == "no prediction":
        return "—"
    return {"v": "v (input)", "u": "u (output)", None: "neither"}[role.predicted_space]


def _null_short(report: Report) -> str:
    # the brief table's words for its null: the permutation null's draws, and the rotation null where it is used
    draws = f"{report.null_draws} permutation{plural(report.null_draws)}"
    if not any(s.null == "rotation" for r in report.roles for s in r.spaces.values()):
        return draws
    return f"residual side: random rotations, analytic; head/hidden side: {draws}"


def _null_words(report: Report) -> str:
    # which null the z and brackets are against (geodrift.gauge.status.null_kind)
    permutation = f"the permutation null ({report.null_draws} draws, seed {report.seed})"
    if not any(s.null == "rotation" for r in report.roles for s in r.spaces.values()):
        return permutation
    return (f"its null: the rotation null on the residual side (random directions, analytic: no basis), {permutation} "
            "on the head/hidden side")


def scan_grid(report: Report, title: str | None = None) -> Grid:
    """The main table: one row per projection, v1 and u1 continuity with both floors and both verdicts."""
    grid = Grid(
        title or scan_title(report),
        [Col("Proj", "left", style="bold"), Col("shape · L", "left"), Col("predicted", "left"),
         Col("v1 (input)"), Col("u1 (output)"), Col("σ²-WA v"), Col("σ²-WA u"), Col("verdict", "left")],
        caption=(
            f"v1/u1: mean |cos| of adjacent layers (Eq. 1), z against {_null_words(report)}; random = sqrt(2/(πd)). "
            "σ²-WA: Eq. 2 (from the top-k: lower ≤ upper bound; exact with --full-spectrum), null mean in brackets. "
            "verdict: shared frame (Eq. 1 in the predicted space, the paper's claim) and depth path (nearby layers "
            "agree more than far ones); criteria below the tables."
        ),
        lines=True,
    )
    for r in report.roles:
        v1, u1 = (ALIGNED_CELL if r.spaces[s].gauge == ALIGNED else _cell(r.spaces[s].vectors[0]) for s in ("v", "u"))
        grid.add(lit(r.label), f"{r.shape[0]}×{r.shape[1]}\n{len(r.layers)} layers", _predicted(r), v1, u1,
                 _wa(r, "v"), _wa(r, "u"), _verdicts(r))
    return grid


def brief_grid(report: Report) -> Grid:
    """One row per projection: v1 and u1 |cos| with z and null mean, then its frame and path verdicts.

    The predicted space's cell is bold; a projection without a prediction shows "—" for both verdicts.

    Args:
        report: a scan's report (per-expert roles are rendered apart, see ``render_scan``).

    Returns:
        A 6-column :class:`Grid` (Proj, pred, v1, u1, frame, path), 76 cells wide with 3-digit z.

    Example:
        >>> from geodrift.continuity import Report
        >>> [c.header for c in brief_grid(Report("m", "raw", 8, 20, 0, [])).columns]
        ['Proj', 'pred', 'v1 |cos| (null)', 'u1 |cos| (null)', 'frame', 'path']
    """
    grid = Grid(
        scan_title(report),
        [Col("Proj", "left", style="bold"), Col("pred", "left"), Col("v1 |cos| (null)"), Col("u1 |cos| (null)"),
         Col("frame", "left"), Col("path", "left")],
        caption=(
            f"|cos| of adjacent layers' v1/u1 (Eq. 1), z and (mean) of its null ({_null_short(report)}); "
            "bold: predicted."
            + (" V: none = none found, as predicted." if any(
                r.predicted_space is None and r.verdict != "no prediction" for r in report.roles) else "")
            + (" —: the theory makes no prediction for this projection." if any(
                r.verdict == "no prediction" for r in report.roles) else "")
        ),
    )
    for r in report.roles:
        judged = r.verdict != "no prediction"
        cells = [ALIGNED_CELL if r.spaces[s].gauge == ALIGNED
                 else _brief_cell(r.spaces[s].vectors[0], bold=judged and r.predicted_space == s) for s in ("v", "u")]
        frame, path = found_words(r)
        grid.add(lit(r.label), {"v": "v", "u": "u", None: "none"}[r.predicted_space] if judged else "—", *cells,
                 _styled(frame) if judged else "—", _styled(path) if judged else "—")
    return grid


# A head/hidden-side space of the canonical view: aligned by construction, its numbers are not continuity
# (they stay in --json and the CSV, labelled "aligned").
ALIGNED_CELL = "[dim]aligned[/dim]"


def scan_title(report: Report) -> str:
    """The scan table's title: the model and the view its numbers are in.

    Example:
        >>> from geodrift.continuity import Report
        >>> scan_title(Report("m.gguf", "canonical", 8, 20, 0, []))
        'Geometric continuity — m.gguf, canonical view'
    """
    return f"Geometric continuity — {report.origin}, {report.view} view"


def view_line(report: Report) -> str | None:
    """The brief output's one line on the view: what ``aligned`` means and where the paper's raw numbers are
    (None where no space's gauge status is known: nothing to say).

    Example:
        >>> from geodrift.continuity import Report
        >>> view_line(Report("m", "raw", 8, 20, 0, [])) is None
        True
    """
    if not report.roles or all(space.gauge == UNKNOWN for r in report.roles for space in r.spaces.values()):
        return None
    if report.view == "canonical":
        return "aligned: ordered by the view itself, not measured; paper's numbers: --view raw"
    what = "raw view (the paper's metric)" if report.view == "raw" else f"{report.view} view"
    return f"{what}: exact gauges move it; --view canonical: invariant"


def gauge_line(report: Report) -> str:
    """Whether the report's numbers are gauge-invariant (``--full``, under the criteria; docs/verdicts.md).

    Example:
        >>> from geodrift.continuity import Report
        >>> gauge_line(Report("m", "raw", 8, 20, 0, [])).startswith("gauge: raw")
        True
    """
    if report.view == "canonical":
        return ("gauge: canonical view (the default where the gauge group is derived): every number shown is "
                "invariant under the network's exact reparametrisations; aligned: a head/hidden-side space, aligned "
                "by the canonical ordering - not continuity, not judged; the paper's metric is --view raw")
    return (f"gauge: {report.view} numbers move under the network's exact reparametrisations (the --json field "
            "moved_by names them per space); the canonical view (the default where geodrift has derived the "
            "gauge group) gives numbers and verdicts they leave unchanged")


def _brief_cell(vc: VectorContinuity, bold: bool) -> str:
    number = f"[bold]{fmt(vc.mean)}[/bold]" if bold else fmt(vc.mean)
    return f"{number} z={_z(vc.z)} [dim]({fmt(vc.null_mean)})[/dim]"


def _styled(verdict: str) -> str:
    return f"[{_VERDICT_STYLE.get(verdict, '')}]{escape(verdict)}[/]"


def _verdicts(r: RoleReport) -> str:
    if r.verdict == "no prediction":
        return _styled(r.verdict)
    frame, path = found_words(r)
    return f"frame {_styled(frame)}\npath {_styled(path)}"


def _wa(r: RoleReport, space: str) -> str:
    s = r.spaces[space]
    if s.gauge == ALIGNED:
        return ALIGNED_CELL
    bound = "" if s.sigma2_wa_upper - s.sigma2_wa < 5e-4 else f"\n≤ {fmt(s.sigma2_wa_upper)}"
    return f"{fmt(s.sigma2_wa)}{bound}\n[dim]({fmt(s.sigma2_null_mean)})[/dim]"


def profile_grid(report: Report) -> Grid:
    """Per-pair |cos| of v1 and u1 across depth as sparklines (one character per adjacent pair)."""
    grid = Grid("Depth profile of v1 and u1: |cos(layer l, l+1)| per adjacent pair (▁ = 0, █ = 1)",
                [Col("Proj", "left", style="bold"), Col("v1", "left"), Col("u1", "left")])
    for r in report.roles:
        grid.add(lit(r.label), *(ALIGNED_CELL if r.spaces[x].gauge == ALIGNED else sparkline(r.spaces[x].vectors[0].per_pair)
                                 for x in ("v", "u")))
    return grid


def k_grid(report: Report) -> Grid:
    """Continuity of v_k and u_k for k = 1..K, each with its permutation-null mean."""
    k = max((r.k for r in report.roles), default=1)
    grid = Grid("Continuity by singular-vector index k (mean |cos|, null mean in brackets)",
                [Col("Proj", "left", style="bold"), Col("space", "left")]
                + [Col(f"k={j}") for j in range(1, k + 1)] + [Col("top-k subspace (random)")], keys=2)
    for r in report.roles:
        for s in r.spaces.values():
            cells = [f"{fmt(vc.mean)} [dim]({fmt(vc.null_mean)})[/dim]" for vc in s.vectors]
            cells += [""] * (k - len(cells))
            grid.add(lit(r.label), f"{s.space} {ALIGNED_CELL}" if s.gauge == ALIGNED else s.space, *cells,
                     f"{fmt(s.subspace_overlap)} [dim]({fmt(s.subspace_baseline)})[/dim]")
    return grid


def summary_line(report: Report) -> str:
    """One line: how many frame and path predictions hold, on what, and where that is continuity.

    E.g. ``frame 8/8, path 8/8 predictions hold on X, raw weights — continuity (frame and path) in Q, K, O,
    Gate, Up, Down, OV; V (neither predicted): no frame, no path, as predicted``. "Continuity" names only
    the projections whose frame and path both hold; the others are listed by their two verdicts (V's as
    what was found, :func:`~geodrift.render.verdicts.found_phrase`). Printed wrapped to the terminal.
    """
    judged = [r for r in report.roles if r.verdict in ("holds", "fails")]
    paths = [r for r in judged if r.path_verdict in ("holds", "fails")]
    head = (f"frame {sum(r.verdict == 'holds' for r in judged)}/{len(judged)}, path "
            f"{sum(r.path_verdict == 'holds' for r in paths)}/{len(paths)} predictions hold on {report.origin}, "
            f"{report.view} view" + (" (gauge-invariant)" if report.view == "canonical" else ""))
    groups: dict[str, list[str]] = {}
    for r in judged:
        if is_continuity(r):
            key = "continuity (frame and path) in"
        elif r.predicted_space is None:
            key = f"{r.label} (neither predicted): {found_phrase(r)}"
            groups[key] = []
            continue
        else:
            key = f"frame {r.verdict}, path {r.path_verdict}:"
        groups.setdefault(key, []).append(r.label)
    parts = [f"{key} {', '.join(labels)}" if labels else key for key, labels in groups.items()]
    return head + (" — " + "; ".join(parts) if parts else "")


def criteria_lines(report: Report) -> list[str]:
    """Each projection's two verdicts with the frame criterion, then the depth-path criterion once (``--full``)."""
    judged = [r for r in report.roles if r.verdict != "no prediction"]
    lines = [f"{r.label}: {found_phrase(r)} — frame criterion: {r.criterion}" for r in judged]
    if any(r.predicted_space is not None and r.verdict != "no prediction" for r in report.roles):
        lines += [f"frame: {FRAME_NOTE}", f"path criterion: {PATH_CRITERION}"]
    if any(r.role == "attn_v" and r.predicted_space is None for r in report.roles):
        lines.append(f"V's path criterion: {NEITHER_PATH_CRITERION}")
    return lines


FULL_HINT = "--full: every table and criterion · geodrift explain: what each verdict means"


def render_scan(report: Report, full: bool = False, wide: bool = False, summary: bool = True) -> None:
    """Print the scan report to the terminal (tables reflowed to fit unless ``wide``), then its summary line.

    Brief (default): :func:`brief_grid`, :func:`view_line`, a pointer to ``--full`` and ``geodrift explain``.
    ``full``: the per-projection table, depth profiles, k = 1..K and trajectory tables, each projection's
    criterion, the gauge text. A mixture of experts' per-expert roles get tables of their own
    (``geodrift.render.experts``).
    """
    from geodrift.render.experts import render_experts, without_experts

    report, whole = without_experts(report), report
    if full:
        print_grid(scan_grid(report), wide=wide)
        print_grid(profile_grid(report), wide=wide)
        print_grid(k_grid(report), wide=wide)
        if report.trajectory:
            print_grid(trajectory_grid(report), wide=wide)
        for line in criteria_lines(report):
            console.print(lit(line, "dim"))
        if view_line(report) is not None:
            console.print(lit(gauge_line(report), "dim"))
    else:
        print_grid(brief_grid(report), wide=wide)
        if (view := view_line(report)) is not None:
            console.print(lit(view, "dim"))
    render_experts(whole, detail=full, wide=wide)
    if not full:
        console.print(lit(FULL_HINT, "dim"))
    for note in report.notes:
        console.print(Text.assemble(lit("note:", "yellow"), " ", lit(note)))
    if summary:
        console.print(lit(summary_line(report), "bold"))  # wrapped between words at the terminal's width


def trajectory_grid(report: Report) -> Grid:
    """App. A.2: 3-PC explained variance of v1/u1 across layers and the |cos| decay with layer distance, with floors."""
    shown = [k for k in (1, 2, 4, 8, 16) if any(k in t.lags for t in report.trajectory)]
    grid = Grid(
        "Trajectory shape across depth (App. A.2)",
        [Col("Proj", "left", style="bold"), Col("space", "left"), Col("3-PC EVR"), Col("random"), Col("perm. null")]
        + [Col(f"|cos| lag {k}") for k in shown] + [Col("layer-order null (z, p)"), Col("path")],
        keys=2,
        caption=("3-PC EVR: explained-variance ratio of the first 3 principal components of the L2-normalised, "
                 "sign-aligned, centred vectors of all layers (> 0.5: a low-dimensional path); random: random unit "
                 "vectors of the same dimension and count; perm. null: each layer's coordinates permuted (mean ± std, "
                 f"{report.trajectory[0].draws if report.trajectory else 0} draws). |cos| lag k: mean |cos(x_l, x_l+k)| "
                 "with its permutation-null mean in brackets; random floor sqrt(2/(πd)) as in the main table. "
                 "layer-order null: lag-1 |cos| of the same vectors with the layers in random order, and the z of "
                 "the observed lag 1 against it (high: nearby layers agree more than far ones; ≈ 0: a frame every "
                 "layer shares) and p, the share of layer orders that reach it (every order up to 8 layers, else "
                 "random ones until 100 reach it, at most 200,000). path: whether this space shows a depth path (path criterion below)."),
    )
    aligned = {(r.role, x) for r in report.roles for x, space in r.spaces.items() if space.gauge == ALIGNED}
    for t in report.trajectory:
        lag_cells = []
        for k in shown:
            if k in t.lags:
                i = t.lags.index(k)
                lag_cells.append(f"{fmt(t.lag_abs_cos[i])} [dim]({fmt(t.lag_null_mean[i])})[/dim]")
            else:
                lag_cells.append("—")
        grid.add(lit(t.label), f"{t.space} {ALIGNED_CELL}" if (t.role, t.space) in aligned else t.space,
                 f"[bold]{fmt(t.evr)}[/bold]", f"{fmt(t.evr_random_mean)}±{fmt(t.evr_random_std)}",
                 f"{fmt(t.evr_null_mean)}±{fmt(t.evr_null_std)}", *lag_cells,
                 f"{fmt(t.order_null_mean)}±{fmt(t.order_null_std)} ({_z(t.order_z)}, p {_p(t.order_p)})",
                 {True: "yes", False: "no", None: "—"}[depth_path(t)])
    return grid
