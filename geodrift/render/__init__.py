"""Rendering: the only place that imports rich (tables, progress bars) and matplotlib (plots).

Shared helpers live here; each face has its own module (scan, proofs, sim).
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from geodrift.io.literal import visible

# Tables go to stdout; progress bars and notes to stderr so that --json on stdout stays parseable.
console = Console()
err_console = Console(stderr=True)


def fmt(value: float, digits: int = 3) -> str:
    """Format a similarity; NaN (not computable) prints as an em dash."""
    if value != value:
        return "—"
    return f"{value:.{digits}f}"


def fmt_z(z: float) -> str:
    """A z-score to the nearest whole number, never ``-0``; NaN as an em dash.

    Example:
        >>> [fmt_z(z) for z in (-0.3, 12.6, -4.5, float("nan"))]
        ['0', '13', '-4', '—']
    """
    if z != z:
        return "—"
    text = f"{z:.0f}"
    return "0" if text == "-0" else text


def lit(text: object, style: str = "") -> Text:
    """Text from a file, a path or an option, printed exactly as it is: never parsed as markup, control
    characters shown as escapes (:func:`geodrift.io.literal.visible`).

    Example:
        >>> lit("model.layers.0.[/bold]").plain
        'model.layers.0.[/bold]'
    """
    return Text(visible(str(text)), style=style)


_SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """Unicode sparkline of values in [0, 1] (one character per adjacent-layer pair; NaN as a space)."""
    return "".join(_SPARK[min(len(_SPARK) - 1, max(0, int(v * len(_SPARK))))] if v == v else " " for v in values)


def plural(count: int, word: str = "", many: str | None = None) -> str:
    """``word`` in the singular or plural for ``count`` (``s`` alone when ``word`` is empty).

    Example:
        >>> f"1 run{plural(1)}, 2 run{plural(2)}", plural(3, "matrix", "matrices")
        ('1 run, 2 runs', 'matrices')
    """
    if count == 1:
        return word
    return many if many is not None else word + "s"
