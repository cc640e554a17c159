"""The files each command writes, named and derived from the names given, claimed together before the work.

``--csv s.csv`` also writes ``s.pairs.csv`` (scan) or ``s.rotation.csv`` (drift); ``--plot f.png`` also
writes ``f_trajectory.png``, ``f_experts.png`` (a mixture of experts) and ``f_gauge.png`` (``--full``),
or ``f_rotation.png`` and ``f_continuity.png`` (drift). A job claims the whole list
(:func:`geodrift.jobs.request.claim`) before its work; the renderers write to the same names.

Example:
    >>> [str(p) for _, p in scan_outputs(None, "s.csv", "f.png")]
    ['s.csv', 's.pairs.csv', 'f.png', 'f_trajectory.png', 'f_experts.png']
"""

from __future__ import annotations

from pathlib import Path


def pairs_csv_path(summary_path: str | Path) -> Path:
    """Where the long CSV goes beside the summary CSV: ``scan.csv`` -> ``scan.pairs.csv``."""
    path = Path(summary_path)
    stem = path.name[:-4] if path.name.lower().endswith(".csv") else path.name
    return path.with_name(f"{stem}.pairs.csv")


def trajectory_plot_path(path: str | Path) -> Path:
    """Where the trajectory figure goes beside the scan figure: ``scan.png`` -> ``scan_trajectory.png``."""
    path = Path(path)
    return path.with_name(f"{path.stem}_trajectory{path.suffix}")


def experts_plot_path(path: str | Path) -> Path:
    """Where the experts' figure goes beside the scan figure: ``scan.png`` -> ``scan_experts.png``."""
    path = Path(path)
    return path.with_name(f"{path.stem}_experts{path.suffix}")


def gauge_plot_path(plot: str | Path) -> Path:
    """``figs/scan.png`` -> ``figs/scan_gauge.png``."""
    plot = Path(plot)
    return plot.with_name(f"{plot.stem}_gauge{plot.suffix}")


def beside(path: str | Path, kind: str, suffix: str, sep: str = ".") -> Path:
    """A file named after ``path``: ``scan.csv`` -> ``scan.rotation.csv``; ``figs/s.png`` -> ``figs/s_rotation.png``.

    Example:
        >>> str(beside("figs/s.png", "rotation", ".png", "_"))
        'figs/s_rotation.png'
    """
    path = Path(path)
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    return path.with_name(f"{stem}{sep}{kind}{suffix}")


def scan_outputs(json_out: str | Path | None, csv_out: str | Path | None, plot: str | Path | None,
                 experts: bool = True, gauge: bool = False) -> list[tuple[str, Path]]:
    """Every file ``geodrift scan`` may write, named or derived, with the option that named it - the list
    :func:`geodrift.io.outdir.claim_outputs` checks before the work (a derived name is never a user's file).

    Args:
        json_out, csv_out, plot: the options (None: not asked for).
        experts: include the experts' figure (a mixture of experts; claimed once the model is open).
        gauge: include the gauge diagnosis figure (``NAME_gauge``; ``--full`` draws it).
    """
    outputs: list[tuple[str, Path]] = [("--json-out", Path(json_out))] if json_out is not None else []
    if csv_out is not None:
        outputs += [("--csv", Path(csv_out)), ("--csv", pairs_csv_path(csv_out))]
    if plot is not None:
        outputs += [("--plot", Path(plot)), ("--plot", trajectory_plot_path(plot))]
        outputs += [("--plot", experts_plot_path(plot))] if experts else []
        outputs += [("--plot", gauge_plot_path(plot))] if gauge else []
    return outputs


def drift_outputs(json_out: str | Path | None, csv_out: str | Path | None,
                  plot: str | Path | None) -> list[tuple[str, Path]]:
    """Every file ``geodrift drift`` may write: the JSON, ``NAME.csv`` and ``NAME.rotation.csv``, and the
    figures ``NAME_rotation.EXT`` and ``NAME_continuity.EXT``.

    Example:
        >>> [str(p) for _, p in drift_outputs(None, "d.csv", "f.svg")]
        ['d.csv', 'd.rotation.csv', 'f_rotation.svg', 'f_continuity.svg']
    """
    outputs: list[tuple[str, Path]] = [("--json-out", Path(json_out))] if json_out is not None else []
    if csv_out is not None:
        outputs += [("--csv", Path(csv_out)), ("--csv", beside(csv_out, "rotation", ".csv"))]
    if plot is not None:
        outputs += [("--plot", beside(plot, kind, Path(plot).suffix, "_")) for kind in ("rotation", "continuity")]
    return outputs


def compare_outputs(json_out: str | Path | None, csv_out: str | Path | None,
                    plot: str | Path | None) -> list[tuple[str, Path]]:
    """Every file ``geodrift compare`` may write: each as named."""
    named = (("--json-out", json_out), ("--csv", csv_out), ("--plot", plot))
    return [(option, Path(path)) for option, path in named if path is not None]
