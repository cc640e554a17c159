"""The stamp of a results file that several benchmarks (or spectra) write section by section.

A thin door to :mod:`geodrift.provenance`: each section opens with the same provenance table as a
whole generated file (:func:`geodrift.provenance.stamp_markdown`), so ``tests/test_docs_numbers.py``
accepts the numbers the docs quote from it.
"""

from __future__ import annotations

from geodrift.provenance import command_line, stamp, stamp_markdown


def stamp_lines(load_before: tuple[float, float, float], extra: dict[str, str] | None = None) -> list[str]:
    """The provenance table (command, commit, CPU, threads, load before/after, versions) as Markdown lines."""
    return stamp_markdown(stamp(command_line(), load_before=load_before, extra=extra)).splitlines()
