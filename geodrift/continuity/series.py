"""Across checkpoints: rotation of v1/u1 along a training run, and subspace angles between two models.

Pure functions of already-decomposed matrices (``{(role, layer): SVDTriplets}`` from
:func:`geodrift.continuity.decompose`), so each checkpoint is read and decomposed once and the cost is
linear in the number of checkpoints:

- :func:`rotation_drift`: per role, space and layer, ``angle = degrees(arccos |cos(x_t, x_0)|)`` of
  the first singular vector at checkpoint ``t`` against the first checkpoint (the paper's Fig. 2a,
  its rotation angle from the epoch-1 reference), with the permutation null of ``|cos|`` (the same
  vectors, coordinates of one permuted) and the random floor ``sqrt(2/(pi d))``;
- :func:`subspace_comparison`: per role, space and layer, the principal angles between two models'
  top-k subspaces, their mean ``cos^2`` (overlap) beside random ``k``-subspaces (``k/d``) and a
  permutation null, and the top-1 ``|cos|`` with its null.

Nulls of ``|cos|`` go through :func:`geodrift.metrics.permuted_abs_cos` (the one implementation):
the pairs ``(a_l, b_l)`` are interleaved so that its adjacent pairs ``0, 2, 4, ...`` are exactly them. On the
residual side of the canonical view the null is the rotation null instead
(:func:`geodrift.gauge.status.null_kind`: :func:`geodrift.metrics.rotation_null` and
:func:`geodrift.metrics.rotation_overlap_null`, analytic and basis-free), as in the scan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from geodrift import metrics
from geodrift.continuity.measure import PermutationBank
from geodrift.continuity.trajectory import lag_pairs
from geodrift.gauge.status import INVARIANT, ROTATION_NULL, null_kind, space_gauge
from geodrift.linalg import SVDTriplets
from geodrift.weights import ROLE_LABELS, WeightKey

Spectra = dict[WeightKey, SVDTriplets]
# Vector entries per chunk of the subspace null's permuted copies (float32: about 64 MB).
_CHUNK_ELEMENTS = 16_000_000


@dataclass(frozen=True)
class RotationRow:
    """v1 (``space`` v) or u1 (``u``) of one layer at one checkpoint against the first checkpoint."""

    role: str
    label: str
    space: str
    dim: int
    layer: int
    checkpoint: int  # index in the series (0 = the reference)
    abs_cos: float  # |cos(x_t, x_0)|
    angle_deg: float  # arccos(abs_cos) in degrees
    null_mean: float  # permutation null of abs_cos
    null_std: float
    null_angle_deg: float  # arccos(null_mean): the angle two unrelated vectors of these coordinates make
    random_floor: float  # sqrt(2/(pi d))
    gauge: str = "unknown"  # whether exact gauges of either checkpoint move it (series_gauge below)


@dataclass(frozen=True)
class SubspaceRow:
    """Two models' top-k subspaces of one projection, space and layer."""

    role: str
    label: str
    space: str
    dim: int
    layer: int
    k: int
    principal_angles_deg: list[float] = field(default_factory=list)  # ascending
    overlap: float = 0.0  # mean cos^2 of the principal angles, ||A B^T||_F^2 / k
    overlap_null_mean: float = 0.0  # B's coordinates permuted
    overlap_null_std: float = 0.0
    overlap_random: float = 0.0  # k / d: random k-subspaces
    top1_abs_cos: float = 0.0  # |cos| of the two models' first vectors
    top1_null_mean: float = 0.0
    top1_null_std: float = 0.0
    random_floor: float = 0.0  # sqrt(2/(pi d))
    gauge: str = "unknown"  # as RotationRow's


def first_vectors(spectra: Spectra, role: str, layers: list[int], space: str, k: int = 1) -> torch.Tensor:
    """``(L, k, d)``: the top-``k`` singular vectors of ``role`` in ``space`` for each layer."""
    if space == "v":
        return torch.stack([spectra[(role, layer)].Vh[:k] for layer in layers]).float()
    return torch.stack([spectra[(role, layer)].U[:, :k].T for layer in layers]).float()


def paired_abs_cos(a: torch.Tensor, b: torch.Tensor, draws: int,
                   bank: PermutationBank) -> tuple[torch.Tensor, torch.Tensor]:
    """``|cos(a_l, b_l)|`` for each ``l`` and its permutation null.

    Args:
        a, b: ``(L, K, d)`` vectors to pair index by index.
        draws: null draws.
        bank: the permutations, shared by every statistic of the same shape (the measurement path's
            policy: each null stays exact, and a series pays for its permutations once, not per checkpoint).

    Returns:
        ``(observed (L, K), samples (draws, L, K))``.
    """
    stack = lag_pairs(torch.cat([a, b]), a.shape[0])  # a_0, b_0, a_1, b_1, ...
    observed = metrics.adjacent_abs_cos(stack)[::2]
    perms = bank.get(draws, stack.shape[0] - 1, stack.shape[2])
    samples = metrics.permuted_abs_cos(stack, draws, bank.generator, perms)[:, ::2]
    return observed, samples


def rotation_drift(series: list[Spectra], draws: int, seed: int, view: str = "raw") -> list[RotationRow]:
    """Rotation of every layer's v1 and u1 along a series, relative to the first checkpoint.

    Args:
        series: the decomposed checkpoints, in training order (at least 2).
        draws: permutation-null draws.
        seed: seeds the null.
        view: the checkpoints' view (each space's null: :func:`geodrift.gauge.status.null_kind`).

    Returns:
        One row per role (present in every checkpoint), space, layer and checkpoint ``t >= 1``.
    """
    bank = PermutationBank(torch.Generator().manual_seed(seed))
    rows: list[RotationRow] = []
    for role, layers in _common_roles(series):
        for space in ("v", "u"):
            reference = first_vectors(series[0], role, layers, space)
            dim = reference.shape[2]
            rotation = null_kind(view, role, space) == ROTATION_NULL
            for t, spectra in enumerate(series[1:], start=1):
                other = first_vectors(spectra, role, layers, space)
                if rotation:
                    observed = metrics.adjacent_abs_cos(lag_pairs(torch.cat([reference, other]), len(layers)))[::2]
                    m, sd = metrics.rotation_null(dim)
                    mean, std = torch.full_like(observed, m), torch.full_like(observed, sd)
                else:
                    observed, samples = paired_abs_cos(reference, other, draws, bank)
                    mean, std = samples.mean(0), samples.std(0)  # (L, 1)
                for i, layer in enumerate(layers):
                    c, m = float(observed[i, 0]), float(mean[i, 0])
                    rows.append(RotationRow(role, ROLE_LABELS.get(role, role), space, dim, layer, t, c, _angle(c),
                                            m, float(std[i, 0]), _angle(m), metrics.random_baseline(dim),
                                            series_gauge(view, role, space)))
    return rows


def subspace_comparison(a: Spectra, b: Spectra, k: int, draws: int, seed: int, view: str = "raw"
                        ) -> list[SubspaceRow]:
    """Principal angles between two models' top-``k`` subspaces, per role, space and layer, with nulls.

    Args:
        a, b: the two decomposed models (same roles and shapes where compared).
        k: subspace dimension (capped by what both decompositions hold).
        draws: permutation-null draws (B's coordinates permuted, its ``k`` vectors together).
        seed: seeds the nulls.
        view: the two models' view (each space's null: :func:`geodrift.gauge.status.null_kind`).

    Returns:
        One row per role present in both with equal shapes, space and common layer.
    """
    bank = PermutationBank(torch.Generator().manual_seed(seed))
    rows: list[SubspaceRow] = []
    for role, layers in _common_roles([a, b]):
        kk = min(k, *(spectra[(role, layer)].S.shape[0] for spectra in (a, b) for layer in layers))
        for space in ("v", "u"):
            A, B = first_vectors(a, role, layers, space, kk), first_vectors(b, role, layers, space, kk)
            if A.shape != B.shape:
                continue
            dim = A.shape[2]
            cosines = torch.linalg.svdvals(A.double() @ B.double().transpose(1, 2)).clamp(0, 1)  # (L, kk)
            if null_kind(view, role, space) == ROTATION_NULL:
                overlap_null = [metrics.rotation_overlap_null(kk, dim)] * len(layers)
                top1 = (F.normalize(A[:, 0], dim=-1) * F.normalize(B[:, 0], dim=-1)).sum(-1).abs().clamp(0, 1)
                top1_null = [metrics.rotation_null(dim)] * len(layers)
            else:
                null = _permuted_overlap(A, B, bank.get(draws, A.shape[0], dim)[:draws])  # (draws, L)
                overlap_null = [(float(null[:, i].mean()), float(null[:, i].std())) for i in range(len(layers))]
                paired, top1_samples = paired_abs_cos(A[:, :1], B[:, :1], draws, bank)
                top1 = paired[:, 0]
                top1_null = [(float(top1_samples[:, i, 0].mean()), float(top1_samples[:, i, 0].std()))
                             for i in range(len(layers))]
            for i, layer in enumerate(layers):
                rows.append(SubspaceRow(
                    role, ROLE_LABELS.get(role, role), space, dim, layer, kk,
                    principal_angles_deg=[_angle(float(c)) for c in cosines[i]],
                    overlap=float(cosines[i].pow(2).mean()), overlap_null_mean=overlap_null[i][0],
                    overlap_null_std=overlap_null[i][1], overlap_random=kk / dim,
                    top1_abs_cos=float(top1[i]), top1_null_mean=top1_null[i][0], top1_null_std=top1_null[i][1],
                    random_floor=metrics.random_baseline(dim), gauge=series_gauge(view, role, space),
                ))
    return rows


def series_gauge(view: str, role: str, space: str) -> str:
    """The gauge status of a cross-checkpoint number: in the canonical view every space's is ``invariant`` (every
    checkpoint is aligned to the reference, so its head and hidden side too are compared unit for unit, and no exact
    gauge of either checkpoint moves the number: :mod:`geodrift.scanner.series_gauge`), else the view's
    (:func:`geodrift.gauge.status.space_gauge`)."""
    return INVARIANT if view == "canonical" else space_gauge(view, role, space)[0]


def _permuted_overlap(A: torch.Tensor, B: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:
    # ||A P(B)^T||_F^2 / k with B's coordinates permuted (its k rows together); perms (draws, L, d): (draws, L).
    n_layers, k, dim = B.shape
    draws = perms.shape[0]
    chunk = max(1, _CHUNK_ELEMENTS // (n_layers * k * dim))
    out = []
    for start in range(0, draws, chunk):
        p = perms[start:start + chunk].long()  # the bank is int32; gather wants int64
        permuted = torch.gather(B.expand(p.shape[0], n_layers, k, dim), 3,
                                p.unsqueeze(2).expand(p.shape[0], n_layers, k, dim))
        cross = A.unsqueeze(0) @ permuted.transpose(-1, -2)  # (n, L, k, k)
        out.append(cross.pow(2).sum((-1, -2)) / k)
    return torch.cat(out)


def _common_roles(series: list[Spectra]) -> list[tuple[str, list[int]]]:
    # Roles whose layers (and shapes) every checkpoint has, in the canonical role order.
    order = list(ROLE_LABELS)
    out = []
    for role in sorted({r for r, _ in series[0]}, key=lambda r: order.index(r) if r in order else len(order)):
        layers = sorted(set.intersection(*({layer for r, layer in s if r == role} for s in series)))
        shapes = {(s[(role, layer)].U.shape[0], s[(role, layer)].Vh.shape[1]) for s in series for layer in layers}
        if layers and len(shapes) == 1:
            out.append((role, layers))
    return out


def _angle(abs_cos: float) -> float:
    return math.degrees(math.acos(min(1.0, max(0.0, abs_cos))))
