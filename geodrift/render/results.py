"""What a command shows once its job is done: the report on the terminal (or as JSON), and the files written.

The command-line face is parse -> one job -> render: these functions are the render step of ``scan``,
``drift``, ``compare`` and ``inspect``, and :func:`working` the progress (and stdout guard) around the job.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from geodrift.io.atomic import document
from geodrift.render.progress import JobProgress, announce

if TYPE_CHECKING:
    from geodrift.jobs.inspect import Inventory
    from geodrift.jobs.scan import ScanResult
    from geodrift.jobs.series_results import CompareResult, DriftResult


@contextmanager
def working(title: str, unit: str, *, quiet: bool, report_on_stdout: bool = False) -> Iterator[JobProgress]:
    """A progress bar on stderr around a job (its ``advance`` and ``set_total`` are the job's callbacks); with
    ``report_on_stdout`` (``--json``) anything native libraries print to stdout meanwhile goes to stderr.

    Example:
        >>> with working("scanning", "matrices", quiet=True) as bar:
        ...     bar.set_total(2); bar.advance("attn_q[0]"); bar.advance("attn_q[1]")
    """
    from geodrift.io.stdio import report_only_stdout

    with JobProgress(title, 0, unit, quiet=quiet) as bar, report_only_stdout(report_on_stdout):
        yield bar


def announce_written(written: Sequence[Path], *, quiet: bool) -> None:
    """``… wrote a.json, b.csv`` on stderr (nothing when nothing was written, or ``quiet``)."""
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)


def show_scan(result: ScanResult, *, as_json: bool, full: bool, wide: bool) -> None:
    """The scan's report: JSON on stdout, or the tables (``full``: every table and the gauge diagnosis) and the
    summary line, last."""
    from geodrift.render.files import print_document
    from geodrift.render.scan import render_scan, summary_line

    if as_json:
        print_document(document("continuity_report", result.to_dict()))
        return
    render_scan(result.report, full=full, wide=wide, summary=result.gauge is None)
    if result.gauge is not None:  # the gauge diagnosis, then the scan's summary line, last as always
        from geodrift.render.gauge import render_gauge

        render_gauge(result.gauge, wide=wide, then=summary_line(result.report))


def show_drift(rep: DriftResult, *, as_json: bool, wide: bool) -> None:
    """A training series: JSON on stdout, or its tables."""
    from geodrift.render.files import print_document
    from geodrift.render.series import render_drift

    if as_json:
        print_document(document("drift_report", rep.to_dict()))
    else:
        render_drift(rep, wide=wide)


def show_compare(rep: CompareResult, *, as_json: bool, wide: bool) -> None:
    """Two models compared: JSON on stdout, or their tables."""
    from geodrift.render.files import print_document
    from geodrift.render.series import render_compare

    if as_json:
        print_document(document("compare_report", rep.to_dict()))
    else:
        render_compare(rep, wide=wide)


def show_inventory(inventory: Inventory, *, as_json: bool, wide: bool, full: bool = False) -> None:
    """A checkpoint's tensors and the role each is scanned as: JSON on stdout, or the summary and the table (one row
    per role and layer range; ``full``: per tensor)."""
    from geodrift.render.files import print_document
    from geodrift.render.inspect import render_inventory

    if as_json:
        print_document(document("inventory", inventory.to_dict()))
    else:
        render_inventory(f"Tensors of {inventory.model}",
                         inventory.tensors, inventory.summary, wide=wide, full=full)
