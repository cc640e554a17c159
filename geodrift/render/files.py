"""CSV files for pipelines: the summary CSV and, next to it, the tidy per-pair (long) CSV.

- ``NAME.csv``: one row per projection, space and k (means over adjacent pairs, with floors);
- ``NAME.pairs.csv``: one row per model, view, projection, space, k and adjacent layer pair with
  the pair's ``|cos|``, its permutation-null mean and std, z and the analytic floor - tidy data
  (one observation per row, one variable per column), e.g. ``pandas.read_csv`` then ``groupby``.

Non-finite numbers are written as empty cells (read as NaN/NA by pandas, R and spreadsheets).
docs/output-schema.md lists every column with its meaning and units.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from geodrift.continuity import Report
from geodrift.io.atomic import write_text


def pairs_csv_path(summary_path: str | Path) -> Path:
    """Where the long CSV goes beside the summary CSV: ``scan.csv`` -> ``scan.pairs.csv``."""
    path = Path(summary_path)
    stem = path.name[:-4] if path.name.lower().endswith(".csv") else path.name
    return path.with_name(f"{stem}.pairs.csv")


def scan_outputs(json_out: str | Path | None, csv_out: str | Path | None, plot: str | Path | None,
                 experts: bool = True, gauge: bool = False) -> list[tuple[str, Path]]:
    """Every file ``geodrift scan`` may write, named or derived, with the option that named it - the list
    :func:`geodrift.io.outdir.claim_outputs` checks before the work (a derived name is never a user's file).

    Args:
        json_out, csv_out, plot: the options (None: not asked for).
        experts: include the experts' figure (a mixture of experts; the CLI claims it once the model is open).
        gauge: include the gauge diagnosis figure (``NAME_gauge``; ``--full`` draws it).

    Example:
        >>> [str(p) for _, p in scan_outputs(None, "s.csv", "f.png")]
        ['s.csv', 's.pairs.csv', 'f.png', 'f_trajectory.png', 'f_experts.png']
    """
    outputs: list[tuple[str, Path]] = [("--json-out", Path(json_out))] if json_out is not None else []
    if csv_out is not None:
        outputs += [("--csv", Path(csv_out)), ("--csv", pairs_csv_path(csv_out))]
    if plot is not None:
        from geodrift.render.experts_plot import experts_plot_path
        from geodrift.render.scan_plot import trajectory_plot_path

        outputs += [("--plot", Path(plot)), ("--plot", trajectory_plot_path(plot))]
        outputs += [("--plot", experts_plot_path(plot))] if experts else []
        if gauge:
            from geodrift.render.gauge import gauge_plot_path

            outputs += [("--plot", gauge_plot_path(Path(plot)))]
    return outputs


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


def print_document(doc: dict[str, Any], indent: int | None = None) -> None:
    """Print a JSON document (:func:`geodrift.io.atomic.document`) on stdout (``--json``).

    Example:
        >>> from geodrift.io.atomic import document
        >>> print_document(document("proofs", {"results": []}))
        {"schema_version": "1.2", "kind": "proofs", "results": []}
    """
    from geodrift.io.atomic import to_json

    sys.stdout.write(to_json(doc, indent=indent) + "\n")


def write_result_files(doc: dict[str, Any], rows: list[dict[str, Any]], json_out: Path | None, csv_out: Path | None,
                       figure: Callable[[], Path] | None = None) -> list[Path]:
    """Write the JSON document, the tidy CSV of ``rows`` and the figure that were asked for; return their paths.

    They replace the previous run's together, or not at all (:func:`geodrift.io.atomic.output_set`).

    Args:
        doc: the JSON document (:func:`geodrift.io.atomic.document`); rows: the CSV's rows.
        json_out, csv_out: the files (None: not asked for); figure: draws the figure and returns its path.
    """
    from geodrift.io.atomic import output_set, write_json

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
