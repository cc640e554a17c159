"""Trajectory shape of one singular vector across depth (paper App. A.2), with its noise floors.

For the stack ``{x^(l)}`` of one projection's v1 (or u1) over its layers:

- **3-PC explained variance** (:func:`pca_explained_variance`): L2-normalise, sign-align
  sequentially (Eq. 6: ``x^(l) <- sign(<x^(l), x^(l-1)>) x^(l)``; the SVD's signs are arbitrary),
  centre, and take ``sum_{i<=3} s_i^2 / sum_j s_j^2`` of the centred stack. A smooth, low-dimensional
  path scores high; the paper reads > 50% as low-dimensional against about 10% for random vectors.
- **|cos| decay with layer distance** (:func:`lag_abs_cos`): mean over ``l`` of
  ``|cos(x^(l), x^(l+k))|`` for ``k = 1, 2, ...``.

Both come with two floors (:func:`trajectory_shape`): random unit vectors of the same dimension
and count, and the permutation null (each layer's coordinates permuted independently, the same
null as Eq. 1's). The lag-decay null goes through :func:`geodrift.metrics.permuted_abs_cos`, the
one implementation of the permuted ``|cos|``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from geodrift import metrics
from geodrift.linalg import SVDTriplets
from geodrift.weights import ROLE_LABELS, WeightKey

# Principal components summed by the explained-variance ratio (the paper's 3D PCA).
N_COMPONENTS = 3
# Vector entries per chunk of null draws (float64 while the PCA runs: about 32 MB).
_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class TrajectoryShape:
    """App. A.2's numbers for one projection and space, each with its floors.

    Attributes:
        role, label, space: which vectors (``space`` ``v`` = v1, ``u`` = u1).
        dim, layers: the vectors' dimension and how many layers they span.
        components: how many principal components ``evr`` sums (3).
        evr: explained-variance ratio of the first ``components`` PCs of the centred, sign-aligned stack.
        evr_random_mean, evr_random_std: the same for random unit vectors (same ``dim``, same count).
        evr_null_mean, evr_null_std: the same after permuting each layer's coordinates (permutation null).
        lags: layer distances ``k``; lag_abs_cos: mean ``|cos(x^(l), x^(l+k))|`` per lag.
        lag_null_mean, lag_null_std: its permutation null per lag; lag_floor: ``sqrt(2/(pi dim))``.
        draws: random and permuted draws behind each null.
        order_null_mean, order_null_std: the layer-order null of the lag-1 ``|cos|``: the same vectors with
            the layers in a uniformly random order. Above it, nearby layers agree more than far ones (a
            path); at it, the continuity is a frame every layer shares, whatever the order.
    """

    role: str
    label: str
    space: str
    dim: int
    layers: int
    components: int
    evr: float
    evr_random_mean: float
    evr_random_std: float
    evr_null_mean: float
    evr_null_std: float
    lags: list[int] = field(default_factory=list)
    lag_abs_cos: list[float] = field(default_factory=list)
    lag_null_mean: list[float] = field(default_factory=list)
    lag_null_std: list[float] = field(default_factory=list)
    lag_floor: float = 0.0
    draws: int = 0
    order_null_mean: float = float("nan")  # lag-1 |cos| with the layers in a random order (the same vectors)
    order_null_std: float = float("nan")

    @property
    def order_z(self) -> float:
        """``(lag-1 |cos| - order-null mean) / std``: is the continuity local in depth, or a frame all layers share?"""
        return (self.lag_abs_cos[0] - self.order_null_mean) / max(self.order_null_std, 1e-12)


def sign_align(vectors: torch.Tensor) -> torch.Tensor:
    """Eq. 6: flip each layer's vector to agree in sign with the (already aligned) previous one.

    Args:
        vectors: ``(..., L, d)``.

    Returns:
        ``(..., L, d)`` with ``<x^(l), x^(l-1)> >= 0`` for every ``l > 0``.

    Example:
        >>> sign_align(torch.tensor([[1.0, 0.0], [-1.0, 0.1]]))[1]
        tensor([ 1.0000, -0.1000])
    """
    rows = [vectors[..., 0, :]]
    for layer in range(1, vectors.shape[-2]):
        x = vectors[..., layer, :]
        sign = torch.where((x * rows[-1]).sum(-1, keepdim=True) < 0, -1.0, 1.0).to(x.dtype)
        rows.append(x * sign)
    return torch.stack(rows, -2)


def pca_explained_variance(vectors: torch.Tensor, components: int = N_COMPONENTS) -> torch.Tensor:
    """App. A.2: explained-variance ratio of the first ``components`` PCs of a stack of vectors.

    Args:
        vectors: ``(..., L, d)``; need not be normalised or sign-aligned (both are done here).
        components: PCs summed.

    Returns:
        ``(...)`` values in ``[0, 1]`` (1 when ``L - 1 <= components``: the centred stack has rank ``L - 1``;
        1 when all vectors coincide up to sign).

    Example:
        >>> line = torch.stack([torch.tensor([1.0, t, 0.0]) for t in (0.0, 0.5, 1.0, 1.5)])
        >>> round(float(pca_explained_variance(line, 1)), 4)
        1.0
    """
    unit = sign_align(vectors.double() / vectors.double().norm(dim=-1, keepdim=True).clamp_min(1e-300))
    centred = unit - unit.mean(-2, keepdim=True)
    energy = torch.linalg.svdvals(centred).pow(2)  # (..., min(L, d))
    total = energy.sum(-1)
    ratio = energy[..., :components].sum(-1) / total.clamp_min(1e-300)
    # Every layer's vector the same (up to sign): a single point, as low-dimensional as it gets.
    return torch.where(total < 1e-12, torch.ones_like(ratio), ratio).float()


def lag_pairs(vectors: torch.Tensor, lag: int) -> torch.Tensor:
    """The pairs ``(x^(l), x^(l+lag))`` interleaved so adjacent-pair code scores exactly them.

    Args:
        vectors: ``(L, K, d)``.
        lag: ``1 <= lag < L``.

    Returns:
        ``(2 (L - lag), K, d)``: ``x^(0), x^(lag), x^(1), x^(1+lag), ...``; adjacent pairs ``0, 2, 4, ...``
        of the result are the lag pairs (:func:`geodrift.metrics.adjacent_abs_cos` then ``[::2]``).
    """
    n = vectors.shape[0] - lag
    return torch.stack([vectors[:n], vectors[lag:]], 1).reshape(2 * n, *vectors.shape[1:])


def lag_abs_cos(vectors: torch.Tensor, lags: list[int]) -> list[float]:
    """Mean ``|cos(x^(l), x^(l+k))|`` over ``l`` for each ``k`` in ``lags``.

    Args:
        vectors: ``(L, d)``.
        lags: layer distances, each in ``1..L-1``.

    Returns:
        One value per lag.
    """
    stack = vectors.unsqueeze(1)
    return [float(metrics.adjacent_abs_cos(lag_pairs(stack, k))[::2].mean()) for k in lags]


def default_lags(n_layers: int) -> list[int]:
    """Layer distances reported: 1, 2, 3, 4, then doubling (6, 8, 12, 16, ...) up to ``L - 1``."""
    lags, k = [], 1
    while k < n_layers:
        lags.append(k)
        k = k + 1 if k < 4 else k + k // 2
    return lags


def trajectory_shape(vectors: torch.Tensor, role: str, label: str, space: str, draws: int,
                     generator: torch.Generator) -> TrajectoryShape:
    """App. A.2's EVR and lag decay of one stack, with the random and permutation floors.

    Args:
        vectors: ``(L, d)`` one vector per layer, in depth order (``L >= 2``).
        role, label, space: names stored in the result.
        draws: random / permuted draws for each null (>= 2).
        generator: the only source of randomness.

    Returns:
        TrajectoryShape.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> t = trajectory_shape(torch.randn(6, 40, generator=g), "attn_q", "Q", "v", 8, g)
        >>> 0.0 <= t.evr_null_mean <= 1.0 and t.lags == [1, 2, 3, 4]
        True
    """
    n_layers, dim = vectors.shape
    x = vectors.float()
    evr = float(pca_explained_variance(x))
    chunk = max(1, _CHUNK_ELEMENTS // (n_layers * dim))  # draws per chunk: bounds memory at 8B widths
    random_parts, null_parts = [], []
    for start in range(0, draws, chunk):
        n = min(chunk, draws - start)
        random_parts.append(pca_explained_variance(torch.randn(n, n_layers, dim, generator=generator)))
        perms = metrics.random_permutations(n, n_layers, dim, generator)  # (n, L, d)
        null_parts.append(pca_explained_variance(torch.gather(x.expand(n, n_layers, dim), 2, perms)))
    random_evr, null_evr = torch.cat(random_parts), torch.cat(null_parts)
    lags = default_lags(n_layers)
    null_mean, null_std = [], []
    for k in lags:
        stack = lag_pairs(x.unsqueeze(1), k)  # (2n, 1, d)
        samples = metrics.permuted_abs_cos(stack, draws, generator)[:, ::2, 0]  # (draws, n)
        per_draw = samples.mean(1)
        null_mean.append(float(per_draw.mean()))
        null_std.append(float(per_draw.std()))
    order_mean, order_std = order_null(x, draws, generator)
    return TrajectoryShape(
        role=role, label=label, space=space, dim=dim, layers=n_layers, components=N_COMPONENTS, evr=evr,
        evr_random_mean=float(random_evr.mean()), evr_random_std=float(random_evr.std()),
        evr_null_mean=float(null_evr.mean()), evr_null_std=float(null_evr.std()), lags=lags,
        lag_abs_cos=lag_abs_cos(x, lags), lag_null_mean=null_mean, lag_null_std=null_std,
        lag_floor=metrics.random_baseline(dim), draws=draws, order_null_mean=order_mean, order_null_std=order_std,
    )


def order_null(vectors: torch.Tensor, draws: int, generator: torch.Generator) -> tuple[float, float]:
    """Mean and std of the mean adjacent ``|cos|`` with the layers in a uniformly random order.

    Args:
        vectors: ``(L, d)``.
        draws: random orders.
        generator: the only source of randomness.

    Returns:
        ``(mean, std)`` over the orders.
    """
    unit = vectors.double() / vectors.double().norm(dim=-1, keepdim=True).clamp_min(1e-300)
    gram = (unit @ unit.T).abs()  # (L, L)
    orders = torch.rand(draws, vectors.shape[0], generator=generator).argsort(-1)  # (draws, L)
    per_draw = gram[orders[:, :-1], orders[:, 1:]].mean(-1)  # (draws,)
    return float(per_draw.mean()), float(per_draw.std())


def trajectory_shapes(spectra: dict[WeightKey, SVDTriplets], draws: int, seed: int) -> list[TrajectoryShape]:
    """:func:`trajectory_shape` of v1 and u1 for every role of a decomposed WeightSet.

    Args:
        spectra: ``{(role, layer): SVDTriplets}`` from :func:`geodrift.continuity.decompose`.
        draws: random / permuted draws per null.
        seed: seeds one generator, used in role order (v then u).

    Returns:
        One TrajectoryShape per role with at least 3 layers, and per space, in role order.
    """
    generator = torch.Generator().manual_seed(seed)
    order = list(ROLE_LABELS)
    roles = sorted({role for role, _ in spectra}, key=lambda r: order.index(r) if r in order else len(order))
    out = []
    for role in roles:
        layers = sorted(layer for r, layer in spectra if r == role)
        if len(layers) < 3:
            continue
        stacks = {"v": torch.stack([spectra[(role, layer)].Vh[0] for layer in layers]),
                  "u": torch.stack([spectra[(role, layer)].U[:, 0] for layer in layers])}
        for space, vectors in stacks.items():
            out.append(trajectory_shape(vectors, role, ROLE_LABELS.get(role, role), space, draws, generator))
    return out
