"""Continuity metrics: pure functions of tensors (no I/O, no printing, no global RNG).

Vectors are stacked per layer: ``(L, d)`` for one singular vector per layer or ``(L, K, d)`` for the
top ``K``. Every comparison is sign-invariant (``|cos|``), so the SVD's arbitrary signs never matter.
Definitions follow the paper (arXiv 2605.04971): Eq. 1 continuity, Eq. 2 sigma^2-weighted
alignment, Eq. 3 effective rank; the two noise floors are the analytic random baseline and a
permutation null.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Elements gathered per chunk of the permutation null (about 2 MB of float32): the gathered block
# stays in cache for the multiply-and-sum that follows - 4x faster than 64 MB chunks on SmolLM2.
_NULL_CHUNK_ELEMENTS = 2**19
_INT32_MAX = 2**31 - 1


def adjacent_abs_cos(vectors: torch.Tensor) -> torch.Tensor:
    """``|cos|`` between each layer's vector and the next layer's (Eq. 1 before the mean).

    Args:
        vectors: ``(L, d)`` or ``(L, K, d)``; need not be normalised.

    Returns:
        ``(L-1,)`` or ``(L-1, K)`` values in ``[0, 1]``.

    Example:
        >>> adjacent_abs_cos(torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0]]))
        tensor([1., 0.])
    """
    unit = _normalise(vectors)
    return (unit[:-1] * unit[1:]).sum(-1).abs().clamp(0.0, 1.0)


def sigma2_weighted_alignment(
    vectors: torch.Tensor, sigma: torch.Tensor, frobenius_sq: torch.Tensor | None = None
) -> torch.Tensor:
    """Eq. 2 per adjacent pair: ``sum_k (s_k^(l)^2 / ||W^(l)||_F^2) |cos(x_k^(l), x_k^(l+1))|``.

    Weights come from layer ``l`` only (the paper's asymmetric choice); pairing is by index.

    Args:
        vectors: ``(L, K, d)`` singular vectors (``v`` or ``u``) of every layer.
        sigma: ``(L, K)`` the matching singular values.
        frobenius_sq: ``(L,)`` ``||W||_F^2``; when ``K`` is below the rank this makes the result the
            truncated sum, a lower bound of the full Eq. 2 (see :func:`sigma2_truncation_gap`).
            ``None`` normalises by ``sum_k s_k^2`` (exact when ``K`` is the full rank).

    Returns:
        ``(L-1,)`` values in ``[0, 1]``.

    Example:
        >>> v = torch.eye(2).expand(3, 2, 2)
        >>> sigma2_weighted_alignment(v, torch.ones(3, 2))
        tensor([1., 1.])
    """
    weights = _energy_share(sigma, frobenius_sq)[:-1]
    return (weights * adjacent_abs_cos(vectors).to(weights.dtype)).sum(-1).float()


def sigma2_truncation_gap(sigma: torch.Tensor, frobenius_sq: torch.Tensor) -> torch.Tensor:
    """Energy share left out by a top-``K`` Eq. 2: ``1 - sum_k s_k^2/||W||_F^2`` for layers ``0..L-2``.

    The full Eq. 2 lies in ``[truncated, truncated + gap]`` because every left-out term is at most
    its weight.

    Args:
        sigma: ``(L, K)``.
        frobenius_sq: ``(L,)``.

    Returns:
        ``(L-1,)`` values in ``[0, 1]``.
    """
    return (1.0 - _energy_share(sigma, frobenius_sq).sum(-1)).clamp_min(0.0)[:-1].float()


def subspace_overlap(bases: torch.Tensor) -> torch.Tensor:
    """Continuity of top-``k`` subspaces: mean ``cos^2`` of the principal angles between layers.

    ``||A B^T||_F^2 / k`` for orthonormal rows ``A, B`` of adjacent layers. Unlike Eq. 1 it does not
    change when near-degenerate singular values swap order inside the subspace.

    Args:
        bases: ``(L, k, d)`` orthonormal rows per layer.

    Returns:
        ``(L-1,)`` values in ``[0, 1]``; random ``k``-subspaces of ``R^d`` give about ``k/d``.

    Example:
        >>> b = torch.stack([torch.eye(3)[:2], torch.eye(3)[[1, 0]]])
        >>> subspace_overlap(b)
        tensor([1.])
    """
    k = bases.shape[1]
    cross = bases[:-1].double() @ bases[1:].double().transpose(-1, -2)  # (L-1, k, k)
    return (cross.pow(2).sum((-1, -2)) / k).clamp(0.0, 1.0).float()


def effective_rank(sigma: torch.Tensor) -> torch.Tensor:
    """Eq. 3 (Roy & Vetterli): ``exp(-sum p_i log p_i)`` with ``p_i = s_i^2 / sum_j s_j^2``.

    Args:
        sigma: ``(..., K)`` the full spectrum.

    Returns:
        ``(...)``: 1 for rank one, ``K`` for a flat spectrum.

    Example:
        >>> round(float(effective_rank(torch.ones(4))), 4)
        4.0
    """
    energy = sigma.double().pow(2)
    p = energy / energy.sum(-1, keepdim=True).clamp_min(1e-300)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    return entropy.exp().float()


def effective_rank_bounds(
    sigma_top: torch.Tensor, frobenius_sq: torch.Tensor, rank: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds on Eq. 3 from the top-``K`` singular values and ``||W||_F^2`` only.

    The left-out energy ``r`` is spread over at most ``rank - K`` values, each share at most
    ``p_K``: the entropy lies between ``H_K + r log(1/p_K)`` and ``H_K + r log((rank-K)/r)``.

    Args:
        sigma_top: ``(..., K)`` descending.
        frobenius_sq: ``(...)``.
        rank: ``min(m, n)``.

    Returns:
        ``(lower, upper)``, each ``(...)``; equal when ``K == rank``.
    """
    p = _energy_share(sigma_top, frobenius_sq)
    head = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    rest = (1.0 - p.sum(-1)).clamp_min(0.0)
    n_rest = rank - sigma_top.shape[-1]
    if n_rest <= 0:
        exact = head.exp().float()
        return exact, exact
    lower = head + rest * -torch.log(p[..., -1].clamp_min(1e-300))
    upper = head + rest * torch.log(n_rest / rest.clamp_min(1e-300)) * (rest > 0)
    return lower.exp().float(), upper.exp().float()


def random_baseline(d: int) -> float:
    """Analytic floor of Eq. 1: ``E|cos|`` of two random unit vectors in ``R^d``, ``~ sqrt(2/(pi d))``.

    Example:
        >>> round(random_baseline(256), 4)
        0.0499
    """
    return math.sqrt(2.0 / (math.pi * d))


def rotation_null(d: int) -> tuple[float, float]:
    """The rotation null of one ``|cos|``: its mean and standard deviation when one of the two unit vectors is
    turned by a uniformly random rotation of ``R^d`` (Haar), i.e. ``|t|`` for ``t`` a coordinate of a uniform unit
    vector: ``E|t| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))`` (``~ sqrt(2/(pi d))``, :func:`random_baseline`) and
    ``E t^2 = 1/d``. It depends on nothing but ``d``: no basis, no coordinates, so an exact residual rotation, or a
    change of the weights, cannot move it.

    The ``|cos|`` of distinct layer pairs under independent rotations per layer are pairwise independent (two
    pairs never close a cycle), so a mean over ``n`` pairs has this mean and standard deviation ``sd / sqrt(n)``,
    exactly, for any set of pairs (adjacent layers, one lag, the far lags pooled).

    Example:
        >>> [round(x, 4) for x in rotation_null(2)]  # 2/pi and sqrt(1/2 - 4/pi^2)
        [0.6366, 0.3078]
    """
    mean = math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)
    return mean, math.sqrt(max(1.0 / d - mean * mean, 0.0))


def rotation_overlap_null(k: int, d: int) -> tuple[float, float]:
    """Mean and standard deviation of the overlap ``||A Q B^T||_F^2 / k`` of two ``k``-subspaces of ``R^d`` when ``Q``
    is a uniformly random rotation: ``||Q_kk||_F^2 / k`` for the top-left ``k x k`` block of a Haar matrix, from its
    fourth moments (``E Q11^4 = 3/(d(d+2))``, ``E Q11^2 Q12^2 = 1/(d(d+2))``, ``E Q11^2 Q22^2 = (d+1)/((d-1)d(d+2))``).

    Example:
        >>> [round(x, 4) for x in rotation_overlap_null(1, 2)]  # cos^2 of a uniform angle: mean 1/2, sd 1/sqrt(8)
        [0.5, 0.3536]
    """
    if d < 2:
        return 1.0, 0.0
    base = d * (d + 2)
    second = (k * k * 3 + 2 * k * k * (k - 1)) / base + (k * (k - 1)) ** 2 * (d + 1) / ((d - 1) * base)
    mean = k * k / d
    return mean / k, math.sqrt(max(second - mean * mean, 0.0)) / k


@dataclass(frozen=True)
class NullStats:
    """Permutation-null distribution of a statistic: mean and standard deviation over draws."""

    mean: torch.Tensor
    std: torch.Tensor
    draws: int

    def excess(self, observed: torch.Tensor) -> torch.Tensor:
        """``observed - null mean``."""
        return observed - self.mean

    def z(self, observed: torch.Tensor) -> torch.Tensor:
        """``(observed - null mean) / null std`` (inf when the null has no spread)."""
        return (observed - self.mean) / self.std.clamp_min(1e-12)


def random_permutations(draws: int, n_pairs: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """Independent uniform permutations of ``d`` coordinates, one per draw and adjacent pair.

    Each is one ``torch.randperm`` (a shuffle, ``O(d)``) - 8x faster than ranking ``d`` random
    keys (``rand().argsort()``, the previous generator; same distribution, a different stream).

    Args:
        draws, n_pairs, d: the shape.
        generator: the only source of randomness.

    Returns:
        ``(draws, n_pairs, d)`` int32 indices (the permutations int64 would hold, in half the memory: an 8B's
        14336-wide bank of 100 draws is 178 MB instead of 355 MB; ``index_select`` gathers by them 2x faster;
        ``torch.gather`` wants them as int64: ``.long()`` a chunk at a time).
    """
    out = torch.empty(draws * n_pairs, d, dtype=torch.int32 if d <= _INT32_MAX else torch.int64)
    for row in out:
        torch.randperm(d, generator=generator, out=row)
    return out.view(draws, n_pairs, d)


def flat_permutation_index(permutations: torch.Tensor) -> torch.Tensor:
    """Rows to gather from a ``(n_pairs * d, K)`` coordinate-major stack, one row of indices per draw.

    Args:
        permutations: ``(draws, n_pairs, d)`` from :func:`random_permutations`.

    Returns:
        ``(draws, n_pairs * d)`` int32 (int64 past int32's range): entry ``l * d + i`` of a row is ``l * d + P_l(i)``.
    """
    draws, n_pairs, d = permutations.shape
    wide = torch.int32 if n_pairs * d <= _INT32_MAX else torch.int64
    offsets = (torch.arange(n_pairs, dtype=wide) * d).view(1, -1, 1)
    permutations = permutations.to(wide)
    return (permutations + offsets).reshape(draws, n_pairs * d)


def permuted_abs_cos(
    vectors: torch.Tensor,
    draws: int,
    generator: torch.Generator,
    permutations: torch.Tensor | None = None,
    flat_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Adjacent ``|cos|`` after independently permuting the coordinates of each layer's vectors.

    ``cos(P_l a, P_{l+1} b) = cos(a, P_l^T P_{l+1} b)`` and the ``P_l^T P_{l+1}`` are independent
    uniform permutations, so one permutation per adjacent pair and draw gives the same null.
    The permutation of a layer is shared by its ``K`` vectors (they are permuted together).

    Args:
        vectors: ``(L, K, d)``.
        draws: number of null draws.
        generator: the only source of randomness (unused when ``permutations`` is given).
        permutations: optional ``(>= draws, L-1, d)`` from :func:`random_permutations`; sharing
            one bank between statistics of the same shape gives each a valid null for less work.
        flat_index: optional ``(>= draws, (L-1) * d)``, :func:`flat_permutation_index` of
            ``permutations`` (built once per bank instead of once per call); takes precedence.

    Returns:
        ``(draws, L-1, K)``.
    """
    unit = _normalise(vectors.float())
    n_pairs, k, d = unit.shape[0] - 1, unit.shape[1], unit.shape[2]
    if flat_index is None:
        if permutations is None:
            permutations = random_permutations(draws, n_pairs, d, generator)
        flat_index = flat_permutation_index(permutations[:draws])
    # Coordinates as rows: permuting layer l+1's coordinates is then one gather of whole K-long rows
    # (index_select over the flat indices), and the products are taken in place.
    earlier = unit[:-1].transpose(1, 2).contiguous()  # (L-1, d, K)
    later_rows = unit[1:].transpose(1, 2).reshape(n_pairs * d, k)  # row l*d + i = coordinate i of layer l+1
    chunk = max(1, _NULL_CHUNK_ELEMENTS // max(1, n_pairs * k * d))
    out = torch.empty(draws, n_pairs, k)
    for start in range(0, draws, chunk):
        stop = min(start + chunk, draws)
        rows = flat_index[start:stop].reshape(-1)
        shuffled = later_rows.index_select(0, rows).view(stop - start, n_pairs, d, k)
        torch.sum(shuffled.mul_(earlier), 2, out=out[start:stop]).abs_()  # (n, L-1, K)
    return out


def permutation_null(vectors: torch.Tensor, draws: int, generator: torch.Generator) -> NullStats:
    """Permutation null of Eq. 1 for each of the ``K`` vector indices.

    It separates continuity that comes from a shared coordinate frame from continuity that any
    vectors with these coordinate values would show (near-uniform or all-positive vectors score
    high under both; a shared frame scores high only in the observed order).

    Args:
        vectors: ``(L, K, d)``.
        draws: number of seeded draws (>= 2).
        generator: the only source of randomness.

    Returns:
        NullStats with ``mean`` and ``std`` of shape ``(K,)``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> permutation_null(torch.randn(5, 1, 64, generator=g), 50, g).mean.shape
        torch.Size([1])
    """
    return null_of_continuity(permuted_abs_cos(vectors, draws, generator))


def null_of_continuity(samples: torch.Tensor) -> NullStats:
    """Eq. 1 null from permuted ``|cos|`` samples ``(draws, L-1, K)``: per-``k`` mean and std."""
    means = samples.nanmean(1)  # (draws, K); NaN marks an undefined pair (geodrift.continuity.degenerate)
    return NullStats(means.mean(0), means.std(0), samples.shape[0])


def null_of_sigma2(samples: torch.Tensor, sigma: torch.Tensor, frobenius_sq: torch.Tensor | None) -> NullStats:
    """Eq. 2 null from permuted ``|cos|`` samples ``(draws, L-1, K)`` with the observed weights.

    Args:
        samples: from :func:`permuted_abs_cos` on all ``K`` vectors.
        sigma: ``(L, K)``; frobenius_sq: ``(L,)`` or None (as in Eq. 2).

    Returns:
        NullStats with scalar ``mean`` and ``std``.
    """
    weights = _energy_share(sigma, frobenius_sq)[:-1].float()  # (L-1, K)
    per_draw = (samples * weights).sum(-1).mean(-1)  # (draws,)
    return NullStats(per_draw.mean(), per_draw.std(), samples.shape[0])


def _normalise(vectors: torch.Tensor) -> torch.Tensor:
    return vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def energy_share(sigma: torch.Tensor, frobenius_sq: torch.Tensor | None) -> torch.Tensor:
    """``s_k^2 / ||W||_F^2`` per layer and ``k`` (``(L, K)``, float64): Eq. 2's weights (None: over ``sum s_k^2``)."""
    return _energy_share(sigma, frobenius_sq)


def _energy_share(sigma: torch.Tensor, frobenius_sq: torch.Tensor | None) -> torch.Tensor:
    energy = sigma.double().pow(2)
    total = energy.sum(-1) if frobenius_sq is None else frobenius_sq.double()
    return energy / total.clamp_min(1e-300).unsqueeze(-1)
