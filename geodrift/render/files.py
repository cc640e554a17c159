"""The files a command writes, and its JSON on stdout: CSVs for pipelines, each command's set of outputs.

CSV files for pipelines: the summary CSV and, next to it, the tidy per-pair (long) CSV.

- ``NAME.csv``: one row per projection, space and k (means over adjacent pairs, with floors);
- ``NAME.pairs.csv``: one row per model, view, projection, space, k and adjacent layer pair with
  the pair's ``|cos|``, its permutation-null mean and std, z and the analytic floor - tidy data
  (one observation per row, one variable per column), e.g. ``pandas.read_csv`` then ``groupby``.

Non-finite numbers are written as empty cells (read as NaN/NA by pandas, R and spreadsheets).
docs/output-schema.md lists every column with its meaning and units.

:func:`write_scan_outputs`, :func:`write_drift_outputs` and :func:`write_compare_outputs` write every file a
request names (its job claimed them before the work) as one set (``geodrift.io.atomic.output_set``): an
interrupted run leaves the previous run's files whole.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geodrift.io.atomic import document, output_set, retire, to_json, write_json, write_text
from geodrift.jobs.outputs import (
    beside,
    experts_plot_path,
    gauge_plot_path,
    pairs_csv_path,
    trajectory_plot_path,
)
from geodrift.jobs.outputs import scan_outputs as scan_outputs

if TYPE_CHECKING:  # the commands import this module before their job checks the options: no torch at import
    from geodrift.continuity import Report
    from geodrift.jobs.scan import ScanRequest, ScanResult
    from geodrift.jobs.series import CompareRequest, DriftRequest
    from geodrift.jobs.series_results import CompareResult, DriftResult


def write_csv(report: Report, path: str | Path) -> list[Path]:
    """Write the summary CSV at ``path`` and the per-pair CSV beside it (atomically); return both paths."""
    pairs = pairs_csv_path(path)
    write_text(path, csv_text(report.rows()))
    write_text(pairs, csv_text(report.pair_rows()))
    return [Path(path), pairs]


def csv_text(rows: list[dict[str, Any]]) -> str:
    """Rows (dicts with the same keys) as CSV text; NaN and +-inf become empty cells."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["model"], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()})
    return buffer.getvalue()


def write_scan_outputs(result: ScanResult, request: ScanRequest) -> list[Path]:
    """Write the files ``request`` names (``json_out``, ``csv_out`` and its pairs CSV, ``plot`` and the figures
    beside it), together or not at all; return them in the order written.

    Raises:
        GeodriftError: an unsupported figure suffix or dpi (the job checked both before the work).
    """
    report, gauge, written = result.report, result.gauge, []
    with output_set():  # the files replace the previous run's together, or not at all
        if request.json_out:
            write_json(request.json_out, document("continuity_report", result.to_dict()))
            written.append(Path(request.json_out))
        if request.csv_out:
            written += write_csv(report, request.csv_out)
        if request.plot:
            from geodrift.render import scan_plot

            plot = Path(request.plot)
            written.append(scan_plot.write_plot(report, plot, request.dpi))
            if report.trajectory:
                written.append(scan_plot.write_trajectory_plot(report, trajectory_plot_path(plot), request.dpi))
            if report.across_experts:
                from geodrift.render.experts_plot import write_experts_plot

                written.append(write_experts_plot(report, experts_plot_path(plot), request.dpi))
            if gauge is not None and not isinstance(gauge, str):
                from geodrift.render.gauge import write_gauge_plot

                written.append(write_gauge_plot(gauge, gauge_plot_path(plot), request.dpi))
        # An earlier run's members of this set that this run does not write (its f_gauge.png, f_trajectory.png)
        retire(p for _, p in scan_outputs(request.json_out, request.csv_out, request.plot, gauge=True))
    return written


def write_drift_outputs(rep: DriftResult, request: DriftRequest) -> list[Path]:
    """Write the files a drift request names (the JSON, the continuity and rotation CSVs, both figures) as one set."""
    written: list[Path] = []
    with output_set():
        if request.json_out:
            write_json(request.json_out, document("drift_report", rep.to_dict()))
            written.append(Path(request.json_out))
        if request.csv_out:
            rotation = beside(request.csv_out, "rotation", ".csv")
            write_text(request.csv_out, csv_text(rep.continuity_rows()))
            write_text(rotation, csv_text(rep.rotation_rows()))
            written += [Path(request.csv_out), rotation]
        if request.plot:
            from geodrift.render.series import write_drift_plot, write_series_continuity_plot

            plot = Path(request.plot)
            written.append(write_drift_plot(rep, beside(plot, "rotation", plot.suffix, "_"), request.dpi))
            written.append(write_series_continuity_plot(rep, beside(plot, "continuity", plot.suffix, "_"),
                                                        request.dpi))
    return written


def write_compare_outputs(rep: CompareResult, request: CompareRequest) -> list[Path]:
    """Write the files a compare request names (the JSON, the subspace CSV, the figure) as one set."""
    written: list[Path] = []
    with output_set():
        if request.json_out:
            write_json(request.json_out, document("compare_report", rep.to_dict()))
            written.append(Path(request.json_out))
        if request.csv_out:
            write_text(request.csv_out, csv_text(rep.subspace_rows()))
            written.append(Path(request.csv_out))
        if request.plot:
            from geodrift.render.series import write_compare_plot

            written.append(write_compare_plot(rep, Path(request.plot), request.dpi))
    return written


def print_document(doc: dict[str, Any], indent: int | None = None) -> None:
    """Print a JSON document (:func:`geodrift.io.atomic.document`) on stdout (``--json``).

    Example:
        >>> from geodrift.io.atomic import document
        >>> print_document(document("proofs", {"results": []}))
        {"schema_version": "1.2", "kind": "proofs", "results": []}
    """
    sys.stdout.write(to_json(doc, indent=indent) + "\n")


def write_result_files(doc: dict[str, Any], rows: list[dict[str, Any]], json_out: Path | None, csv_out: Path | None,
                       figure: Callable[[], Path] | None = None) -> list[Path]:
    """Write the JSON document, the tidy CSV of ``rows`` and the figure that were asked for; return their paths.

    They replace the previous run's together, or not at all (:func:`geodrift.io.atomic.output_set`).

    Args:
        doc: the JSON document (:func:`geodrift.io.atomic.document`); rows: the CSV's rows.
        json_out, csv_out: the files (None: not asked for); figure: draws the figure and returns its path.
    """
    written = []
    with output_set():
        if json_out:
            write_json(json_out, doc)
            written.append(json_out)
        if csv_out:
            write_text(csv_out, csv_text(rows))
            written.append(csv_out)
        if figure is not None:
            written.append(figure())
    return written
