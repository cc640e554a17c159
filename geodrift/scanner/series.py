"""Scan jobs over several checkpoints: a training series (``geodrift drift``) and a pair (``geodrift compare``).

Each checkpoint is opened, streamed and decomposed once (the scan's own path: top-k Lanczos with a
residual check, the OV composite when the config names the heads), its continuity Report assembled
from those triplets, and only the top-k vectors kept; the cross-checkpoint numbers
(``geodrift.continuity.series``) are computed from them. Time and memory grow linearly with the
number of checkpoints.

The gauge is fixed once for the series (``gauge_fixing`` in the reports says how): in the canonical view (the
default where the gauge group is derived) the reference (checkpoint 0, or A) is canonical and every other
checkpoint canonical *and aligned to it* (:mod:`geodrift.scanner.series_gauge`: exact and continuous); no
checkpoint's own canonical tie-break enters a cross-checkpoint number. ``--view raw`` is the paper's metric (no
gauge fixed); ``--view folded`` folds the gains, and ``--align`` then aligns every checkpoint to the first
(:mod:`geodrift.scanner.aligned`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from geodrift.continuity import MeasureSpec, Report, assemble, decompose
from geodrift.continuity.series import RotationRow, Spectra, SubspaceRow, rotation_drift, subspace_comparison
from geodrift.errors import GeodriftError
from geodrift.gauge.align import DEFAULT_HEAD_MAPS, HEAD_MAPS, AlignmentReport
from geodrift.linalg import SVDTriplets
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.distributed import check_backend, on_ray, svd_workers
from geodrift.scanner.open import open_model
from geodrift.scanner.preflight import check_layers, check_plan
from geodrift.scanner.readers import weightset
from geodrift.scanner.scan import heads_of, ov_composite_hook
from geodrift.scanner.series_gauge import ReferenceStore, aligned_weightset, reference_weightset
from geodrift.weights import WeightSet

Progress = Callable[[str], None]


@dataclass
class DriftReport:
    """A training series: each checkpoint's continuity Report and every layer's rotation from the first."""

    checkpoints: list[str]
    k: int
    null_draws: int
    seed: int
    view: str
    reports: list[Report]
    rotation: list[RotationRow]
    notes: list[str] = field(default_factory=list)
    alignment: list[AlignmentReport] = field(default_factory=list)  # each checkpoint after the first, when aligned
    gauge_fixing: str = ""  # in words, which gauge fixing produced the numbers (e.g. "canonical, aligned to ...")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (see docs/output-schema.md, kind ``drift_report``)."""
        return asdict(self)

    def continuity_rows(self) -> list[dict[str, Any]]:
        """One row per checkpoint, projection and space: v1/u1 continuity across depth with its floors."""
        out = []
        for t, (label, report) in enumerate(zip(self.checkpoints, self.reports, strict=True)):
            for r in report.roles:
                for s in r.spaces.values():
                    vc = s.vectors[0]
                    out.append({"checkpoint": t, "model": label, "projection": r.label, "role": r.role,
                                "space": s.space, "dim": s.dim, "abs_cos": vc.mean, "null_mean": vc.null_mean,
                                "null_std": vc.null_std, "z": vc.z, "random_floor": vc.baseline,
                                "verdict": r.verdict, "path_verdict": r.path_verdict})
        return out

    def rotation_rows(self) -> list[dict[str, Any]]:
        """Tidy rows of :attr:`rotation` (one per projection, space, layer and checkpoint t >= 1)."""
        return [{"model": self.checkpoints[r.checkpoint], **asdict(r)} for r in self.rotation]


@dataclass
class CompareReport:
    """Two models: each one's continuity Report and, per projection, space and layer, their subspace angles."""

    a: str
    b: str
    k: int
    null_draws: int
    seed: int
    view: str
    reports: list[Report]
    subspaces: list[SubspaceRow]
    notes: list[str] = field(default_factory=list)
    alignment: AlignmentReport | None = None  # what was recovered, when aligned
    gauge_fixing: str = ""  # in words, which gauge fixing produced the numbers

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (see docs/output-schema.md, kind ``compare_report``)."""
        return asdict(self)

    def subspace_rows(self) -> list[dict[str, Any]]:
        """Tidy rows of :attr:`subspaces`; the principal angles as one ``;``-separated cell."""
        out = []
        for row in self.subspaces:
            d = asdict(row)
            d["principal_angles_deg"] = ";".join(f"{x:.4f}" for x in row.principal_angles_deg)
            out.append({"a": self.a, "b": self.b, **d})
        return out


def plan_checkpoint(model: Any, spec: MeasureSpec, *, view: str | None = None, roles: list[str] | None = None,
                    layers: list[int] | None = None, ov: bool = True, names: str | Path | None = None,
                    max_memory: int | None = None) -> tuple[WeightSet, tuple[int, int] | None]:
    """Open one checkpoint's headers: the selected projections and head counts, checked before any tensor is read.

    Args:
        model, view, roles, layers, ov, names: as :func:`decompose_checkpoint`.
        spec: the measurement (its ``k`` and null draws enter the memory estimate).
        max_memory: with a limit (the CLI's ``--max-memory``, bytes), ``--layers`` must name layers the
            model has, ``--k`` must not exceed a matrix's rank, and the estimate must fit.

    Returns:
        ``(weights, heads)``: the selection (headers only) and ``(n_heads, n_kv_heads)`` or None.

    Raises:
        GeodriftError: an unreadable input; with ``max_memory``, one of the checks above.
    """
    ckpt = model if isinstance(model, Checkpoint) else open_model(model, names)  # --align: aligned in memory
    full = weightset(ckpt, view=view)
    ws = full.select(roles, layers)
    heads = heads_of(ckpt) if ov else None
    if max_memory is not None:
        check_layers(layers, sorted({layer for role in full.roles() for layer in full.layers(role)}), ws.origin)
        check_plan(ws, spec, heads if heads is not None and {"attn_v", "attn_o"} <= set(ws.roles()) else None,
                   max_memory)
    return ws, heads


def check_same_shapes(plans: list[WeightSet], command: str, same_layers: bool) -> None:
    """Refuse checkpoints whose shared projections differ in shape (or, with ``same_layers``, in layers).

    Raises:
        GeodriftError: one line naming the projection, both shapes and both checkpoints.
    """
    first = plans[0]
    for other in plans[1:]:
        for role in sorted(set(first.roles()) & set(other.roles())):
            a, b = first.shape(role), other.shape(role)
            if a != b:
                raise GeodriftError(f"{command}: {role} is {a[0]}x{a[1]} in {first.origin} but {b[0]}x{b[1]} in "
                                    f"{other.origin}; {command} needs checkpoints of one architecture and width")
            la, lb = first.layers(role), other.layers(role)
            if same_layers and la != lb:
                raise GeodriftError(f"{command}: {role} has layers {_span(la)} in {first.origin} but {_span(lb)} in "
                                    f"{other.origin}; {command} needs checkpoints of one training run")


def _span(layers: list[int]) -> str:
    return f"{layers[0]}..{layers[-1]} ({len(layers)})" if layers else "none"


def decompose_checkpoint(model: Any, spec: MeasureSpec, *, view: str | None = None, roles: list[str] | None = None,
                         layers: list[int] | None = None, ov: bool = True, names: str | Path | None = None,
                         progress: Progress | None = None, max_memory: int | None = None,
                         reference: ReferenceStore | None = None, head_maps: str = DEFAULT_HEAD_MAPS,
                         ) -> tuple[Report, Spectra, AlignmentReport | None]:
    """Read one checkpoint once: its continuity Report, its top-``spec.k`` triplets and, with a ``reference``
    (the canonical series, :mod:`geodrift.scanner.series_gauge`), what its alignment to it recovered.

    Raises:
        GeodriftError: any unreadable input, fewer than 2 layers; with ``max_memory``, the checks of
            :func:`plan_checkpoint`.
    """
    ws, heads = plan_checkpoint(model, spec, view=view, roles=roles, layers=layers, ov=ov, names=names,
                                max_memory=max_memory)
    if reference is None:
        report, kept = _measure(ws, heads, spec, progress)
        return report, kept, None
    ckpt = model if isinstance(model, Checkpoint) else open_model(model, names)
    aligned, source = aligned_weightset(ckpt, reference, head_maps, layers)
    report, kept = _measure(aligned.select(roles, layers), heads, spec, progress, source.rotated)
    return report, kept, source.report()


def _measure(ws: WeightSet, heads: tuple[int, int] | None, spec: MeasureSpec, progress: Progress | None,
             turn: Callable[[Spectra], Spectra] | None = None) -> tuple[Report, Spectra]:
    # decomposed, turned into the reference's residual frame (an aligned checkpoint: turn), assembled, truncated
    derive = ov_composite_hook(*heads) if heads is not None and {"attn_v", "attn_o"} <= set(ws.roles()) else None
    spectra = decompose(ws, spec, progress, derive)
    if turn is not None:
        spectra = turn(spectra)
    report = assemble(spectra, spec, ws.origin, ws.view, trajectory=True)
    report.notes += ws.notes
    kept = {key: SVDTriplets(t.U[:, :spec.k].clone(), t.S[:spec.k].clone(), t.Vh[:spec.k].clone(), t.frobenius_sq,
                             t.residual, t.method) for key, t in spectra.items()}
    return report, kept


def drift(models: list[Any], spec: MeasureSpec, *, progress: Progress | None = None, backend: str = "local",
          address: str | None = None, align: bool = False, head_maps: str = DEFAULT_HEAD_MAPS,
          **options: Any) -> DriftReport:
    """A training series: continuity of each checkpoint and each layer's v1/u1 rotation from the first.

    Args:
        models: at least 2 checkpoints (paths, modules or state dicts), in training order.
        spec: k, null draws, seed (shared by every checkpoint).
        progress: called after each matrix.
        backend: ``local`` (one checkpoint after another) or ``ray`` (one Ray task per checkpoint, at
            ``address`` or on a local cluster; bitwise the local numbers, see :mod:`geodrift.scanner.distributed`;
            in the canonical view the reference is read here and the others on Ray).
        address: an existing Ray cluster (``ray`` only).
        align: ``raw``/``folded`` views: bring every checkpoint into the first one's gauge first
            (:mod:`geodrift.scanner.aligned`); the canonical view aligns every checkpoint anyway.
        head_maps: the per-head V/O and Q/K maps of the alignment: ``orthogonal`` (default), ``general`` or
            ``none`` (:data:`geodrift.gauge.align.DEFAULT_HEAD_MAPS` says why).
        options: :func:`decompose_checkpoint`'s ``view``, ``roles``, ``layers``, ``ov``, ``names``,
            ``max_memory`` (``view`` None, the default: canonical where every model's gauge group is derived,
            else raw with a note).

    Returns:
        DriftReport.

    Raises:
        GeodriftError: fewer than 2 checkpoints, a checkpoint that cannot be read, checkpoints whose
            projections differ in shape or layers (checked from the headers, before any SVD).
    """
    if len(models) < 2:
        raise GeodriftError(f"drift: needs at least 2 checkpoints of one training run, got {len(models)}")
    models, plans, options, notes, alignment = _prepared(models, spec, align, head_maps, options, "drift")
    check_same_shapes(plans, "drift", same_layers=True)
    if not any(len(plans[0].layers(role)) >= 2 for role in plans[0].roles()):
        raise GeodriftError(f"drift: no projection of {plans[0].origin} has 2 or more selected layers; continuity "
                            "compares adjacent layers - select at least 2 (--layers)")
    reports, series, aligned = _decompose_series(models, plans[0].view, spec, progress, backend, address, options,
                                                 head_maps)
    alignment = alignment or aligned
    notes += _shape_notes(series) + [f"checkpoint {t}: {rep.summary()}" for t, rep in enumerate(alignment, 1)]
    view = reports[0].view
    fixing = gauge_fixing(view, bool(alignment), "checkpoint 0", head_maps)
    return DriftReport([r.origin for r in reports], spec.k, spec.null_draws, spec.seed, view, reports,
                       rotation_drift(series, spec.null_draws, spec.seed, view), [f"gauge fixing: {fixing}", *notes],
                       alignment, fixing)


def compare(a: Any, b: Any, spec: MeasureSpec, *, progress: Progress | None = None, backend: str = "local",
            address: str | None = None, align: bool = False, head_maps: str = DEFAULT_HEAD_MAPS,
            **options: Any) -> CompareReport:
    """Two models (base vs fine-tune, a model vs its compressed copy): principal angles of top-k subspaces.

    Args:
        a, b: the models (paths, modules or state dicts).
        spec: ``k`` is the subspace dimension; null draws and seed as the scan's.
        progress: called after each matrix.
        backend, address: as :func:`drift`'s (one Ray task per model).
        align: as :func:`drift`'s (B into A's gauge).
        head_maps: as :func:`drift`'s.
        options: :func:`decompose_checkpoint`'s ``view``, ``roles``, ``layers``, ``ov``, ``names``,
            ``max_memory`` (``view`` None, the default: canonical where every model's gauge group is derived,
            else raw with a note).

    Returns:
        CompareReport.

    Raises:
        GeodriftError: an unreadable model, shared projections of different shapes (from the headers,
            before any SVD), or no projection in common.
    """
    models, plans, options, notes, alignment = _prepared([a, b], spec, align, head_maps, options, "compare")
    check_same_shapes(plans, "compare", same_layers=False)
    (report_a, report_b), (spectra_a, spectra_b), aligned = _decompose_series(
        models, plans[0].view, spec, progress, backend, address, options, head_maps)
    alignment = alignment or aligned
    view = report_a.view
    rows = subspace_comparison(spectra_a, spectra_b, spec.k, spec.null_draws, spec.seed, view)
    if not rows:
        raise GeodriftError(f"compare: {report_a.origin} and {report_b.origin} share no projection of the same shape "
                            "and layers; compare checkpoints of one architecture")
    fixing = gauge_fixing(view, bool(alignment), "A", head_maps)
    return CompareReport(report_a.origin, report_b.origin, spec.k, spec.null_draws, spec.seed, view,
                         [report_a, report_b], rows, [f"gauge fixing: {fixing}", *notes]
                         + _shape_notes([spectra_a, spectra_b]) + [r.summary() for r in alignment],
                         alignment[0] if alignment else None, fixing)


def gauge_fixing(view: str, aligned: bool, reference: str, head_maps: str) -> str:
    """In words, which gauge fixing produced a series' numbers (``DriftReport.gauge_fixing``).

    Example:
        >>> gauge_fixing("folded", False, "checkpoint 0", "orthogonal")
        'folded: norm gains folded, no gauge fixed (exact reparametrisations move these numbers)'
    """
    maps = {"orthogonal": "a rotation per head and RoPE pair", "general": "least-squares per-head maps",
            "none": "no per-head maps"}[head_maps]
    if view == "canonical":
        return (f"canonical, aligned to {reference}: every checkpoint at the canonical point of its orbit (balanced), "
                f"then brought to the point nearest the reference by the residual rotation of the token rows, head "
                f"and signed hidden-unit permutations and {maps} (exact and continuous)")
    if aligned:
        return (f"{view}, aligned to {reference}: norm gains folded, then B brought into the reference's gauge "
                f"(residual rotation, permutations, scales, {maps})")
    if view == "folded":
        return "folded: norm gains folded, no gauge fixed (exact reparametrisations move these numbers)"
    return "none: the raw weights as stored, the paper's metric (exact reparametrisations move these numbers)"


def _plans_in_one_view(models: list[Any], spec: MeasureSpec, options: dict[str, Any]
                       ) -> tuple[list[WeightSet], dict[str, Any], list[str]]:
    # Every model's plan in one view. The default (view None) is canonical only where every model's gauge group
    # is derived; else all are read raw, and the reports carry the note saying why (once).
    plans = [plan_checkpoint(m, spec, **options)[0] for m in models]
    notes = list(dict.fromkeys(note for plan in plans for note in plan.notes))
    if len({plan.view for plan in plans}) > 1:
        options = {**options, "view": "raw"}
        plans = [plan_checkpoint(m, spec, **options)[0] for m in models]
    why = _series_alignment_refusal(plans)
    if why is not None:
        if options.get("view") == "canonical":
            raise GeodriftError(f"--view canonical: {why}; use --view folded (or raw)")
        notes.append(f"view: folded, the series' default where its alignment is not derived - {why}; exact "
                     "reparametrisations can move these numbers")
        options = {**options, "view": "folded"}
        plans = [plan_checkpoint(m, spec, **options)[0] for m in models]
    return plans, options, notes


def _series_alignment_refusal(plans: list[WeightSet]) -> str | None:
    # The canonical series aligns Llama-family layers (geodrift.scanner.series_gauge); another row's canonical
    # steps (q/k norms, sandwich norms, LayerNorm, experts) have no alignment yet.
    from geodrift.architectures import ARCHITECTURES, LLAMA_STEPS

    if not plans or plans[0].view != "canonical":
        return None
    architecture = plans[0].architecture or "llama"
    row = ARCHITECTURES.get(architecture)
    if row is not None and tuple(row.canonical) == LLAMA_STEPS:
        return None
    return (f"{architecture}: aligning checkpoints to a reference is done for the llama family's gauge group only "
            "(its canonical steps differ)")


def _prepared(models: list[Any], spec: MeasureSpec, align: bool, head_maps: str, options: dict[str, Any],
              command: str) -> tuple[list[Any], list[WeightSet], dict[str, Any], list[str], list[AlignmentReport]]:
    # Every model's plan in one view; in raw/folded, --align aligns the models in memory first (the canonical view
    # aligns every checkpoint anyway, as it is read). Returns (models, plans, options, notes, alignment reports).
    if head_maps not in HEAD_MAPS:
        raise GeodriftError(f"--head-maps {head_maps!r}: use one of {', '.join(HEAD_MAPS)}")
    unchecked, _, _ = _plans_in_one_view(models, spec, {**options, "max_memory": None})  # the view, from headers
    if unchecked[0].view == "canonical" or not align:
        _check_architectures(models, options.get("names"), command)
        plans, options, notes = _plans_in_one_view(models, spec, options)
    if unchecked[0].view == "canonical":
        if align:
            notes.append("--align: the canonical view aligns every checkpoint to the reference already")
        return models, plans, options, notes, []
    if not align:
        if head_maps != DEFAULT_HEAD_MAPS:
            raise GeodriftError(f"--head-maps {head_maps}: chooses the maps of --align; add --align or drop it")
        return models, plans, options, notes, []
    from geodrift.scanner.aligned import aligned_series

    aligned, reports = aligned_series(models, options.get("names"), head_maps=head_maps,
                                      max_memory=options.get("max_memory"))
    plans, options, notes = _plans_in_one_view(aligned, spec, options)
    return list(aligned), plans, options, notes, reports


def _check_architectures(models: list[Any], names: Any, command: str) -> None:
    # one line naming both models when their architectures differ (headers only)
    ckpts = [m if isinstance(m, Checkpoint) else open_model(m, names) for m in models]
    for other in ckpts[1:]:
        if other.architecture != ckpts[0].architecture:
            raise GeodriftError(f"{command}: {ckpts[0].label} is a {ckpts[0].architecture!r} model but {other.label} is "
                                f"a {other.architecture!r} one; {command} needs checkpoints of one architecture")


def checkpoint_task(model: Any, spec: MeasureSpec, options: dict[str, Any], threads: int
                    ) -> tuple[Report, Spectra, AlignmentReport | None]:
    """A Ray task of :func:`drift` and :func:`compare`: :func:`decompose_checkpoint` on a worker."""
    with svd_workers(threads):
        return decompose_checkpoint(model, spec, **options)


def _decompose_series(models: list[Any], view: str, spec: MeasureSpec, progress: Progress | None, backend: str,
                      address: str | None, options: dict[str, Any], head_maps: str
                      ) -> tuple[list[Report], list[Spectra], list[AlignmentReport]]:
    # Every checkpoint's Report and kept triplets (here or as Ray tasks: the same numbers); in the canonical view the
    # reference first, here (its layers kept), then every other checkpoint aligned to it.
    check_backend(backend, address)
    first: list[tuple[Report, Spectra, AlignmentReport | None]] = []
    rest = [(model, spec, options) for model in models]
    if view == "canonical":
        ckpt = models[0] if isinstance(models[0], Checkpoint) else open_model(models[0], options.get("names"))
        _check_reference_memory(ckpt, options.get("max_memory"))
        _, heads = plan_checkpoint(ckpt, spec, **options)
        ws, store = reference_weightset(ckpt, options.get("layers"))
        first = [(*_measure(ws.select(options.get("roles"), options.get("layers")), heads, spec, progress), None)]
        store.spectra = first[0][1]  # the reference's kept triplets: the others' residual rotation is refitted on them
        rest = [(model, spec, {**options, "reference": store, "head_maps": head_maps}) for model in models[1:]]
    if backend == "ray":
        def done(_: int, result: tuple[Report, Spectra, AlignmentReport | None]) -> None:
            for key in result[1]:
                if progress is not None:
                    progress(f"{result[0].origin}: {key[0]}[{key[1]}]")

        results = first + on_ray(checkpoint_task, rest, address, done)
    else:
        results = first + [decompose_checkpoint(model, spec, progress=progress, **opts) for model, _, opts in rest]
    return ([r for r, _, _ in results], [s for _, s, _ in results], [a for _, _, a in results if a is not None])


def _check_reference_memory(ckpt: Checkpoint, max_memory: int | None) -> None:
    # the reference's canonical layers and token rows are kept (float32) while the others are aligned to it
    if max_memory is None:
        return
    need = 4 * sum(math.prod(ckpt.shape(name)) for name in ckpt.tensor_names())
    if need > max_memory:
        raise GeodriftError(f"{ckpt.label}: the canonical series keeps the reference's weights (about "
                            f"{need / 2**30:.1f} GiB in float32), above --max-memory {max_memory / 2**30:.1f} GiB; "
                            "raise --max-memory or use --view folded")


def _shape_notes(series: list[Spectra]) -> list[str]:
    first = {role for role, _ in series[0]}
    notes = []
    for i, spectra in enumerate(series[1:], start=1):
        missing = sorted(first ^ {role for role, _ in spectra})
        if missing:
            notes.append(f"checkpoint {i}: projections not in every checkpoint are left out: {', '.join(missing)}")
    return notes
