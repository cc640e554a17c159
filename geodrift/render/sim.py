"""Render a simulator Reproduction (both simulators): geodrift vs paper, verdicts, training, notes.

Every similarity is shown beside its noise floor: the comparison table's caption gives the Eq. 1
random floor and layer-mean noise, the transformer's tables give each value's permutation-null
mean, and the verdict table prints each criterion.
"""

from __future__ import annotations

import statistics

from rich.table import Table

from geodrift.continuity import Report, Stat
from geodrift.render import console, fmt
from geodrift.render.scan import render_scan, sparkline
from geodrift.sim.reference import PAPER_TABLE2, PAPER_TABLE2_SPACE
from geodrift.sim.reproduce import COLUMN_TITLES, Reproduction
from geodrift.weights import ROLE_LABELS

_VERDICT_STYLE = {"holds": "[green]holds[/green]", "fails": "[red]fails[/red]", "n/a": "[dim]n/a[/dim]"}


def _cell(stat: Stat | None, paper: float | str | None, col: str) -> str:
    digits = 1 if col == "rotation_deg" else (2 if col in ("rel_change", "ppl") else 3)
    if stat is None or stat.n == 0:
        ours = "—"
    else:
        ours = fmt(stat.mean, digits) + (f"±{fmt(stat.std, digits)}" if stat.std == stat.std else "")
    if paper is None:
        return ours
    ref = paper if isinstance(paper, str) else f"{paper:.3f}"
    return f"{ours}\n[dim]paper {ref}[/dim]"


def _title(rep: Reproduction) -> str:
    return (f"geodrift simulate {rep.sim} --preset {rep.preset}: geodrift (mean ± std over {len(rep.seeds)} "
            "seed(s)) vs paper (reference only)")


def _caption(rep: Reproduction) -> str:
    return (f"Eq. 1 floor: random {rep.floor:.3f}, layer-mean sd {rep.noise:.4f} "
            f"(coherent > {rep.floor + 5 * rep.noise:.3f}); permutation nulls per value are in the records")


def comparison_table(rep: Reproduction) -> Table:
    """One row per configuration; each cell: geodrift mean ± std over seeds, the paper's value below."""
    table = Table(title=_title(rep), show_lines=True, caption=_caption(rep), caption_justify="left")
    table.add_column("configuration", style="bold")
    for col in rep.columns:
        table.add_column(COLUMN_TITLES.get(col, col), justify="right")
    for spec in rep.specs:
        stats, paper = rep.stats.get(spec.label, {}), rep.paper.get(spec.label, {})
        table.add_row(spec.label, *(_cell(stats.get(c), paper.get(c), c) for c in rep.columns))
    return table


def long_table(rep: Reproduction) -> Table:
    """The same comparison in long format (one row per configuration x column) for narrow terminals."""
    table = Table(title=_title(rep), caption=_caption(rep), caption_justify="left")
    for name, justify in (("configuration", "left"), ("metric", "left"), ("geodrift", "right"),
                          ("paper", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for spec in rep.specs:
        stats, paper = rep.stats.get(spec.label, {}), rep.paper.get(spec.label, {})
        for i, col in enumerate(rep.columns):
            ref = paper.get(col)
            table.add_row(spec.label if i == 0 else "", COLUMN_TITLES.get(col, col),
                          _cell(stats.get(col), None, col),
                          "" if ref is None else (ref if isinstance(ref, str) else f"{ref:.3f}"),
                          end_section=i == len(rep.columns) - 1)
    return table


def verdict_table(rep: Reproduction) -> Table:
    """One row per claim: criterion (derived from noise floors and seed spread), measurement, verdict."""
    table = Table(title="Claims (criteria from the noise floors and seed spread, not from the paper's values)",
                  show_lines=True)
    table.add_column("claim", ratio=3)
    table.add_column("criterion", ratio=3)
    table.add_column("geodrift measured", ratio=3)
    table.add_column("verdict", justify="center")
    for v in rep.verdicts:
        table.add_row(v.claim, v.criterion, v.measured, _VERDICT_STYLE.get(v.verdict, v.verdict))
    return table


def _with_null(values: list[float], nulls: list[float]) -> str:
    values = [v for v in values if v == v]
    nulls = [v for v in nulls if v == v]
    if not values:
        return "—"
    spread = f"±{fmt(statistics.stdev(values))}" if len(values) > 1 else ""
    null = f" [dim](null {fmt(statistics.fmean(nulls))})[/dim]" if nulls else ""
    return f"{fmt(statistics.fmean(values))}{spread}{null}"


def training_table(rep: Reproduction) -> Table:
    """Transformer: each projection's continuity over training in the paper's space, with its null."""
    records = [r.record for r in rep.results if r.record.label == rep.specs[0].label]
    table = Table(title=f"Over training ({rep.specs[0].label}): weight (W) and gradient (G) continuity in the "
                        "space the paper reports, mean over seeds (permutation-null mean in brackets)")
    for name in ("Proj", "space", "W over training", "W step 0", "W final", "G step 0", "G final"):
        table.add_column(name, justify="left" if name in ("Proj", "space", "W over training") else "right")
    for role, space in PAPER_TABLE2_SPACE.items():
        series = records[0].select("W", role, "cont", space, 1)
        if not series:
            continue

        def at(source: str, step: int | None, role: str = role, space: str = space) -> str:
            return _with_null([r.value(source, role, "cont", space, 1, step=step) for r in records],
                              [r.value(source, role, "null_mean", space, 1, step=step) for r in records])

        table.add_row(ROLE_LABELS[role], f"{space}1", sparkline([v for _, v in series]), at("W", 0), at("W", None),
                      at("G", 0), at("G", None))
    return table


def reference_table(rep: Reproduction, reference: Report) -> Table:
    """Transformer: the final weights beside the paper's Llama-3.1-8B and the embedded SmolLM2-135M scan."""
    table = Table(title="Final weights beside pretrained models (each value with its permutation-null mean)")
    for name in ("Proj", "space", "simulated", "paper Llama-3.1-8B", "SmolLM2-135M", "verdict (SmolLM2)"):
        table.add_column(name, justify="left" if name in ("Proj", "space") else "right")
    results = [r for r in rep.results if r.record.label == rep.specs[0].label]
    for role, space in PAPER_TABLE2_SPACE.items():
        sims = [rr for rr in (r.report.role(role) for r in results) if rr is not None]
        ref = reference.role(role)
        if not sims:
            continue
        sim_cell = _with_null([s.spaces[space].vectors[0].mean for s in sims],
                              [s.spaces[space].vectors[0].null_mean for s in sims])
        ref_cell = _with_null([ref.spaces[space].vectors[0].mean], [ref.spaces[space].vectors[0].null_mean]) \
            if ref is not None else "—"
        table.add_row(ROLE_LABELS[role], f"{space}1", sim_cell, fmt(PAPER_TABLE2["Llama-3.1-8B"][role]), ref_cell,
                      ref.verdict if ref is not None else "—")
    return table


def render_reproduction(rep: Reproduction, reference: Report | None = None, detail: bool = False) -> None:
    """Print the comparison, the verdicts, (transformer) the first run's scan table and training, notes."""
    if rep.sim == "transformer" and rep.results:
        render_scan(rep.results[0].report, detail=detail)
    wide = console.width >= 24 + 15 * len(rep.columns)
    console.print(comparison_table(rep) if wide else long_table(rep))
    if rep.sim == "transformer" and rep.results:
        console.print(training_table(rep))
        if reference is not None:
            console.print(reference_table(rep, reference))
    if rep.verdicts:
        console.print(verdict_table(rep))
    for note in rep.notes:
        console.print(f"[dim]• {note}[/dim]")
    walls = [r.timing.get("wall_s", 0.0) / max(1.0, r.timing.get("members", 1.0)) for r in rep.records]
    if walls:
        console.print(f"[dim]• {len(rep.records)} runs, {sum(walls):.1f} s of training wall time in total[/dim]")
    for r in rep.results:
        if r.path is not None:
            console.print(f"[dim]• run record: {r.path / 'run.json'}[/dim]")
