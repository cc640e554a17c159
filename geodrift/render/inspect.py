"""Render a checkpoint inventory (``geodrift inspect``): one row per tensor, then a summary line."""

from __future__ import annotations

from rich.text import Text

from geodrift.render import console, lit
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.scanner.inventory import FOLDED, SCANNED, TensorRow, role_group

_USE_STYLE = {SCANNED: "green", FOLDED: "cyan"}


def render_inventory(title: str, rows: list[TensorRow], summary: str, wide: bool = False) -> None:
    """Print the tensors of a checkpoint with their role (or why they are not scanned), then ``summary``;
    a rule closes each role's group (``geodrift.scanner.inventory.inventory`` gives the order)."""
    grid = Grid(title, [Col("tensor", "left"), Col("shape", "left"), Col("dtype", "left"),
                        Col("use", "left", prose=True)])
    for i, r in enumerate(rows):
        style = _USE_STYLE.get(r.use, "dim")
        last = i + 1 == len(rows) or role_group(rows[i + 1]) != role_group(r)
        grid.add(lit(r.name), "×".join(str(d) for d in r.shape) or "scalar", lit(r.dtype),
                 Text.assemble(lit(r.use, style), ": ", lit(r.detail)), end_section=last)
    print_grid(grid, wide=wide)
    console.print(lit(summary, "bold"), soft_wrap=True)
