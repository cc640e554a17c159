"""What ``drift`` and ``compare`` return to both faces: their reports with the view and gauge convention marked.

:class:`DriftResult` and :class:`CompareResult` are the scanner's :class:`~geodrift.scanner.series.DriftReport`
and :class:`~geodrift.scanner.series.CompareReport` (the same fields), and every row they give - JSON, CSV,
``summary()``, ``to_frame()`` - says three things a reader needs to read a number right:

- ``view``: the weights' view (``raw``, ``folded``, ``canonical``);
- ``gauge_fixing``: how the gauge was fixed across checkpoints (the report's own field where the scanner sets
  it; else what the view and ``--align`` imply, :func:`gauge_fixing`);
- ``gauge`` per projection and space: ``aligned`` where the view orders that space itself (the canonical view's
  head/hidden side), which is no measurement - the renderers show no number for it and count it nowhere; a
  cross-checkpoint number carries its own (:func:`cross_gauges`: in the canonical view every checkpoint is
  aligned to the reference, so its head and hidden side compare unit for unit and are measurements).

Example:
    >>> from geodrift.scanner.series import CompareReport
    >>> gauge_fixing(CompareReport("a", "b", 2, 4, 0, "raw", [], []))
    'none (raw weights)'
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from statistics import fmean
from typing import Any

from geodrift.continuity.report import PANDAS_HINT
from geodrift.errors import GeodriftError
from geodrift.gauge.status import ALIGNED
from geodrift.scanner.series import CompareReport, DriftReport

Series = DriftReport | CompareReport


def gauge_fixing(rep: Series) -> str:
    """How ``rep``'s cross-checkpoint numbers fixed the gauge: the report's ``gauge_fixing`` where it has one,
    else what its view and alignment imply.

    Example:
        >>> from geodrift.scanner.series import DriftReport
        >>> gauge_fixing(DriftReport(["a", "b"], 2, 4, 0, "canonical", [], []))
        'each in its own canonical form'
    """
    given = getattr(rep, "gauge_fixing", None)
    if given:
        return str(given)
    aligned = bool(rep.alignment)
    reference = "#0" if isinstance(rep, DriftReport) else "A"
    if rep.view == "canonical":
        return f"aligned to {reference}, then each canonical" if aligned else "each in its own canonical form"
    return f"aligned to {reference} (--align)" if aligned else f"none ({rep.view} weights)"


def space_gauges(rep: Series) -> dict[tuple[str, str], str]:
    """``(role, space) -> gauge status`` over ``rep``'s continuity reports: ``aligned`` where any report says so
    (then the space's cross-checkpoint numbers come from an ordering the view chose, not from the weights)."""
    out: dict[tuple[str, str], str] = {}
    for report in rep.reports:
        for role in report.roles:
            for space, continuity in role.spaces.items():
                if out.get((role.role, space)) != ALIGNED:
                    out[(role.role, space)] = continuity.gauge
    return out


def cross_gauges(rep: Series) -> dict[tuple[str, str], str]:
    """``(role, space) -> gauge status`` of ``rep``'s cross-checkpoint numbers (rotation rows, subspace rows): the
    status the scanner set on them (the canonical view aligns every checkpoint to the reference, so its head and
    hidden side are compared unit for unit and are ``invariant``), else :func:`space_gauges`'."""
    out = space_gauges(rep)
    rows = rep.rotation if isinstance(rep, DriftReport) else rep.subspaces
    for row in rows:
        given = getattr(row, "gauge", "unknown")
        if given != "unknown":
            out[(row.role, row.space)] = given
    return out


def is_aligned(rep: Series, role: str, space: str) -> bool:
    """Whether ``role``'s ``space`` is aligned by the view in ``rep`` (no measurement; shown as ``aligned``)."""
    return space_gauges(rep).get((role, space)) == ALIGNED


def _marked(rep: Series, rows: list[dict[str, Any]], role_key: str = "role") -> list[dict[str, Any]]:
    # Each row with the view, the gauge fixing and its space's gauge status (a field the scanner set is kept).
    gauges, fixing = space_gauges(rep), gauge_fixing(rep)
    return [{**row, "view": row.get("view", rep.view), "gauge_fixing": row.get("gauge_fixing", fixing),
             "gauge": row.get("gauge", gauges.get((row[role_key], row["space"]), "unknown"))} for row in rows]


def _frame(rows: list[dict[str, Any]], call: str) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise GeodriftError(f"{call} needs pandas, which is not installed; {PANDAS_HINT}") from None
    return pd.DataFrame(rows)


@dataclass(repr=False)
class DriftResult(DriftReport):
    """A training series (:class:`~geodrift.scanner.series.DriftReport`) whose rows name the view, the gauge
    fixing and each space's gauge status; ``summary()`` and ``to_frame()`` give them as DataFrames."""

    @classmethod
    def of(cls, rep: DriftReport) -> DriftResult:
        """``rep`` as a DriftResult (the same fields)."""
        return cls(**{f.name: getattr(rep, f.name) for f in fields(rep)})

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self.checkpoints)} checkpoints, {self.view} view, gauge fixing: "
                f"{gauge_fixing(self)}, k={self.k}, {self.null_draws} null draws)")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (kind ``drift_report``): the report's fields, ``gauge_fixing``, and each rotation row's
        ``gauge``."""
        out = super().to_dict()
        out.setdefault("gauge_fixing", gauge_fixing(self))
        gauges = space_gauges(self)
        for row in out["rotation"]:
            row.setdefault("gauge", gauges.get((row["role"], row["space"]), "unknown"))
        return out

    def continuity_rows(self) -> list[dict[str, Any]]:
        """One row per checkpoint, projection and space (continuity across depth) with ``view``, ``gauge_fixing``
        and ``gauge``; the verdict columns only on the spaces the verdicts judged, as every face says them."""
        rows = _marked(self, super().continuity_rows())
        judged = {(t, r.role): r for t, report in enumerate(self.reports) for r in report.roles}
        for row in rows:
            role = judged[(row["checkpoint"], row["role"])]
            frame, path = role.said()
            shown = row["space"] in role.judged_spaces()
            row["verdict"], row["path_verdict"] = (frame, path) if shown else (None, None)
        return rows

    def rotation_rows(self) -> list[dict[str, Any]]:
        """Tidy rows of the rotation (one per projection, space, layer and checkpoint t >= 1) with ``view``,
        ``gauge_fixing`` and ``gauge``."""
        return _marked(self, super().rotation_rows())

    def summary_rows(self) -> list[dict[str, Any]]:
        """One row per projection and space: the mean rotation from #0 to the last checkpoint (degrees) with the
        angle of the permutation null and of the random floor, the continuity at #0 and at the last checkpoint,
        and ``view``, ``gauge_fixing``, ``gauge``."""
        import math

        last = len(self.checkpoints) - 1
        continuity = {(r["checkpoint"], r["role"], r["space"]): r for r in self.continuity_rows()}
        out = []
        for role in self.reports[0].roles:
            for space in role.spaces:
                rows = [r for r in self.rotation if r.role == role.role and r.space == space and r.checkpoint == last]
                first, end = continuity.get((0, role.role, space)), continuity.get((last, role.role, space))
                out.append({
                    "projection": role.label, "role": role.role, "space": space,
                    "angle_deg": fmean(r.angle_deg for r in rows) if rows else math.nan,
                    "null_angle_deg": fmean(r.null_angle_deg for r in rows) if rows else math.nan,
                    "random_angle_deg": math.degrees(math.acos(rows[0].random_floor)) if rows else math.nan,
                    "abs_cos_first": first["abs_cos"] if first else math.nan,
                    "abs_cos_last": end["abs_cos"] if end else math.nan,
                    "null_mean_last": end["null_mean"] if end else math.nan,
                })
        return _marked(self, out)

    def summary(self) -> Any:
        """:meth:`summary_rows` as a pandas DataFrame (``gauge == "aligned"``: not a measurement)."""
        return _frame(self.summary_rows(), "DriftResult.summary()")

    def to_frame(self, kind: str = "rotation") -> Any:
        """``kind="rotation"`` (default): :meth:`rotation_rows`; ``"continuity"``: :meth:`continuity_rows`; as a
        pandas DataFrame.

        Raises:
            GeodriftError: an unknown ``kind``; pandas not installed.
        """
        kinds = {"rotation": self.rotation_rows, "continuity": self.continuity_rows}
        if kind not in kinds:
            raise GeodriftError(f"to_frame(kind={kind!r}): unknown kind; use one of {', '.join(kinds)}")
        return _frame(kinds[kind](), "DriftResult.to_frame()")


@dataclass(repr=False)
class CompareResult(CompareReport):
    """Two models compared (:class:`~geodrift.scanner.series.CompareReport`) whose rows name the view, the gauge
    fixing and each space's gauge status; ``summary()`` and ``to_frame()`` give them as DataFrames."""

    @classmethod
    def of(cls, rep: CompareReport) -> CompareResult:
        """``rep`` as a CompareResult (the same fields)."""
        return cls(**{f.name: getattr(rep, f.name) for f in fields(rep)})

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.a} vs {self.b}, {self.view} view, gauge fixing: {gauge_fixing(self)}, "
                f"top-{self.k} subspaces, {self.null_draws} null draws)")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (kind ``compare_report``): the report's fields, ``gauge_fixing``, each subspace row's
        ``gauge``."""
        out = super().to_dict()
        out.setdefault("gauge_fixing", gauge_fixing(self))
        gauges = space_gauges(self)
        for row in out["subspaces"]:
            row.setdefault("gauge", gauges.get((row["role"], row["space"]), "unknown"))
        return out

    def subspace_rows(self) -> list[dict[str, Any]]:
        """Tidy rows (one per projection, space and layer) with ``view``, ``gauge_fixing`` and ``gauge``."""
        return _marked(self, super().subspace_rows())

    def summary_rows(self) -> list[dict[str, Any]]:
        """One row per projection and space, means over layers: ``overlap`` (mean cos² of the principal angles)
        with its permutation null and ``k/d``, the mean principal angle, top-1 ``|cos|`` with its null and floor,
        ``above_null`` (layers whose overlap beats the null's mean + 3 sd, of ``layers``), and ``view``,
        ``gauge_fixing``, ``gauge``."""
        groups: dict[tuple[str, str], list[Any]] = {}
        for row in self.subspaces:
            groups.setdefault((row.role, row.space), []).append(row)
        out = []
        for (role, space), rows in groups.items():
            out.append({
                "projection": rows[0].label, "role": role, "space": space, "layers": len(rows), "k": rows[0].k,
                "overlap": fmean(r.overlap for r in rows), "overlap_null_mean": fmean(r.overlap_null_mean for r in rows),
                "overlap_random": rows[0].overlap_random,
                "mean_angle_deg": fmean(fmean(r.principal_angles_deg) for r in rows),
                "top1_abs_cos": fmean(r.top1_abs_cos for r in rows), "top1_null_mean": fmean(r.top1_null_mean for r in rows),
                "random_floor": rows[0].random_floor,
                "above_null": sum(r.overlap > r.overlap_null_mean + 3 * r.overlap_null_std for r in rows),
            })
        return _marked(self, out)

    def summary(self) -> Any:
        """:meth:`summary_rows` as a pandas DataFrame (``gauge == "aligned"``: not a measurement)."""
        return _frame(self.summary_rows(), "CompareResult.summary()")

    def to_frame(self) -> Any:
        """:meth:`subspace_rows` as a pandas DataFrame."""
        return _frame(self.subspace_rows(), "CompareResult.to_frame()")

    def measured_above_null(self) -> tuple[int, int]:
        """``(above, measured)``: the (projection, space, layer) subspaces that overlap above their permutation null
        (+3 sd), of those measured - ``aligned`` spaces are no measurement and are not counted."""
        gauges = cross_gauges(self)
        rows = [r for r in self.subspaces if gauges.get((r.role, r.space)) != ALIGNED]
        return sum(r.overlap > r.overlap_null_mean + 3 * r.overlap_null_std for r in rows), len(rows)
