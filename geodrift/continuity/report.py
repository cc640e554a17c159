"""The continuity report: plain dataclasses, JSON-able both ways (``to_dict`` / ``from_dict``).

One :class:`Report` per measured WeightSet: per role (projection) a :class:`RoleReport`, per space
(``v`` input, ``u`` output) a :class:`SpaceContinuity`, per singular-vector index ``k`` a
:class:`VectorContinuity`. Every similarity carries its two noise floors: the analytic random
baseline ``sqrt(2/(pi d))`` and the permutation null (mean, std, z).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from geodrift.continuity.trajectory import TrajectoryShape
from geodrift.errors import GeodriftError
from geodrift.gauge.status import ALIGNED
from geodrift.io.atomic import payload_of
from geodrift.weights import canonical_role

# What to_frame(kind=...) gives: the per-pair table, or the summary (one row per projection and space).
FRAME_KINDS = ("pairs", "summary")
# The summary's verdict columns, filled only on the rows of a space that a verdict judged.
VERDICT_COLUMNS = ("verdict", "criterion", "path_verdict", "path_criterion")
# V's verdicts as the faces say them (RoleReport.said): the theory predicts V neither frame nor path, so the
# prediction "holds" when none is found and "fails" when one is.
SAID = {"holds": "none", "fails": "found"}
# How to get pandas (summary(), to_frame()): from PyPI, and in a checkout's venv (scripts/setup.sh installs it).
PANDAS_HINT = "pip install pandas (in a checkout: .venv/bin/pip install -e '.[frame]', or bash scripts/setup.sh)"


@dataclass(frozen=True)
class VectorContinuity:
    """Eq. 1 for one singular-vector index ``k`` (1-based) in one space, with both floors.

    ``null_mean``/``null_std``/``z`` are the permutation null of the mean over pairs; the
    ``per_pair_null_*`` lists are each adjacent pair's own null (same draws), for per-pair z.
    """

    k: int
    per_pair: list[float]
    mean: float
    median: float
    baseline: float
    null_mean: float
    null_std: float
    z: float
    per_pair_null_mean: list[float] = field(default_factory=list)
    per_pair_null_std: list[float] = field(default_factory=list)

    @property
    def excess(self) -> float:
        """``mean - null_mean``: the continuity a shared frame explains."""
        return self.mean - self.null_mean


@dataclass(frozen=True)
class SpaceContinuity:
    """All continuity numbers of one role in one space (``v`` = input, ``u`` = output)."""

    space: str
    dim: int
    vectors: list[VectorContinuity]
    sigma2_wa: float  # mean over pairs of the truncated Eq. 2 (a lower bound when K < rank)
    sigma2_wa_upper: float  # + the left-out energy share: the full Eq. 2 is in [sigma2_wa, upper]
    sigma2_wa_per_pair: list[float]
    sigma2_null_mean: float
    sigma2_null_std: float
    sigma2_null_draws: int
    subspace_overlap: float  # mean cos^2 of principal angles of the top-K subspaces
    subspace_baseline: float  # K / dim: random K-subspaces
    # Whether the network's exact gauges leave these numbers unchanged in the report's view
    # (geodrift.gauge.status): "invariant", "varies" (moved_by names the gauges), "aligned" (head/hidden-side
    # vectors of the canonical view: aligned by construction, not continuity) or "unknown".
    gauge: str = "unknown"
    moved_by: list[str] = field(default_factory=list)
    # The null the numbers are judged against (geodrift.gauge.status.null_kind): "permutation" (coordinates
    # permuted, the paper's) or "rotation" (a uniformly random rotation: analytic, basis-free; the residual side
    # of the canonical view, whose coordinates no weight fixes).
    null: str = "permutation"


@dataclass(frozen=True)
class RoleReport:
    """Everything measured for one projection across its layers.

    Two verdicts (``geodrift.continuity.verdicts``): ``verdict`` is the *shared frame* (Eq. 1 beyond the
    permutation null in the predicted space: the paper's claim), ``path_verdict`` the *depth path*
    (nearby layers agree more than far ones); each with its criterion in words.
    """

    role: str
    label: str
    shape: tuple[int, int]
    layers: list[int]
    k: int
    spaces: dict[str, SpaceContinuity]
    erank_lower: list[float]
    erank_upper: list[float]
    predicted_space: str | None
    verdict: str
    criterion: str
    max_residual: float
    methods: dict[str, int]
    path_verdict: str  # "holds", "fails", "n/a", "no prediction" or "undefined"
    path_criterion: str

    def said(self) -> tuple[str, str]:
        """The frame and path verdicts as every table, file row and figure says them.

        A predicted space (Q, K, Gate, Up: v; O, Down, OV: u) keeps ``holds``/``fails``. V is predicted to have
        neither, so its "holds" is said ``none`` (no frame, or no path, as predicted) and its "fails" ``found``
        (one the theory did not predict); the JSON's ``verdict`` keeps the judged outcome (:data:`SAID`).

        Example:
            >>> role = RoleReport("attn_v", "V", (4, 4), [0, 1], 1, {}, [], [], None, "holds", "", 0.0, {}, "fails", "")
            >>> role.said()
            ('none', 'found')
        """
        if self.predicted_space is not None:
            return self.verdict, self.path_verdict
        return SAID.get(self.verdict, self.verdict), SAID.get(self.path_verdict, self.path_verdict)

    def judged_spaces(self) -> tuple[str, ...]:
        """The spaces this projection's verdicts judged: the predicted one, or both of V's (and both spaces of a
        projection without a prediction, whose "no prediction" concerns both); never an ``aligned`` space."""
        spaces = ("v", "u") if self.predicted_space is None or self.verdict == "no prediction" \
            else (self.predicted_space,)
        return tuple(x for x in spaces if x not in self.spaces or self.spaces[x].gauge != ALIGNED)


@dataclass(repr=False)
class Report:
    """A whole WeightSet's continuity report.

    ``provenance`` (set by ``geodrift scan`` and ``geodrift.scan``): geodrift's version, the command or
    Python call, the UTC time and the model's fingerprint (``geodrift.scanner.fingerprint``); None elsewhere.

    Example:
        >>> Report("tensors", "raw", 2, 10, 0, []).to_dict()["k"]
        2
        >>> Report("tensors", "raw", 2, 10, 0, [])
        Report(tensors, raw view, k=2, 10 null draws, seed 0)
          no projections measured
    """

    origin: str
    view: str
    k: int
    null_draws: int
    seed: int
    roles: list[RoleReport]
    notes: list[str] = field(default_factory=list)
    trajectory: list[TrajectoryShape] = field(default_factory=list)  # App. A.2, per role and space (scan)
    # Mixture of experts: each layer's experts compared with one another (geodrift.scanner.experts); a
    # RoleReport per expert family and layer whose ``layers`` are the experts, in index order.
    across_experts: list[RoleReport] = field(default_factory=list)
    provenance: dict[str, Any] | None = None

    def __repr__(self) -> str:
        head = f"{type(self).__name__}({self.origin}, {self.view} view, k={self.k}, " \
               f"{self.null_draws} null draws, seed {self.seed})"
        if not self.roles:
            return f"{head}\n  no projections measured"
        layers = sorted({layer for r in self.roles for layer in r.layers})
        lines = [head, f"  {len(self.roles)} projections ({' '.join(r.label for r in self.roles)}) over "
                       f"{len(layers)} layers {layers[0]}..{layers[-1]}"]
        for name, attr in (("shared frame", "verdict"), ("depth path", "path_verdict")):
            counts: dict[str, int] = {}
            for r in self.roles:
                counts[getattr(r, attr)] = counts.get(getattr(r, attr), 0) + 1
            lines.append(f"  {name}: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
        if self.across_experts:
            lines.append(f"  experts compared within {len(self.across_experts)} layer families")
        if self.provenance:
            lines.append(f"  from {self.provenance.get('call', '?')} at {self.provenance.get('written', '?')}")
        return "\n".join(lines)

    def role(self, name: str) -> RoleReport | None:
        """The report of projection ``name``: a ``--roles`` name (``q``, ``attn_q``, ``Gate``) or a measured role
        (``attn_ov``); None when it was not measured.

        Example:
            >>> Report("tensors", "raw", 2, 10, 0, []).role("q") is None
            True
        """
        canonical = canonical_role(name)
        return next((r for r in self.roles if r.role in (name, canonical)), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (tuples become lists)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> Report:
        """Inverse of :meth:`to_dict`; reads every continuity report geodrift writes: ``scan --json-out`` (with
        ``--full``, whose ``gauge_diagnosis`` it leaves to :meth:`geodrift.jobs.scan.ScanResult.from_dict`),
        ``simulate --out``'s ``report.json``, a bare :meth:`to_dict`. Non-finite numbers written as null come back
        (the ``nonfinite`` note); keys a later MINOR schema version adds are skipped.

        Raises:
            GeodriftError: when the payload is not a continuity report, or a newer MAJOR schema's.
        """
        from geodrift.io.documents import from_jsonable, read_document

        if isinstance(payload, dict) and "kind" in payload and "schema_version" in payload:
            payload = read_document(payload, kinds=("continuity_report",))
        if not isinstance(payload, dict) or not isinstance(payload.get("roles"), list):
            raise GeodriftError("not a geodrift continuity report (no 'roles' list); pass what geodrift scan "
                                "--json-out or Report.to_dict wrote")
        try:
            report = from_jsonable(cls, payload_of(payload))
        except GeodriftError as error:
            raise GeodriftError(f"not a geodrift continuity report ({error})") from None
        assert isinstance(report, cls)
        return report

    def rows(self) -> list[dict[str, Any]]:
        """Flat rows (one per role, space and k) for CSV output; experts compared within a layer
        (``across_experts``) follow, their ``layers`` column counting the experts. The verdict columns are
        filled on the rows of the spaces the verdicts judged (:meth:`RoleReport.judged_spaces`), as said
        (:meth:`RoleReport.said`); an ``aligned`` space's numbers are there, marked by its ``gauge`` column."""
        out = []
        for r in self.roles + self.across_experts:
            for s in r.spaces.values():
                for vc in s.vectors:
                    out.append({
                        "model": self.origin, "view": self.view, "role": r.role, "label": r.label,
                        "layers": len(r.layers), "space": s.space, "dim": s.dim, "k": vc.k,
                        "mean": vc.mean, "median": vc.median, "baseline": vc.baseline,
                        "null_mean": vc.null_mean, "null_std": vc.null_std, "z": vc.z,
                        "sigma2_wa": s.sigma2_wa, "sigma2_wa_upper": s.sigma2_wa_upper,
                        "sigma2_null_mean": s.sigma2_null_mean,
                        "subspace_overlap": s.subspace_overlap, "subspace_baseline": s.subspace_baseline,
                        "gauge": s.gauge, "moved_by": " ".join(s.moved_by),
                        "predicted_space": r.predicted_space or "none",
                        **_verdict_cells(r, s.space),
                    })
        return out

    def summary_rows(self) -> list[dict[str, Any]]:
        """One row per projection and space: the ``k = 1`` rows of :meth:`rows` (the summary CSV's columns,
        named as the JSON fields), verdicts (as :meth:`RoleReport.said` says them: V's ``none``/``found``) and
        criteria on the rows of the space(s) they judged (the predicted space; both of V's); None on a space no
        verdict judged, an ``aligned`` space among them ("no prediction" stays on both rows of a projection the
        theory says nothing about)."""
        return [row for row in self.rows() if row["k"] == 1]

    def summary(self) -> Any:
        """The summary table: one row per projection and space (:meth:`summary_rows`).

        Columns: ``model``, ``view``, ``role``, ``label``, ``layers``, ``space``, ``dim``, ``k`` (1),
        ``mean`` (Eq. 1, mean |cos| over adjacent pairs), ``median``, ``baseline`` (``sqrt(2/(pi d))``),
        ``null_mean``, ``null_std``, ``z`` (its permutation null), ``sigma2_wa``, ``sigma2_wa_upper``,
        ``sigma2_null_mean``, ``subspace_overlap``, ``subspace_baseline``, ``gauge`` (whether exact
        reparametrisations leave the row's numbers unchanged in this view: ``invariant``, ``varies``,
        ``aligned`` or ``unknown``; :mod:`geodrift.gauge.status`), ``moved_by`` (the gauges that move
        them, space-separated), ``predicted_space``,
        ``verdict`` and ``criterion`` (shared frame), ``path_verdict`` and ``path_criterion`` (depth path).

        Returns:
            A ``pandas.DataFrame``, always (:meth:`summary_rows` is the same rows as a list of dicts, without pandas).

        Raises:
            GeodriftError: pandas is not installed (one line naming :data:`PANDAS_HINT`).

        Example:
            >>> Report("tensors", "raw", 2, 10, 0, []).summary_rows()
            []
        """
        return self.to_frame(kind="summary")

    def pair_rows(self) -> list[dict[str, Any]]:
        """Tidy rows for the long CSV: one per (projection, space, k, adjacent layer pair).

        Each row holds the pair's ``|cos|`` (``abs_cos``), that pair's permutation-null mean and
        std, its z against them and the analytic floor ``sqrt(2/(pi d))``. Reports written before
        per-pair nulls existed give NaN for those three columns.
        """
        out = []
        for r in self.roles:
            for s in r.spaces.values():
                for vc in s.vectors:
                    for i, value in enumerate(vc.per_pair):
                        mean = vc.per_pair_null_mean[i] if i < len(vc.per_pair_null_mean) else float("nan")
                        std = vc.per_pair_null_std[i] if i < len(vc.per_pair_null_std) else float("nan")
                        out.append({
                            "model": self.origin, "view": self.view, "projection": r.label, "role": r.role,
                            "space": s.space, "dim": s.dim, "k": vc.k, "layer": r.layers[i],
                            "next_layer": r.layers[i + 1], "abs_cos": value, "null_mean": mean, "null_std": std,
                            "z": (value - mean) / max(std, 1e-12) if std == std else float("nan"),
                            "random_floor": vc.baseline, "null_draws": self.null_draws,
                        })
        return out

    def to_frame(self, kind: str = "pairs") -> Any:
        """The tidy per-pair table as a pandas DataFrame (the rows of :meth:`pair_rows`); ``kind="summary"``:
        the summary instead (:meth:`summary`'s columns).

        One row per projection, space, k and adjacent layer pair: ``abs_cos`` (the statistic),
        ``null_mean``/``null_std`` (that pair's permutation null), ``z`` and ``random_floor``
        (``sqrt(2/(pi d))``), plus ``model``, ``view``, ``projection``, ``role``, ``space``, ``dim``,
        ``k``, ``layer``, ``next_layer``, ``null_draws``.

        Args:
            kind: ``"pairs"`` (default) or ``"summary"``.

        Returns:
            ``pandas.DataFrame`` with those columns.

        Raises:
            GeodriftError: an unknown ``kind``; pandas not installed (:data:`PANDAS_HINT`).

        Example:
            >>> import torch
            >>> from geodrift.continuity import MeasureSpec, measure
            >>> from geodrift.weights import WeightSet
            >>> g = torch.Generator().manual_seed(0)
            >>> ws = WeightSet.from_tensors({("block", i): torch.randn(6, 6, generator=g) for i in range(3)})
            >>> frame = measure(ws, MeasureSpec(k=1, null_draws=4)).to_frame()
            >>> frame.groupby(["projection", "space"]).abs_cos.count().tolist()  # 2 adjacent pairs per space
            [2, 2]
        """
        if kind not in FRAME_KINDS:
            raise GeodriftError(f"to_frame(kind={kind!r}): unknown kind; use one of {', '.join(FRAME_KINDS)}")
        try:
            import pandas as pd
        except ImportError:
            call = "summary()" if kind == "summary" else "to_frame()"
            raise GeodriftError(f"Report.{call} needs pandas, which is not installed; {PANDAS_HINT}") from None
        if kind == "summary":
            return pd.DataFrame(self.summary_rows())
        rows = self.pair_rows()
        columns = list(rows[0]) if rows else ["model", "view", "projection", "role", "space", "dim", "k", "layer",
                                              "next_layer", "abs_cos", "null_mean", "null_std", "z",
                                              "random_floor", "null_draws"]
        return pd.DataFrame(rows, columns=columns)

    def series(self) -> list[tuple[str, str, str | None, int | None, int | None, float]]:
        """Tidy ``(role, metric, space, k, layer, value)`` tuples: what a tracker records over training.

        Metrics: ``cont`` (Eq. 1 mean over pairs), ``null_mean``, ``null_std`` and ``z`` (its
        permutation null) per ``k``; ``s2wa``, ``s2wa_null_mean``, ``s2wa_null_std`` (Eq. 2 and its
        null); ``erank`` per layer and its mean over layers (``layer=None``; the lower bound, equal
        to Eq. 3 when the full spectrum was measured).
        """
        out: list[tuple[str, str, str | None, int | None, int | None, float]] = []
        for r in self.roles:
            for s in r.spaces.values():
                for vc in s.vectors:
                    for metric, value in (("cont", vc.mean), ("null_mean", vc.null_mean),
                                          ("null_std", vc.null_std), ("z", vc.z)):
                        out.append((r.role, metric, s.space, vc.k, None, value))
                for metric, value in (("s2wa", s.sigma2_wa), ("s2wa_null_mean", s.sigma2_null_mean),
                                      ("s2wa_null_std", s.sigma2_null_std)):
                    out.append((r.role, metric, s.space, None, None, value))
            for layer, value in zip(r.layers, r.erank_lower, strict=True):
                out.append((r.role, "erank", None, None, layer, value))
            out.append((r.role, "erank", None, None, None, sum(r.erank_lower) / len(r.erank_lower)))
        return out


def _verdict_cells(role: RoleReport, space: str) -> dict[str, str | None]:
    # The verdict columns of one space's rows: the verdicts as said (RoleReport.said) on a space they judged,
    # None on the others (the predicted space's partner, an aligned space).
    if space not in role.judged_spaces():
        return dict.fromkeys(VERDICT_COLUMNS)
    frame, path = role.said()
    return {"verdict": frame, "path_verdict": path, "criterion": role.criterion, "path_criterion": role.path_criterion}
