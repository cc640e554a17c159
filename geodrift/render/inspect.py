"""Render a checkpoint inventory (``geodrift inspect``): the summary first, then one row per role and layer range
(``--full``: one row per tensor).

A group is the tensors of one role with the same use, shape and dtype; its name shows the layers in braces
(``blk.{0-29}.attn_q.weight``), its use the layer range (``scanned: Q, layers 0-29``). Layers whose tensors differ
in shape or dtype from the rest of their role get a row of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rich.text import Text

from geodrift.render import console, lit
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.scanner.inventory import FOLDED, SCANNED, TensorRow, role_group

_USE_STYLE = {SCANNED: "green", FOLDED: "cyan"}
FULL_HINT = "--full: every tensor, one row each; --json: the same as data"


@dataclass
class _Group:
    rows: list[TensorRow] = field(default_factory=list)

    def name(self) -> str:
        first = self.rows[0]
        if len(self.rows) == 1 or first.layer is None:
            return first.name
        # the layer number in the first tensor's name, as a range: blk.{0-29}.attn_q.weight
        return re.sub(rf"(?<![\d]){first.layer}(?![\d])", "{" + layer_ranges([r.layer for r in self.rows]) + "}",
                      first.name, count=1)

    def detail(self) -> str:
        first = self.rows[0]
        if len(self.rows) == 1 or first.layer is None:
            return first.detail
        return first.detail.replace(f"layer {first.layer}", f"layers {layer_ranges([r.layer for r in self.rows])}")


def layer_ranges(layers: list[int | None]) -> str:
    """Layer numbers as ranges: ``0-3,5,7-9``.

    Example:
        >>> layer_ranges([0, 1, 2, 3, 5, 7, 8, 9])
        '0-3,5,7-9'
    """
    numbers = sorted({x for x in layers if x is not None})
    parts: list[str] = []
    for x in numbers:
        if parts and x - 1 == int(parts[-1].split("-")[-1]):
            parts[-1] = f"{parts[-1].split('-')[0]}-{x}"
        else:
            parts.append(str(x))
    return ",".join(parts)


def grouped(rows: list[TensorRow]) -> list[list[TensorRow]]:
    """The inventory's rows grouped by role, use, shape, dtype and detail (its layer left out), in listing order."""
    groups: dict[tuple[object, ...], list[TensorRow]] = {}
    for r in rows:
        detail = r.detail.replace(f"layer {r.layer}", "layer #") if r.layer is not None else r.detail
        key = (role_group(r), r.kind, r.use, r.shape, r.dtype, detail, r.layer is None and r.name)
        groups.setdefault(key, []).append(r)
    return list(groups.values())


def render_inventory(title: str, rows: list[TensorRow], summary: str, wide: bool = False, full: bool = False) -> None:
    """Print ``summary`` (wrapped), then the tensors with their role (or why they are not scanned): one row per role
    and layer range, or with ``full`` one row per tensor (a rule closes each role's group)."""
    console.print(lit(summary, "bold"))
    grid = Grid(title if full else "Tensors by role and layer range",
                [Col("tensor" if full else "tensors", "left"), Col("shape · dtype", "left"), Col("use", "left", prose=True)])
    groups = [[r] for r in rows] if full else grouped(rows)
    for i, members in enumerate(groups):
        group, r = _Group(members), members[0]
        style = _USE_STYLE.get(r.use, "dim")
        last = i + 1 == len(groups) or role_group(groups[i + 1][0]) != role_group(r)
        grid.add(lit(group.name()), Text.assemble("×".join(str(d) for d in r.shape) or "scalar", " ", lit(r.dtype)),
                 Text.assemble(lit(r.use, style), ": ", lit(group.detail())), end_section=full and last)
    print_grid(grid, wide=wide)
    if not full:
        console.print(lit(FULL_HINT, "dim"))
