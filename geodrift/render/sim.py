"""Render simulator reproductions: the side-by-side table (geodrift mean ± std | paper) and verdicts."""

from __future__ import annotations

from rich.table import Table

from geodrift.render import console, fmt
from geodrift.sim.claims import Stat
from geodrift.sim.reproduce import COLUMN_TITLES, Reproduction

_VERDICT_STYLE = {"holds": "[green]holds[/green]", "fails": "[red]fails[/red]", "n/a": "[dim]n/a[/dim]"}


def _cell(stat: Stat | None, paper: float | str | None, col: str) -> str:
    digits = 1 if col == "rotation_deg" else (3 if col != "rel_change" else 2)
    if stat is None or stat.n == 0:
        ours = "—"
    else:
        ours = fmt(stat.mean, digits) + (f"±{fmt(stat.std, digits)}" if stat.std == stat.std else "")
    if paper is None:
        return ours
    ref = paper if isinstance(paper, str) else f"{paper:.3f}"
    return f"{ours}\n[dim]paper {ref}[/dim]"


def comparison_table(rep: Reproduction) -> Table:
    """One row per configuration; each cell: geodrift mean ± std over seeds, the paper's value below."""
    table = Table(title=f"geodrift simulate mlp --preset {rep.preset}: geodrift (mean ± std over "
                        f"{len(rep.seeds)} seed(s)) vs paper (reference only)", show_lines=True)
    table.add_column("configuration", style="bold")
    for col in rep.columns:
        table.add_column(COLUMN_TITLES.get(col, col), justify="right")
    for spec in rep.specs:
        stats, paper = rep.stats.get(spec.label, {}), rep.paper.get(spec.label, {})
        table.add_row(spec.label, *(_cell(stats.get(c), paper.get(c), c) for c in rep.columns))
    table.caption = (f"Eq. 1 floor: random {rep.floor:.3f}, layer-mean sd {rep.noise:.4f} "
                     f"(coherent > {rep.floor + 5 * rep.noise:.3f}); W σ²-WA random ≈ {rep.floor:.3f}")
    return table


def long_table(rep: Reproduction) -> Table:
    """The same comparison in long format (one row per configuration x column) for narrow terminals."""
    table = Table(title=f"geodrift simulate mlp --preset {rep.preset}: geodrift (mean ± std over "
                        f"{len(rep.seeds)} seed(s)) vs paper (reference only)")
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
    table.caption = (f"Eq. 1 floor: random {rep.floor:.3f}, layer-mean sd {rep.noise:.4f} "
                     f"(coherent > {rep.floor + 5 * rep.noise:.3f})")
    return table


def verdict_table(rep: Reproduction) -> Table:
    """One row per claim: criterion (derived from noise floors and seed spread), measurement, verdict."""
    table = Table(title="Claims (criteria from the noise floor and seed spread, not from the paper's values)",
                  show_lines=True)
    table.add_column("claim", ratio=3)
    table.add_column("criterion", ratio=3)
    table.add_column("geodrift measured", ratio=3)
    table.add_column("verdict", justify="center")
    for v in rep.verdicts:
        table.add_row(v.claim, v.criterion, v.measured, _VERDICT_STYLE.get(v.verdict, v.verdict))
    return table


def render_reproduction(rep: Reproduction) -> None:
    """Print the comparison table, the verdicts and the notes to stdout."""
    wide = console.width >= 24 + 15 * len(rep.columns)
    console.print(comparison_table(rep) if wide else long_table(rep))
    if rep.verdicts:
        console.print(verdict_table(rep))
    for note in rep.notes:
        console.print(f"[dim]• {note}[/dim]")
    timing = [r.timing.get("wall_s", 0.0) / max(1.0, r.timing.get("members", 1.0)) for r in rep.records]
    if timing:
        console.print(f"[dim]• {len(rep.records)} runs, {sum(timing):.1f} s of training wall time in total[/dim]")
