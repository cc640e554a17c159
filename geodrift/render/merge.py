"""What ``geodrift merge`` shows: the pre-merge check (one line per model), the notes and the folder written.

Example:
    >>> from pathlib import Path
    >>> from geodrift.merging.run import MergeResult
    >>> show_merge(MergeResult("linear", ["a", "b"], None, "auto", "as read", [], [], Path("m")), as_json=False)
    merged 2 models (linear, --align auto, merged as read) into m
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geodrift.io.atomic import document
from geodrift.render import console, lit

if TYPE_CHECKING:
    from geodrift.merging.run import MergeResult

def show_merge(result: MergeResult, *, as_json: bool) -> None:
    """The report on stdout: JSON (``--json``), or the check's lines, the notes and the summary line, last."""
    if as_json:
        from geodrift.render.files import print_document

        print_document(document("merge_report", result.to_dict()))
        return
    for line in result.lines():
        console.print(lit(line), highlight=False, soft_wrap=True)
    for note in result.notes:
        console.print(lit(f"note: {note}", "yellow"), highlight=False, soft_wrap=True)
    files = f" ({', '.join(result.files)})" if result.files else ""
    console.print(lit(f"merged {len(result.models)} models ({result.method}, --align {result.align}, merged "
                      f"{result.frame}) into {result.out}{files}"), highlight=False, soft_wrap=True)
