"""Checks every command runs on its options before any work: output paths first, then ranges.

Library-level ranges (seeds, counts, sizes) live in ``geodrift.checks``; this module adds what only
the command line knows: which option named which output file.
"""

from __future__ import annotations

from pathlib import Path


def check_outputs(outputs: dict[str, Path | None]) -> None:
    """Refuse now an output file that could not be written after the work (named as the user gave it).

    Args:
        outputs: option -> path (None = not asked for), e.g. ``{"--json-out": Path("r.json")}``. A
            ``--csv`` path is checked together with the ``NAME.pairs.csv`` written beside it.

    Raises:
        GeodriftError: naming the option and the user's path (never a temporary file).
    """
    from geodrift.atomic import check_writable

    for option, path in outputs.items():
        if path is None:
            continue
        check_writable(path, option)
        if option == "--csv":
            from geodrift.render.files import pairs_csv_path

            check_writable(pairs_csv_path(path), option)
