"""The stamp of a results file that several benchmarks (or spectra) write section by section.

A thin door to :mod:`geodrift.io.provenance`: each section opens with the same provenance table as a
whole generated file (:func:`geodrift.io.provenance.stamp_markdown`), so ``tests/test_docs_numbers.py``
accepts the numbers the docs quote from it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from geodrift.io.provenance import command_line, stamp, stamp_markdown


def stamp_lines(load_before: tuple[float, float, float], extra: dict[str, str] | None = None) -> list[str]:
    """The provenance table (command, commit, CPU, threads, load before/after, versions) as Markdown lines."""
    return stamp_markdown(stamp(command_line(), load_before=load_before, extra=extra)).splitlines()


def run_main(main: Callable[[], Any], title: str) -> None:
    """Run ``main``; with ``--write-results PATH`` (or ``=PATH``) in argv, through ``run_recorded`` into PATH."""
    from geodrift.io.provenance import run_recorded

    argv = sys.argv
    results = next((Path(a.split("=", 1)[1]) if "=" in a else Path(argv[i + 2]) for i, a in enumerate(argv[1:])
                    if a.startswith("--write-results") and ("=" in a or i + 2 < len(argv))), None)
    if results is None:
        main()
    else:  # what it prints, after the stamp (the whole file is this run's)
        run_recorded(main, results, title)
