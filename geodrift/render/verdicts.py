"""The claims table shared by every face that judges claims (simulators, compression): one row per
``Verdict`` with its criterion, what geodrift measured, and the outcome."""

from __future__ import annotations

from collections.abc import Iterable

from geodrift.continuity.verdicts import Verdict
from geodrift.render import lit
from geodrift.render.layout import Col, Grid

VERDICT_STYLE = {"holds": "[green]holds[/green]", "fails": "[red]fails[/red]", "tie": "[yellow]tie[/yellow]",
                 "n/a": "[dim]n/a[/dim]"}


def verdict_grid(verdicts: Iterable[Verdict], title: str) -> Grid:
    """One row per claim: claim, criterion, measurement, verdict (prose columns wrap between words)."""
    grid = Grid(title, [Col("claim", "left", prose=True), Col("criterion", "left", prose=True),
                        Col("geodrift measured", "left", prose=True), Col("verdict", "center")], lines=True)
    for v in verdicts:
        grid.add(lit(v.claim), lit(v.criterion), lit(v.measured), VERDICT_STYLE.get(v.verdict, lit(v.verdict)))
    return grid
