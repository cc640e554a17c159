"""The self-contained report of ``geodrift reproduce``: one Markdown file, its PNG figures, and the JSON.

``write_report(rep, folder)`` writes ``folder/report.md`` (every claim with its verdict and criterion,
the paper's value beside ours, the command behind each number, versions and the git revision),
``folder/figures/*.png`` (every similarity plot with its permutation null and random floor) and
``folder/report.json`` (every section's full result).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from geodrift.atomic import document, write_json, write_text
from geodrift.compress.prune import PruneResult
from geodrift.compress.share_run import ShareResult
from geodrift.continuity import Report, Stat
from geodrift.prove.runner import ProveReport
from geodrift.render.layout import grid_markdown
from geodrift.reproduction import PaperReproduction, Section
from geodrift.sim.reference import PAPER_TABLE2
from geodrift.sim.reproduce import COLUMN_TITLES, Reproduction
from geodrift.weights import ROLE_LABELS


def write_report(rep: PaperReproduction, folder: str | Path, dpi: int = 150) -> list[Path]:
    """Write report.md, report.json and the figures under ``folder``; returns the files written."""
    folder = Path(folder)
    figures = folder / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    links: dict[str, list[Path]] = {}
    for s in rep.sections:
        links[s.key] = _figures(s, figures, dpi)
        written += links[s.key]
    lines = _header(rep) + _claims(rep) + [""]
    for s in rep.sections:
        lines += _section(s, links[s.key], folder)
    md = folder / "report.md"
    write_text(md, "\n".join(lines) + "\n")
    js = folder / "report.json"
    write_json(js, document("paper_reproduction", {
        "mode": rep.mode, "seconds": rep.seconds, "versions": rep.versions, "git_revision": rep.git_revision,
        "machine": rep.machine,
        "sections": [{"key": s.key, "title": s.title, "kind": s.kind, "command": s.command, "note": s.note,
                      "result": s.result.to_dict() if s.result is not None else None} for s in rep.sections]}))
    return [md, js, *written]


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


def _header(rep: PaperReproduction) -> list[str]:
    versions = ", ".join(f"{k} {v}" for k, v in rep.versions.items())
    return ["# geodrift reproduction of arXiv 2605.04971", "",
            f"- command: `geodrift reproduce{' --quick' if rep.mode == 'quick' else ''}` (mode `{rep.mode}`)",
            f"- written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; wall time "
            f"{rep.seconds / 60:.1f} min",
            f"- git revision: `{rep.git_revision or 'not a git checkout'}`", f"- versions: {versions}",
            f"- machine: {rep.machine}", "",
            "The paper's values are a reference column only: no criterion, default or tolerance uses them. "
            "Every similarity is shown with its noise floor (permutation null and/or the random floor "
            "√(2/(π d))).", ""]


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
        for r in s.result.roles:
            v, u = r.spaces["v"].vectors[0], r.spaces["u"].vectors[0]
            out.append((f"{r.label}: continuous in {r.predicted_space or 'neither'} space", r.criterion,
                        f"v1 {v.mean:.3f} (null {v.null_mean:.3f}), u1 {u.mean:.3f} (null {u.null_mean:.3f})",
                        r.verdict))
        return out
    if isinstance(s.result, ProveReport):
        return [(c.title, f"symbolic ({c.method}) and numeric cross-check", c.numeric_summary or c.reason, c.status)
                for c in s.result.results]
    return [(s.title, "—", s.note, "not run")]


def _section(s: Section, figures: list[Path], folder: Path) -> list[str]:
    lines = [f'<a id="{s.key}"></a>', f"## {s.title}", "", f"Command: `{s.command}`", ""]
    if s.note:
        lines += [f"*{_md(s.note)}*", ""]
    if isinstance(s.result, Reproduction):
        lines += _sim_table(s.result)
    elif isinstance(s.result, Report):
        lines += _scan_table(s.result)
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
    lines = [f"{len(rep.seeds)} seed(s): {', '.join(map(str, rep.seeds))}. Eq. 1 random floor {rep.floor:.3f}, "
             f"layer-mean sd {rep.noise:.4f}; each run's permutation nulls are in its record (report.json).", "",
             "| configuration | " + " | ".join(COLUMN_TITLES.get(c, c) for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for spec in rep.specs:
        stats, paper = rep.stats.get(spec.label, {}), rep.paper.get(spec.label, {})
        lines.append(f"| {_md(spec.label)} | " + " | ".join(_cell(stats.get(c), paper.get(c)) for c in cols) + " |")
    return [*lines, "", *(f"- {_md(n)}" for n in rep.notes), ""]


def _scan_table(report: Report) -> list[str]:
    paper = PAPER_TABLE2.get("Llama-3.1-8B", {})
    lines = ["| Proj | predicted | v1 (null ± sd) | u1 (null ± sd) | paper Llama-3.1-8B | verdict |",
             "|---|---|---|---|---|---|"]
    for r in report.roles:
        v, u = r.spaces["v"].vectors[0], r.spaces["u"].vectors[0]
        ref = paper.get(r.role)
        lines.append(f"| {ROLE_LABELS.get(r.role, r.label)} | {r.predicted_space or 'neither'} | {v.mean:.3f} "
                     f"({v.null_mean:.3f} ± {v.null_std:.3f}) | {u.mean:.3f} ({u.null_mean:.3f} ± {u.null_std:.3f}) | "
                     f"{'—' if ref is None else f'{ref:.2f}'} | {r.verdict} |")
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
