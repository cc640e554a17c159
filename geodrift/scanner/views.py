"""One checkpoint in several views side by side: each prediction's number, noise floor, verdicts and gauge status.

The paper predicts, per projection, the space whose top singular vector is shared across layers: v1
(input) for Q, K, Gate and Up, u1 (output) for O, Down and the OV composite, neither for V (whose v1 the
paper quotes as its low control). :func:`compare_views` scans a checkpoint in each view (``raw``: the
paper's metric; ``folded``: the norm gains folded in; ``canonical``: every layer at the canonical point
of its gauge orbit, :mod:`geodrift.scanner.canonical_view`) and :class:`ViewComparison` lays the eight
numbers out side by side, each with its permutation null (mean ± sd, z), both verdicts (shared frame,
depth path) and its gauge status in that view (:mod:`geodrift.gauge.status`: ``invariant`` numbers are
identical for any two checkpoints that differ by an exact gauge; ``varies`` ones are moved by the
gauges ``moved_by`` names).

A reference column (e.g. the paper's values) can be attached by the caller; it is shown, never used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from geodrift.continuity import MeasureSpec, Report
from geodrift.errors import GeodriftError
from geodrift.scanner.scan import load_weights, scan

VIEW_ORDER = ("raw", "folded", "canonical")
# The paper's eight predictions: (role, the space whose top vector it reports).
PREDICTIONS = (("attn_q", "v"), ("attn_k", "v"), ("mlp_gate", "v"), ("mlp_up", "v"), ("attn_o", "u"),
               ("mlp_down", "u"), ("attn_ov", "u"), ("attn_v", "v"))


@dataclass(frozen=True)
class ViewCell:
    """One prediction's number in one view: Eq. 1's mean of the top vector, its permutation null, the
    verdicts of its projection and whether exact gauges move it (``gauge``, ``moved_by``)."""

    mean: float
    null_mean: float
    null_std: float
    z: float
    verdict: str
    path_verdict: str
    gauge: str
    moved_by: list[str]


@dataclass(frozen=True)
class ViewRow:
    """One prediction across the views; ``reference`` is the attached reference value (None: none)."""

    role: str
    label: str
    space: str
    predicted: str | None  # the space the verdicts judge (None: a control, V)
    cells: dict[str, ViewCell]
    reference: float | None = None


@dataclass
class ViewComparison:
    """The predictions of one checkpoint in several views (:func:`compare_views`).

    Attributes:
        origin: the checkpoint.
        views: the views, in column order.
        rows: one per prediction the reports hold, in :data:`PREDICTIONS` order.
        reference_name: what the reference column is (e.g. ``paper, Llama-3.1-8B``); empty: none.
        spec: k, null draws and seed of every scan (``MeasureSpec`` fields).
        layers: the layers scanned.

    Example:
        >>> from geodrift.continuity import MeasureSpec
        >>> cmp = compare_views(None, MeasureSpec(k=2, null_draws=4), layers=[0, 1, 2], views=("raw", "folded"))
        >>> [r.label for r in cmp.rows][:2], sorted(cmp.rows[0].cells)
        (['Q', 'K'], ['folded', 'raw'])
    """

    origin: str
    views: tuple[str, ...]
    rows: list[ViewRow]
    reference_name: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    layers: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, reports: dict[str, Report], reference: dict[str, float] | None = None,
           reference_name: str = "") -> ViewComparison:
        """Lay out already-scanned reports (one per view, in column order; the same checkpoint and spec).

        Raises:
            GeodriftError: no reports, or reports of different checkpoints.
        """
        if not reports:
            raise GeodriftError("compare_views: no view to compare; pass at least one of raw, folded, canonical")
        origins = {r.origin for r in reports.values()}
        if len(origins) > 1:
            raise GeodriftError(f"compare_views: the reports are of different checkpoints ({', '.join(sorted(origins))})")
        views = tuple(reports)  # the columns, in the order given
        by_view = {view: {r.role: r for r in reports[view].roles} for view in views}
        rows = []
        for role, space in PREDICTIONS:
            cells = {}
            for view in views:
                found = by_view[view].get(role)
                if found is None:
                    continue
                s = found.spaces[space]
                v = s.vectors[0]
                cells[view] = ViewCell(v.mean, v.null_mean, v.null_std, v.z, found.verdict, found.path_verdict,
                                       s.gauge, list(s.moved_by))
            if cells:
                first = next(r for view in views if (r := by_view[view].get(role)) is not None)
                rows.append(ViewRow(role, first.label, space, first.predicted_space, cells,
                                    (reference or {}).get(role)))
        some = next(iter(reports.values()))
        layers = sorted({layer for r in some.roles for layer in r.layers})
        return cls(some.origin, views, rows, reference_name if reference else "",
                   {"k": some.k, "null_draws": some.null_draws, "seed": some.seed}, layers)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``origin``, ``views``, ``reference_name``, ``spec``, ``layers`` and ``rows`` (each with
        ``cells`` per view)."""
        return asdict(self)

    def flips(self) -> list[str]:
        """The predictions whose verdict (frame or path) differs between two views, as ``"Q frame"``."""
        out = []
        for row in self.rows:
            for name, attr in (("frame", "verdict"), ("path", "path_verdict")):
                if len({getattr(c, attr) for c in row.cells.values()}) > 1:
                    out.append(f"{row.label} {name}")
        return out


def compare_views(model: str | Path | None, spec: MeasureSpec, *, views: tuple[str, ...] = VIEW_ORDER,
                  layers: list[int] | None = None, reports: dict[str, Report] | None = None,
                  reference: dict[str, float] | None = None, reference_name: str = "") -> ViewComparison:
    """Scan ``model`` (None: the embedded SmolLM2-135M) in each of ``views`` and lay the predictions out.

    Args:
        model: a checkpoint path, or None for the embedded model.
        spec: what to measure (the same for every view).
        views: the views, in column order.
        layers: the layers to scan (None: all).
        reports: views already scanned with ``spec`` (reused, not scanned again).
        reference, reference_name: a reference value per role and what it is (shown only).

    Returns:
        The :class:`ViewComparison`.

    Raises:
        GeodriftError: an unreadable model; ``canonical`` on an architecture whose gauge group is not derived.
    """
    done = dict(reports or {})
    for view in views:
        if view not in done:
            ws, heads = load_weights(model, view, None, None, layers)
            done[view] = scan(ws, spec, heads=heads)
    return ViewComparison.of({view: done[view] for view in views}, reference, reference_name)
