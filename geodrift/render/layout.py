"""Tables that never hide a number: reflowed to the terminal's width, never truncated.

A :class:`Grid` is a table as plain data (columns, rows of cells, the leading *key* columns that
name a row). A cell is a rich-markup string written by geodrift, or a :class:`rich.text.Text` for
text that came from a file, a path or an option (:func:`geodrift.render.lit`: printed literally,
never parsed as markup). Titles, captions and column headers are always printed literally. :func:`print_grid` prints it

- as one table when it fits the console (80 columns when output is piped) or when ``wide`` is
  asked for (``--wide``: the table's full width, whatever the terminal);
- otherwise split by columns into several tables that each fit, every part repeating the key
  columns, so each row stays identifiable and every value is printed whole.

Numbers and labels never wrap or get elided (``no_wrap``, at their natural width); only columns
marked ``prose`` (criteria, claims) wrap, between words. Nothing is ever cut to "…".

Example:
    >>> grid = Grid("demo", [Col("Proj", justify="left"), Col("v1")])
    >>> grid.add("Q", "0.419")
    >>> [part.heading for part in grid_tables(grid, width=80)]
    [None]
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from rich import box
from rich.console import Console
from rich.errors import MarkupError
from rich.table import Table
from rich.text import Text

from geodrift.io.literal import visible
from geodrift.render import console as stdout_console

Justify = Literal["left", "center", "right"]
Cell = str | Text  # markup written by geodrift, or literal text (from files, paths, options)
# A prose column is given at least this many cells (or its longest word) before the table splits.
PROSE_MIN = 16


@dataclass(frozen=True)
class Col:
    """One column: header, alignment, and whether its text may wrap between words (``prose``)."""

    header: str
    justify: Justify = "right"
    prose: bool = False
    style: str | None = None


@dataclass
class Grid:
    """A table as data: ``keys`` leading columns name each row and are repeated when it is split."""

    title: str
    columns: list[Col]
    rows: list[list[Cell]] = field(default_factory=list)
    keys: int = 1
    caption: str | None = None
    lines: bool = False  # a rule between every row (multi-line cells)
    section_ends: set[int] = field(default_factory=set)

    def add(self, *cells: Cell, end_section: bool = False) -> None:
        """Append a row (one markup string or literal Text per column); ``end_section`` draws a rule below it."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: row has {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(list(cells))
        if end_section:
            self.section_ends.add(len(self.rows) - 1)


@dataclass(frozen=True)
class Part:
    """One printed table of a grid: a heading line printed above it when the title is wider than
    the table (else the title sits on the table), and a caption printed below the last part."""

    table: Table
    heading: str | None = None
    caption: str | None = None


def print_grid(grid: Grid, *, wide: bool = False, console: Console | None = None) -> None:
    """Print ``grid`` whole: one table if it fits (or ``wide``), else split by columns to fit the console."""
    out = console or stdout_console
    if wide:
        natural = _table_width([_natural(grid, i) for i in range(len(grid.columns))])
        with at_least(out, natural) as wide_console:
            for part in grid_tables(grid, width=None):
                _print_part(wide_console, part)
        return
    for part in grid_tables(grid, width=out.width):
        _print_part(out, part)


def _print_part(out: Console, part: Part) -> None:
    if part.heading:
        out.print(Text(visible(part.heading), style="italic"))
    out.print(part.table)
    if part.caption:
        out.print(Text(visible(part.caption), style="dim"))


def grid_tables(grid: Grid, width: int | None) -> list[Part]:
    """The tables that show ``grid`` within ``width`` cells (None: one table at its natural width)."""
    n = len(grid.columns)
    natural = [_natural(grid, i) for i in range(n)]
    if width is None or _table_width(natural) <= width:
        return [_part(grid, list(range(n)), grid.title, grid.caption, natural, attach=True)]
    need = [min(natural[i], max(_longest_word(grid, i), PROSE_MIN)) if grid.columns[i].prose else natural[i]
            for i in range(n)]
    keys = list(range(min(grid.keys, n)))
    chunks: list[list[int]] = []
    for i in range(len(keys), n):
        if chunks and _table_width([need[j] for j in keys + chunks[-1] + [i]]) <= width:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    if not chunks:
        chunks = [[]]
    parts = []
    for number, chunk in enumerate(chunks, 1):
        title = grid.title if len(chunks) == 1 else f"{grid.title} (part {number} of {len(chunks)})"
        caption = grid.caption if number == len(chunks) else None
        parts.append(_part(grid, keys + chunk, title, caption, natural, attach=False))
    return parts


@contextmanager
def at_least(base: Console, width: int) -> Iterator[Console]:
    """A console like ``base`` (same stream, colours) that is at least ``width`` cells wide."""
    if width <= base.width:
        yield base
        return
    yield Console(width=width, file=base.file, force_terminal=base.is_terminal,
                  color_system=base.color_system,  # type: ignore[arg-type]
                  no_color=base.no_color, highlight=False)


def grid_markdown(grid: Grid) -> list[str]:
    """``grid`` as a Markdown table (markup removed, a cell's lines joined by ``<br>``), title above, caption below."""
    def cell(markup: Cell) -> str:
        return plain(markup).replace("|", "\\|").replace("\n", "<br>")

    lines = [f"**{cell(Text(grid.title))}**", "", "| " + " | ".join(cell(Text(c.header)) for c in grid.columns) + " |",
             "|" + "".join("---|" if c.justify == "left" else "---:|" for c in grid.columns)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in grid.rows]
    return [*lines, *(["", f"*{cell(Text(grid.caption))}*"] if grid.caption else []), ""]


def plain(cell: Cell) -> str:
    """The text a cell shows (markup removed; a Text as it is).

    Example:
        >>> plain("[bold]0.42[/bold]"), plain(Text("[bold]"))
        ('0.42', '[bold]')
    """
    return as_text(cell).plain


def as_text(cell: Cell) -> Text:
    """The rich Text a cell prints as: markup parsed, or the string literally when it is not valid markup (a
    value such as ``[/]`` reaching a markup cell); control characters shown as escapes (``\\x1b``), lines kept.

    Example:
        >>> as_text("[/]").plain, as_text("[bold]x[/bold]").plain, as_text("a\\x1bb").plain
        ('[/]', 'x', 'a\\\\x1bb')
    """
    if isinstance(cell, Text):  # geodrift.render.lit made its text visible; a Text made elsewhere may hold an escape
        if all(line.isprintable() for line in cell.plain.split("\n")):
            return cell
        return Text("\n".join(visible(line) for line in cell.plain.split("\n")), style=cell.style)
    shown = "\n".join(visible(line) for line in cell.split("\n"))
    try:
        return Text.from_markup(shown)
    except MarkupError:
        return Text(shown)


def _part(grid: Grid, columns: list[int], title: str, caption: str | None, natural: list[int],
          attach: bool) -> Part:
    # The title goes on the table when it fits its width, else on a line of its own above it; a
    # caption is attached to a whole table, printed below a split one (at the console's width).
    fits = Text(title).cell_len <= _table_width([natural[i] for i in columns])
    table = Table(title=Text(visible(title), style="table.title") if fits else None,
                  caption=Text(visible(caption), style="table.caption") if attach and caption else None,
                  caption_justify="left", show_lines=grid.lines, box=box.HEAVY_HEAD)
    for i in columns:
        col = grid.columns[i]
        if col.prose:
            table.add_column(Text(visible(col.header)), justify=col.justify, style=col.style, overflow="fold")
        else:
            table.add_column(Text(visible(col.header)), justify=col.justify, style=col.style, no_wrap=True, overflow="fold",
                             min_width=natural[i])
    for r, row in enumerate(grid.rows):
        table.add_row(*(as_text(row[i]) for i in columns), end_section=r in grid.section_ends)
    return Part(table, None if fits else title, None if attach else caption)


def _lines(cell: Cell) -> list[str]:
    return plain(cell).split("\n")


def _natural(grid: Grid, i: int) -> int:
    cells: list[Cell] = [Text(visible(grid.columns[i].header)), *(row[i] for row in grid.rows)]
    return max(Text(line).cell_len for cell in cells for line in _lines(cell))


def _longest_word(grid: Grid, i: int) -> int:
    cells: list[Cell] = [Text(visible(grid.columns[i].header)), *(row[i] for row in grid.rows)]
    return max((Text(word).cell_len for cell in cells for word in plain(cell).split()), default=1)


def _table_width(widths: list[int]) -> int:
    # HEAVY_HEAD box with edges and padding (0, 1): one rule per column boundary, two padding cells each.
    return sum(widths) + 2 * len(widths) + len(widths) + 1
