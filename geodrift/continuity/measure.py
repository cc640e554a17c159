"""The one measurement path: WeightSet -> singular triplets -> continuity Report.

``measure(ws, spec)`` serves the checkpoint scan, the simulators' tracking during training and
their final reports alike. Per role and per space (``v`` input, ``u`` output) it computes adjacent
``|cos|`` for ``k = 1..K`` (Eq. 1), the sigma^2-weighted alignment (Eq. 2, with its truncation
bound), top-K subspace overlap, effective-rank bounds (Eq. 3), both noise floors (analytic
``sqrt(2/(pi d))`` and a seeded permutation null) and the theory's verdict.

Singular triplets come from one of two routes, chosen per matrix by ``spec.svd``:

- ``exact``: the matrices of a role are stacked and decomposed by one batched float64 LAPACK SVD
  (the simulators' small matrices; ``auto`` picks it up to ``EXACT_BATCH_MAX_NUMEL`` entries);
- ``topk``: streamed, one matrix resident at a time, top-k Lanczos with a residual check and an
  exact fallback (``geodrift.linalg.top_k_svd``), reading the next matrix on a second thread
  (``geodrift.continuity.schedule``). ``auto`` picks it for larger matrices (checkpoints).

Both keep only the top ``k`` triplets unless ``spec.full_spectrum`` (then Eq. 2 is exact).

Permutation-bank policy (:mod:`geodrift.continuity.bank`): one permutation per adjacent pair and draw,
shared by every statistic of the same shape ``(pairs, d)`` within a report, the trajectory's nulls
included (each null stays exact; nulls of different statistics become correlated); drawn from
``torch.Generator().manual_seed(spec.seed)`` in role order.
"""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from geodrift import metrics
from geodrift.continuity import degenerate
from geodrift.continuity.bank import PermutationBank
from geodrift.continuity.report import Report, RoleReport, SpaceContinuity, VectorContinuity
from geodrift.continuity.schedule import PREFETCH_MAX_NUMEL, SVDWorkers, read_ahead, single_threaded_blas
from geodrift.continuity.trajectory import trajectory_shapes
from geodrift.continuity.verdicts import path_verdicts, projection_verdict, relative_verdicts
from geodrift.errors import GeodriftError
from geodrift.gauge.canonical import rotate_residual
from geodrift.gauge.status import ALIGNED, ROTATION_NULL, null_kind, space_gauge
from geodrift.io.checks import check_device, check_seed
from geodrift.linalg import MatrixProduct, SVDTriplets, batched_svd_triplets, top_k_svd, top_k_svd_of_product
from geodrift.weights import WeightKey, WeightSet, predicted_space, role_label, role_sort_key

SPACES = ("v", "u")
# Up to this many vectors per space, one permutation sample serves both the Eq. 1 and Eq. 2 nulls.
NULL_MAX_VECTORS = 32
# ``svd="auto"``: matrices up to this many entries go through the batched exact SVD.
EXACT_BATCH_MAX_NUMEL = 2**16
SVD_ROUTES = ("auto", "exact", "topk")

Derive = Callable[[WeightKey, torch.Tensor], dict[WeightKey, torch.Tensor | MatrixProduct]]


# Permutation-null draws per statistic: far above any use (the paper's 100), far below an index overflow.
MAX_NULL_DRAWS = 2**40


@dataclass(frozen=True)
class MeasureSpec:
    """What to measure.

    Attributes:
        k: singular vectors per space (``k = 1..K`` rows; K also truncates Eq. 2, bounded).
        null_draws: permutation-null draws per statistic (>= 2).
        seed: seeds the permutation null (the only randomness).
        full_spectrum: keep every singular triplet so Eq. 2 and Eq. 3 are exact.
        svd: ``auto``, ``exact`` (batched LAPACK) or ``topk`` (streamed Lanczos); see the module docstring.
        device: ``cpu``, or ``cuda``/``cuda:N``: the streamed matrices are decomposed there by block Krylov
            (the same acceptance rule; the Lanczos route and the exact fallback run on the CPU). The numbers
            agree with the CPU's to what the rule certifies (``|cos| >= 0.999``), not bitwise.

    Raises:
        GeodriftError: on an out-of-range value (named as its command-line option).
    """

    k: int = 8
    null_draws: int = 100
    seed: int = 0
    full_spectrum: bool = False
    svd: str = "auto"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise GeodriftError(f"--k: must be at least 1, got {self.k}")
        if not 2 <= self.null_draws <= MAX_NULL_DRAWS:  # the bound holds where no memory estimate applies
            raise GeodriftError(f"--null-draws: must be in [2, {MAX_NULL_DRAWS}], got {self.null_draws}")
        check_seed(self.seed)
        if self.svd not in SVD_ROUTES:
            raise GeodriftError(f"svd route {self.svd!r}: use one of {', '.join(SVD_ROUTES)}")
        if self.device != "cpu":
            check_device(self.device)


def measure(ws: WeightSet, spec: MeasureSpec, *, progress: Callable[[str], None] | None = None,
            derive: Derive | None = None, trajectory: bool = False) -> Report:
    """Continuity report of every role in ``ws`` (roles with one layer are skipped with a note).

    Args:
        ws: weights ``(role, layer) -> (d_out, d_in)``; each value is loaded once.
        spec: what to measure.
        progress: called with ``"role[layer]"`` after each matrix is read.
        derive: hook called with every loaded matrix; returns derived matrices, dense or as a
            :class:`geodrift.linalg.MatrixProduct` of two factors (e.g. the OV composite once a layer's
            V and O have both been seen), that are measured too.
        trajectory: also measure the trajectory shape and judge the depth path (see :func:`assemble`).

    Returns:
        Report.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> ws = WeightSet.from_tensors({("block", i): torch.randn(8, 8, generator=g) for i in range(3)})
        >>> measure(ws, MeasureSpec(k=2, null_draws=10)).roles[0].label
        'Block'
    """
    return assemble(decompose(ws, spec, progress, derive), spec, ws.origin, ws.view, trajectory=trajectory,
                    architecture=ws.architecture)


def assemble(spectra: dict[WeightKey, SVDTriplets], spec: MeasureSpec, origin: str, view: str, *,
             trajectory: bool = False, bank: PermutationBank | None = None, architecture: str = "") -> Report:
    """The Report of already-decomposed matrices (:func:`decompose`'s output); ``measure`` = both.

    A tracker that also needs the singular vectors themselves calls the two halves. With
    ``trajectory``, ``report.trajectory`` holds App. A.2's trajectory shape of every role with at least 3
    layers and each role gets its depth-path verdict (``geodrift.continuity.verdicts.path_verdicts``);
    without it (tracking during training) ``path_verdict`` is ``n/a``. ``bank`` (default: a fresh one
    seeded with ``spec.seed``) lets a caller share the permutations with further nulls of the same
    report (the scan's trajectory shapes draw from it). ``architecture`` names the exact gauges that move each
    number (``moved_by``, :func:`geodrift.gauge.status.space_gauge`).
    """
    bank = bank if bank is not None else PermutationBank(torch.Generator().manual_seed(spec.seed))
    roles = sorted({role for role, _ in spectra}, key=role_sort_key)
    reports, notes = [], []
    # One thread: the null gathers are many small cache-sized ops, and on a busy 2-core machine each
    # two-thread parallel region waits for a descheduled thread (measured 20x slower at load 17).
    with single_threaded_blas():
        for role in roles:
            layers = sorted(layer for r, layer in spectra if r == role)
            if len(layers) < 2:
                notes.append(f"{role}: only {len(layers)} layer(s); continuity needs at least 2 - skipped")
                continue
            reports.append(_role_report(role, [spectra[(role, layer)] for layer in layers], layers,
                                        spec.null_draws, bank, spec.k, view, architecture))
            undefined_note = degenerate.note(role, layers, degenerate.undefined_vectors(
                torch.stack([spectra[(role, layer)].S[:reports[-1].k] for layer in layers]), reports[-1].shape),
                reports[-1].k)
            if undefined_note:
                notes.append(undefined_note)
            if reports[-1].k < spec.k:
                notes.append(f"{role}: k clipped from {spec.k} to {reports[-1].k} (the rank of its matrices)")
    report = Report(origin, view, spec.k, spec.null_draws, spec.seed, relative_verdicts(reports), notes)
    if trajectory:
        report.trajectory = trajectory_shapes(spectra, spec.null_draws, spec.seed, bank=bank, view=view)
        report.roles = path_verdicts(report.roles, report.trajectory)
    return report


def decompose(ws: WeightSet, spec: MeasureSpec, progress: Callable[[str], None] | None = None,
              derive: Derive | None = None) -> dict[WeightKey, SVDTriplets]:
    """Singular triplets of every matrix (and every derived one), layer by layer.

    Returns:
        ``{(role, layer): SVDTriplets}`` with the top ``spec.k`` triplets (all with ``full_spectrum``).
    """
    if ws.before_rotation is not None:  # the canonical view: decompose before the residual rotation, rotate after
        unrotated, basis = ws.before_rotation
        return rotate_residual(decompose(unrotated, spec, progress, derive), basis())
    roles = ws.roles()
    keys = sorted(ws, key=lambda key: (key[1], roles.index(key[0])))
    out: dict[WeightKey, SVDTriplets] = {}
    batches: dict[str, list[tuple[int, torch.Tensor]]] = defaultdict(list)
    streamed = not all(_exact_route(spec, ws.entries[key].shape) for key in keys)
    on_device = spec.device != "cpu"
    workers = SVDWorkers(None if streamed and not on_device else 1)
    # The jobs still in flight when reading ends must keep the one-thread limit too (read_ahead's ends with it).
    with single_threaded_blas() if streamed else contextlib.nullcontext():
        try:
            for key, W in read_ahead(ws, keys, streamed or derive is not None):
                derived = derive(key, W) if derive is not None else {}
                for name, matrix in [(key, W), *derived.items()]:
                    if _exact_route(spec, matrix.shape):
                        batches[name[0]].append((name[1], matrix.dense() if isinstance(matrix, MatrixProduct)
                                                 else matrix))
                    else:
                        workers.submit(name, functools.partial(_top_k, matrix, _keep(spec, matrix.shape), spec.device),
                                       large=matrix.shape[0] * matrix.shape[1] > PREFETCH_MAX_NUMEL)
                if progress is not None:
                    progress(f"{key[0]}[{key[1]}]")
            out.update(workers.drain())
        finally:
            workers.close()
    for role, items in batches.items():
        by_shape: dict[tuple[int, ...], list[tuple[int, torch.Tensor]]] = defaultdict(list)
        for layer, matrix in items:
            by_shape[tuple(matrix.shape)].append((layer, matrix))
        for shape, group in by_shape.items():
            stacked = torch.stack([m for _, m in group])  # (L, m, n)
            keep = _keep(spec, (shape[0], shape[1]))
            for (layer, _), triplets in zip(group, batched_svd_triplets(stacked, keep), strict=True):
                out[(role, layer)] = triplets
    return out


def vector_continuity(vectors: torch.Tensor, draws: int, bank: PermutationBank) -> list[VectorContinuity]:
    """Eq. 1 with both floors for each of ``K`` vectors stacked per layer.

    For vectors that do not come from :func:`measure`'s SVDs (e.g. a cumulative gradient's v1 from
    power iteration), so they are scored by the same code as everything else.

    Args:
        vectors: ``(L, K, d)``, one row per layer (need not be normalised).
        draws: permutation-null draws.
        bank: the source of permutations.

    Returns:
        One VectorContinuity per ``k = 1..K``.
    """
    n_pairs, dim = vectors.shape[0] - 1, vectors.shape[2]
    with single_threaded_blas():  # as in assemble
        samples = metrics.permuted_abs_cos(vectors, draws, bank.generator, flat_index=bank.index(draws, n_pairs, dim))
    return _vector_rows(metrics.adjacent_abs_cos(vectors), samples, dim)


def _role_report(role: str, triplets: list[SVDTriplets], layers: list[int], null_draws: int,
                 bank: PermutationBank, k: int, view: str = "raw", architecture: str = "") -> RoleReport:
    # Continuity of one role from its per-layer triplets (ordered by depth).
    available = min(t.S.shape[0] for t in triplets)
    k = min(k, available)
    sigma = torch.stack([t.S[:available] for t in triplets])  # (L, K)
    fro = torch.tensor([t.frobenius_sq for t in triplets], dtype=torch.float64)  # (L,)
    stacks = {
        "v": torch.stack([t.Vh[:available] for t in triplets]),  # (L, K, d_in)
        "u": torch.stack([t.U[:, :available].T for t in triplets]),  # (L, K, d_out)
    }
    shape = (triplets[0].U.shape[0], triplets[0].Vh.shape[1])
    undefined = degenerate.undefined_vectors(sigma, shape)  # (L, K): zero/rank-deficient -> NaN pairs
    spaces = {s: _space_continuity(s, stacks[s], sigma, fro, k, null_draws, bank, undefined, null_kind(view, role, s))
              for s in SPACES}
    for s in SPACES:  # the gauge label of every number (geodrift.gauge.status)
        status, moved = space_gauge(view, role, s, architecture)
        spaces[s] = replace(spaces[s], gauge=status, moved_by=list(moved))
    lower, upper = metrics.effective_rank_bounds(sigma, fro, min(shape))
    known, predicted = predicted_space(role)
    if known:
        verdict, criterion = projection_verdict(predicted, spaces["v"].vectors[0], spaces["u"].vectors[0],
                                                aligned={s for s in SPACES if spaces[s].gauge == ALIGNED},
                                                null=spaces[predicted].null if predicted in spaces else "permutation")
    else:
        verdict, criterion = "no prediction", "the theory makes no per-space prediction for this role"
    methods: dict[str, int] = {}
    for t in triplets:
        methods[t.method] = methods.get(t.method, 0) + 1
    return RoleReport(
        role=role, label=role_label(role), shape=shape, layers=layers, k=k, spaces=spaces,
        erank_lower=lower.tolist(), erank_upper=upper.tolist(), predicted_space=predicted,
        verdict=verdict, criterion=criterion, max_residual=max(t.residual for t in triplets),
        methods=methods, path_verdict="n/a", path_criterion="depth path not measured (no trajectory shape)",
    )


def _space_continuity(space: str, vectors: torch.Tensor, sigma: torch.Tensor, fro: torch.Tensor, k: int,
                      draws: int, bank: PermutationBank, undefined: torch.Tensor | None = None,
                      null: str = "permutation") -> SpaceContinuity:
    # vectors: (L, K, d) with K >= k; the first k are reported one by one, all K enter Eq. 2.
    if null == ROTATION_NULL:
        return _rotation_continuity(space, vectors, sigma, fro, k, undefined)
    n_pairs, available, dim = vectors.shape[0] - 1, vectors.shape[1], vectors.shape[2]
    # One set of permuted samples serves both nulls when all K vectors are few; with the full
    # spectrum, Eq. 2's null permutes every vector per draw, so its draws are capped (~32 x draws).
    shared = available <= NULL_MAX_VECTORS
    samples = metrics.permuted_abs_cos(vectors[:, :available if shared else k], draws, bank.generator,
                                       flat_index=bank.index(draws, n_pairs, dim))
    cos, eq1_samples = metrics.adjacent_abs_cos(vectors[:, :k]), samples[..., :k]
    if undefined is not None and bool(undefined[:, :k].any()):
        pairs = degenerate.undefined_pairs(undefined)
        cos, eq1_samples = degenerate.masked(cos, pairs), degenerate.masked(eq1_samples, pairs)
    rows = _vector_rows(cos, eq1_samples, dim)
    if shared:
        wa_draws, wa_samples = draws, samples
    else:
        wa_draws = max(8, draws * NULL_MAX_VECTORS // available)
        wa_samples = metrics.permuted_abs_cos(vectors, wa_draws, bank.generator,
                                              flat_index=bank.index(wa_draws, n_pairs, dim))
    wa_null = metrics.null_of_sigma2(wa_samples, sigma, fro)
    wa = metrics.sigma2_weighted_alignment(vectors, sigma, fro)
    gap = metrics.sigma2_truncation_gap(sigma, fro)
    overlap = metrics.subspace_overlap(vectors[:, :k])
    zero = degenerate.zero_layer_pairs(sigma)
    if bool(zero.any()):  # an all-zero matrix has no energy shares and no subspace
        wa, gap, overlap = wa.masked_fill(zero, float("nan")), gap.masked_fill(zero, float("nan")), \
            overlap.masked_fill(zero, float("nan"))
    return SpaceContinuity(
        space=space, dim=dim, vectors=rows, sigma2_wa=float(wa.nanmean()),
        sigma2_wa_upper=float((wa + gap).nanmean()), sigma2_wa_per_pair=wa.tolist(),
        sigma2_null_mean=float(wa_null.mean), sigma2_null_std=float(wa_null.std), sigma2_null_draws=wa_draws,
        subspace_overlap=float(overlap.nanmean()), subspace_baseline=k / dim,
    )


def _rotation_continuity(space: str, vectors: torch.Tensor, sigma: torch.Tensor, fro: torch.Tensor, k: int,
                         undefined: torch.Tensor | None) -> SpaceContinuity:
    # The space's numbers against the rotation null (geodrift.metrics.rotation_null): analytic, nothing drawn.
    dim = vectors.shape[2]
    mean, sd = metrics.rotation_null(dim)
    cos = metrics.adjacent_abs_cos(vectors[:, :k])
    pairs = None
    if undefined is not None and bool(undefined[:, :k].any()):
        pairs = degenerate.undefined_pairs(undefined)
        cos = degenerate.masked(cos, pairs)
    rows = []
    for j in range(cos.shape[1]):
        column = cos[:, j]
        defined = ~torch.isnan(column)
        n = int(defined.sum())
        std = sd / n ** 0.5 if n else float("nan")
        observed = float(column.nanmean()) if n else float("nan")
        rows.append(VectorContinuity(
            k=j + 1, per_pair=column.tolist(), mean=observed, median=float(column.nanmedian()),
            baseline=metrics.random_baseline(dim), null_mean=mean, null_std=std,
            z=(observed - mean) / max(std, 1e-12), per_pair_null_mean=torch.where(defined, mean, float("nan")).tolist(),
            per_pair_null_std=torch.where(defined, sd, float("nan")).tolist()))
    wa = metrics.sigma2_weighted_alignment(vectors, sigma, fro)
    gap = metrics.sigma2_truncation_gap(sigma, fro)
    overlap = metrics.subspace_overlap(vectors[:, :k])
    weights = metrics.energy_share(sigma, fro)[:-1]  # (L-1, K)
    # Eq. 2 under the rotation null: the K terms of a pair are independent to O(1/d^2) (Cov(Q11^2, Q22^2) of a Haar
    # matrix is 2 / (d^2 (d-1)(d+2))), the pairs exactly: mean sum(w) E|t|, variance sum(w^2) Var|t|
    zero = degenerate.zero_layer_pairs(sigma)
    if bool(zero.any()):
        wa, gap, overlap = wa.masked_fill(zero, float("nan")), gap.masked_fill(zero, float("nan")), \
            overlap.masked_fill(zero, float("nan"))
        weights = weights.masked_fill(zero.unsqueeze(-1), 0.0)
    n_pairs = max(int((~zero).sum()), 1)
    wa_null_mean = float(weights.sum(-1).sum()) * mean / n_pairs
    wa_null_std = float(weights.pow(2).sum()) ** 0.5 * sd / n_pairs
    return SpaceContinuity(
        space=space, dim=dim, vectors=rows, sigma2_wa=float(wa.nanmean()),
        sigma2_wa_upper=float((wa + gap).nanmean()), sigma2_wa_per_pair=wa.tolist(),
        sigma2_null_mean=wa_null_mean, sigma2_null_std=wa_null_std, sigma2_null_draws=0,
        subspace_overlap=float(overlap.nanmean()), subspace_baseline=k / dim, null=ROTATION_NULL,
    )


def _vector_rows(cos: torch.Tensor, samples: torch.Tensor, dim: int) -> list[VectorContinuity]:
    # cos: (L-1, k) observed |cos|; samples: (draws, L-1, k) permuted ones.
    null = metrics.null_of_continuity(samples)
    pair_mean, pair_std = samples.mean(0), samples.std(0)  # (L-1, k): each pair's own null
    means = cos.nanmean(0)  # undefined pairs (NaN, see geodrift.continuity.degenerate) are left out
    z = null.z(means)
    return [
        VectorContinuity(
            k=j + 1, per_pair=cos[:, j].tolist(), mean=float(means[j]), median=float(cos[:, j].nanmedian()),
            baseline=metrics.random_baseline(dim), null_mean=float(null.mean[j]),
            null_std=float(null.std[j]), z=float(z[j]), per_pair_null_mean=pair_mean[:, j].tolist(),
            per_pair_null_std=pair_std[:, j].tolist(),
        )
        for j in range(cos.shape[1])
    ]


def _top_k(matrix: torch.Tensor | MatrixProduct, k: int, device: str = "cpu") -> SVDTriplets:
    if isinstance(matrix, MatrixProduct):  # thin factors: the product operator stays on the CPU
        return top_k_svd_of_product(matrix, k)
    return top_k_svd(matrix if device == "cpu" else matrix.to(device), k)


def _exact_route(spec: MeasureSpec, shape: tuple[int, ...] | torch.Size) -> bool:
    if spec.svd != "auto":
        return spec.svd == "exact"
    return shape[0] * shape[1] <= EXACT_BATCH_MAX_NUMEL


def _keep(spec: MeasureSpec, shape: tuple[int, ...] | torch.Size) -> int:
    rank = min(shape[0], shape[1])
    return rank if spec.full_spectrum else min(spec.k, rank)
