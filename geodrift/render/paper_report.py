"""The self-contained report of ``geodrift reproduce``: one Markdown file, its PNG figures, and the JSON.

``write_report(rep, folder)`` writes ``folder/report.md`` (the stamp of :mod:`geodrift.io.provenance`, then
every claim with its verdict and criterion, the paper's value beside ours, the command and wall time
behind each section), ``folder/figures/*.png`` (every similarity plot with its permutation null and
random floor) and ``folder/report.json`` (every section's full result, the stamp, and the list of files
written). Rewriting a report removes the figures the previous one listed and this one does not write,
so the folder never mixes two runs; a ``report.md`` that geodrift did not write is never replaced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from geodrift.compress.prune import PruneResult
from geodrift.compress.share_run import ShareResult
from geodrift.continuity import Report, Stat
from geodrift.io.atomic import document, write_json, write_text
from geodrift.io.provenance import check_results_path, results_markdown
from geodrift.prove.runner import ProveReport
from geodrift.render import plural
from geodrift.render.layout import grid_markdown
from geodrift.reproduction import PaperReproduction, Section, ViewComparison
from geodrift.sim.reference import PAPER_TABLE2
from geodrift.sim.reproduce import COLUMN_TITLES, Reproduction
from geodrift.weights import ROLE_LABELS


def write_report(rep: PaperReproduction, folder: str | Path, dpi: int = 150) -> list[Path]:
    """Write report.md, report.json and the figures under ``folder``; returns the files written.

    Raises:
        GeodriftError: ``folder/report.md`` exists and geodrift did not write it; a file cannot be written.
    """
    folder = Path(folder)
    md = check_results_path(folder / "report.md")
    js = folder / "report.json"
    previous = _listed_files(js)
    figures = folder / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    links: dict[str, list[Path]] = {}
    for s in rep.sections:
        links[s.key] = _figures(s, figures, dpi)
        written += links[s.key]
    lines = _preamble(rep) + _claims(rep) + [""]
    for s in rep.sections:
        lines += _section(s, links[s.key], folder)
    write_text(md, results_markdown("geodrift reproduction of arXiv 2605.04971", "\n".join(lines), rep.stamp))
    files = [p.relative_to(folder).as_posix() for p in [md, js, *written]]
    write_json(js, document("paper_reproduction", {
        "mode": rep.mode, "seconds": rep.seconds, "versions": rep.stamp["versions"],
        "git_revision": rep.stamp["git"]["commit"], "machine": _machine(rep.stamp), "stamp": rep.stamp,
        "files": files,
        "sections": [{"key": s.key, "title": s.title, "kind": s.kind, "command": s.command, "note": s.note,
                      "seconds": s.seconds, "runs": s.runs,
                      "result": s.result.to_dict() if s.result is not None else None} for s in rep.sections]}))
    from geodrift.io.manifest import Manifests, managed_root

    for stale in previous - set(files):  # the predecessor's figures - those the manifest proves geodrift's
        path = folder / stale
        if stale.startswith("figures/") and path.suffix == ".png" and Manifests().owns(path, managed_root(path)):
            path.unlink()
    return [md, js, *written]


def reproduce_summary(rep: PaperReproduction, report: Path) -> str:
    """The last line of ``geodrift reproduce``: the scan's predictions that hold (raw, and canonical when the views
    section ran), the simulator and compression claims that hold, the simulator sections and the wall time."""
    sims = [s for s in rep.sections if s.kind == "sim"]
    return (f"geodrift reproduce ({rep.mode}): {_scan_holding(rep.sections)}{_holding(rep.sections, 'sim')} simulator "
            f"claims hold, {_holding(rep.sections, 'compress')} compression claims; {len(sims)} simulator sections in "
            f"{rep.seconds / 60:.1f} min; report {report}")


def _scan_holding(sections: list[Section]) -> str:
    # The embedded scan's two verdicts per projection: shared frame (Eq. 1) and depth path.
    roles = [r for s in sections if s.kind == "scan" and isinstance(s.result, Report) for r in s.result.roles
             if r.verdict in ("holds", "fails")]
    if not roles:
        return ""
    paths = [r for r in roles if r.path_verdict in ("holds", "fails")]
    # the gauge-invariant verdicts: the views section's canonical column
    cells = [c for s in sections if s.kind == "views" and isinstance(s.result, ViewComparison) for row in s.result.rows
             if (c := row.cells.get("canonical")) is not None]
    frames = [c for c in cells if c.verdict in ("holds", "fails")]
    walks = [c for c in cells if c.path_verdict in ("holds", "fails")]
    canonical = (f" (canonical, gauge-invariant: frame {sum(c.verdict == 'holds' for c in frames)}/{len(frames)}, "
                 f"path {sum(c.path_verdict == 'holds' for c in walks)}/{len(walks)})") if cells else ""
    return (f"scan: frame {sum(r.verdict == 'holds' for r in roles)}/{len(roles)}, path "
            f"{sum(r.path_verdict == 'holds' for r in paths)}/{len(paths)} predictions hold{canonical}; ")


def _holding(sections: list[Section], kind: str) -> str:
    verdicts = [v for s in sections if s.kind == kind and isinstance(s.result, (Reproduction, PruneResult, ShareResult))
                for v in s.result.verdicts]
    return f"{sum(v.verdict == 'holds' for v in verdicts)}/{len(verdicts)}"


def _listed_files(js: Path) -> set[str]:
    # The files the previous report in this folder wrote (its report.json), or none.
    try:
        doc = json.loads(js.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(doc, dict) or doc.get("kind") != "paper_reproduction":
        return set()
    return {f for f in doc.get("files", []) if isinstance(f, str) and ".." not in Path(f).parts}


def _machine(stamp: dict[str, Any]) -> str:
    return f"{stamp['cpu']['machine']}, {stamp['cpu']['model']}; " + "; ".join(map(str, stamp["extra"].values()))


def _figures(s: Section, figures: Path, dpi: int) -> list[Path]:
    if isinstance(s.result, Reproduction):
        from geodrift.render.sim_plots import write_plots

        return write_plots(s.result, figures / f"{s.key}.png", dpi)
    if isinstance(s.result, Report):
        from geodrift.render.scan_plot import write_plot

        return [write_plot(s.result, figures / "scan.png", dpi)]
    if isinstance(s.result, ProveReport):
        from geodrift.render.proofs import write_proofs_plot

        path = write_proofs_plot(s.result, figures / "proofs.png", dpi)
        return [path] if path is not None else []
    if isinstance(s.result, PruneResult):
        from geodrift.render.compress import plot_prune

        return [plot_prune(s.result, figures / f"{s.key}.png", dpi)]
    if isinstance(s.result, ShareResult):
        from geodrift.render.compress_share import plot_share

        return [plot_share(s.result, figures / f"{s.key}.png", dpi)]
    return []


def _preamble(rep: PaperReproduction) -> list[str]:
    return [f"Mode `{rep.mode}`. This file is generated: re-run the command above to regenerate it (finished "
            "runs under `runs/` are reused with `--resume` instead of `--force`).", "",
            "The paper's values are a reference column only: no criterion, default or tolerance uses them. "
            "Every similarity is shown with its noise floor (permutation null and/or the random floor "
            "√(2/(π d))).", ""]


def _wall(s: Section) -> str:
    if s.seconds is None:
        return "not run"
    text = f"{s.seconds:.1f} s" if s.seconds < 120 else f"{s.seconds / 60:.1f} min"
    return f"{text}, summed over its {s.runs} run{plural(s.runs)}" if s.kind == "sim" else text


def _claims(rep: PaperReproduction) -> list[str]:
    lines = ["## Claims", "", "| section | claim | criterion | geodrift measured | verdict |", "|---|---|---|---|---|"]
    for s in rep.sections:
        for claim, criterion, measured, verdict in _verdicts(s):
            lines.append(f"| [{s.key}](#{s.key}) | {_md(claim)} | {_md(criterion)} | {_md(measured)} | **{verdict}** |")
    return lines


def _verdicts(s: Section) -> list[tuple[str, str, str, str]]:
    if isinstance(s.result, Reproduction | PruneResult | ShareResult):
        return [(v.claim, v.criterion, v.measured, v.verdict) for v in s.result.verdicts]
    if isinstance(s.result, Report):
        out = []
        shapes = {(t.role, t.space): t for t in s.result.trajectory}
        for r in s.result.roles:
            v, u = r.spaces["v"].vectors[0], r.spaces["u"].vectors[0]
            where = f"{r.predicted_space or 'neither'} space"
            out.append((f"{r.label}: a frame shared across layers in {where} (Eq. 1, the paper's claim)", r.criterion,
                        f"v1 {v.mean:.3f} (null {v.null_mean:.3f}), u1 {u.mean:.3f} (null {u.null_mean:.3f})",
                        r.verdict))
            order = ", ".join(f"{space}1 layer-order z {t.order_z:.1f} (p {t.order_p:.2g})" for space in ("v", "u")
                              if (t := shapes.get((r.role, space))) is not None)
            out.append((f"{r.label}: a depth path in {where}", r.path_criterion, order or "not measured",
                        r.path_verdict))
        return out
    if isinstance(s.result, ViewComparison):
        return _view_claims(s.result)
    if isinstance(s.result, ProveReport):
        return [(c.title, f"symbolic ({c.method}) and numeric cross-check", c.numeric_summary or c.reason, c.status)
                for c in s.result.results]
    return [(s.title, "—", s.note, "not run")]


def _section(s: Section, figures: list[Path], folder: Path) -> list[str]:
    lines = [f'<a id="{s.key}"></a>', f"## {s.title}", "", f"Command: `{s.command}`", "",
             f"Wall time: {_wall(s)}", ""]
    if s.note:
        lines += [f"*{_md(s.note)}*", ""]
    if isinstance(s.result, Reproduction):
        lines += _sim_table(s.result)
    elif isinstance(s.result, Report):
        lines += _scan_table(s.result)
    elif isinstance(s.result, ViewComparison):
        lines += _views_table(s.result)
    elif isinstance(s.result, PruneResult | ShareResult):
        lines += _compress_tables(s.result)
    lines += [f"![{s.key}]({p.relative_to(folder).as_posix()})" for p in figures]
    return [*lines, ""]


def _cell(stat: Stat | None, paper: Any) -> str:
    ours = "—" if stat is None or stat.n == 0 else f"{stat.mean:.3f}" + (f" ± {stat.std:.3f}" if stat.std == stat.std else "")
    if paper is None:
        return ours
    return f"{ours} (paper {paper if isinstance(paper, str) else f'{paper:.3f}'})"


def _sim_table(rep: Reproduction) -> list[str]:
    cols = list(rep.columns)
    lines = [f"{len(rep.seeds)} seed{plural(len(rep.seeds))}: {', '.join(map(str, rep.seeds))}. Eq. 1 random floor {rep.floor:.3f}, "
             f"layer-mean sd {rep.noise:.4f}; each run's permutation nulls are in its record (report.json).", "",
             "| configuration | " + " | ".join(COLUMN_TITLES.get(c, c) for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for spec in rep.specs:
        stats, paper = rep.stats.get(spec.label, {}), rep.paper.get(spec.label, {})
        lines.append(f"| {_md(spec.label)} | " + " | ".join(_cell(stats.get(c), paper.get(c)) for c in cols) + " |")
    return [*lines, "", *(f"- {_md(n)}" for n in rep.notes), ""]


def _scan_table(report: Report) -> list[str]:
    paper = PAPER_TABLE2.get("Llama-3.1-8B", {})
    lines = ["| Proj | predicted | v1 (null ± sd) | u1 (null ± sd) | paper Llama-3.1-8B | frame (Eq. 1) | path |",
             "|---|---|---|---|---|---|---|"]
    for r in report.roles:
        v, u = r.spaces["v"].vectors[0], r.spaces["u"].vectors[0]
        ref = paper.get(r.role)
        lines.append(f"| {ROLE_LABELS.get(r.role, r.label)} | {r.predicted_space or 'neither'} | {v.mean:.3f} "
                     f"({v.null_mean:.3f} ± {v.null_std:.3f}) | {u.mean:.3f} ({u.null_mean:.3f} ± {u.null_std:.3f}) | "
                     f"{'—' if ref is None else f'{ref:.2f}'} | {r.verdict} | {r.path_verdict} |")
    return [*lines, ""]


def _view_claims(cmp: ViewComparison) -> list[tuple[str, str, str, str]]:
    # The gauge-invariant verdicts (canonical view) as claims; the other views' numbers beside them.
    if "canonical" not in cmp.views:
        return []
    out = []
    for row in cmp.rows:
        c = row.cells.get("canonical")
        if c is None:
            continue
        where = f"{row.predicted or 'neither'} space"
        others = ", ".join(f"{view} {row.cells[view].mean:.3f}" for view in cmp.views
                           if view != "canonical" and view in row.cells)
        measured = f"{row.space}1 {c.mean:.3f} (null {c.null_mean:.3f}, z {c.z:.1f}); {others}"
        out.append((f"{row.label}: a frame shared across layers in {where}, canonical view (gauge-invariant)",
                    "the scan's frame criterion (its row above), on the canonical weights", measured, c.verdict))
        out.append((f"{row.label}: a depth path in {where}, canonical view (gauge-invariant)",
                    "the scan's path criterion (its row above), on the canonical weights", measured,
                    c.path_verdict))
    return out


def _gauge_text(status: str, moved_by: list[str]) -> str:
    return f"{status} ({', '.join(moved_by)})" if moved_by else status


def _views_table(cmp: ViewComparison) -> list[str]:
    spec = cmp.spec
    lines = [f"Each cell: the top vector's Eq. 1 mean over the {len(cmp.layers)} layers' adjacent pairs, its "
             f"permutation null (mean ± sd over {spec.get('null_draws')} draws) and z; the projection's two "
             "verdicts (shared frame, depth path); and the number's gauge status in that view: `invariant` = "
             "identical for any two checkpoints that differ by an exact gauge, `varies (...)` = moved by the "
             "gauges named (`fold`: scales moved between a norm gain and its readers; `rotate`: a residual "
             "rotation, which moves the null and z but not the mean; `qk`, `vo`, `mlp_scale`: the per-head "
             "and per-unit maps). **The canonical verdicts are the gauge-invariant ones; the raw view is the "
             "paper's metric** (docs/verdicts.md, \"Gauges and the canonical view\").", ""]
    flips = cmp.flips()
    lines += [("Verdicts that differ between views: " + ", ".join(flips) + ".") if flips
              else "No verdict differs between the views.", ""]
    reference = cmp.reference_name or "reference"
    if cmp.reference_name:
        lines += [f"The `{reference}` column is a reference only (another model's values where the paper has no "
                  "value for this one; — where it reports none): no verdict uses it.", ""]
    lines += ["| Proj | number | " + reference + " | " + " | ".join(cmp.views) + " |",
              "|---|---|---|" + "---|" * len(cmp.views)]
    for row in cmp.rows:
        cells = []
        for view in cmp.views:
            c = row.cells.get(view)
            cells.append("—" if c is None else
                         f"{c.mean:.3f} (null {c.null_mean:.3f} ± {c.null_std:.3f}, z {c.z:.1f}); frame "
                         f"{c.verdict}, path {c.path_verdict}; {_gauge_text(c.gauge, c.moved_by)}")
        number = f"{row.space}1" + ("" if row.predicted else " (predicted: neither)")
        ref = "—" if row.reference is None else f"{row.reference:.2f}"
        lines.append(f"| {row.label} | {number} | {ref} | " + " | ".join(_md(c) for c in cells) + " |")
    return [*lines, ""]


def _compress_tables(result: PruneResult | ShareResult) -> list[str]:
    # The command's own tables (geodrift.render.compress), as Markdown; the paper tested neither corollary.
    from geodrift.render.compress import prune_grids
    from geodrift.render.compress_share import share_grids

    grids = prune_grids(result) if isinstance(result, PruneResult) else share_grids(result)
    where = ("its introduction and §6: continuity is \"a mechanistic basis for layer pruning\""
             if isinstance(result, PruneResult) else "Q, K, Gate, Up share an input-space basis, O and Down an "
             "output-space one, V nothing")
    lines = [f"The paper states this without testing it ({where}): there is no paper value to compare, and the "
             "criteria are geodrift's.", ""]
    for grid in grids:
        lines += grid_markdown(grid)
    return [*lines, *(f"- {_md(n)}" for n in result.notes), ""]


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
