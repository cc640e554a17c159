"""Trajectory shape of one singular vector across depth (paper App. A.2), with its noise floors.

For the stack ``{x^(l)}`` of one projection's v1 (or u1) over its layers:

- **3-PC explained variance** (:func:`pca_explained_variance`): L2-normalise, sign-align
  sequentially (Eq. 6: ``x^(l) <- sign(<x^(l), x^(l-1)>) x^(l)``; the SVD's signs are arbitrary),
  centre, and take ``sum_{i<=3} s_i^2 / sum_j s_j^2`` of the centred stack. A smooth, low-dimensional
  path scores high; the paper reads > 50% as low-dimensional against about 10% for random vectors.
  Eq. 6 leaves the sign of a vector orthogonal to its predecessor to the input; :func:`alignment_signs`
  settles it from the inner products alone, so the ratio does not depend on the SVD's signs at all.
- **|cos| decay with layer distance** (:func:`lag_abs_cos`): mean over ``l`` of
  ``|cos(x^(l), x^(l+k))|`` for ``k = 1, 2, ...``.
- **layer-order null** (:func:`order_null`): the lag-1 ``|cos|`` of the same vectors in every (or
  many random) layer orders, and the permutation p-value of the depth order: is the continuity a
  path in depth or a frame every layer shares? (``geodrift.continuity.verdicts`` judges it.)

Both come with two floors (:func:`trajectory_shape`): random unit vectors of the same dimension
and count, and the permutation null (each layer's coordinates permuted independently, the same
null as Eq. 1's). The lag-decay null goes through :func:`geodrift.metrics.permuted_abs_cos`, the
one implementation of the permuted ``|cos|``.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import torch

from geodrift import metrics
from geodrift.linalg import SVDTriplets
from geodrift.weights import ROLE_LABELS, WeightKey

# Principal components summed by the explained-variance ratio (the paper's 3D PCA).
N_COMPONENTS = 3
# Vector entries per chunk of null draws (float64 while the PCA runs: about 32 MB).
_CHUNK_ELEMENTS = 4_000_000
# |cos| at or below this counts as orthogonal in sign alignment: its sign is rounding noise (a rotation of
# exactly orthogonal vectors leaves ~1e-16), so it decides nothing (see alignment_signs).
SIGN_TIE = 1e-9
# The layer-order null enumerates every order up to this many (8! = 40,320). Beyond, it draws random orders
# until ORDER_HITS of them reach the observed value, at most ORDER_DRAWS (Besag & Clifford's sequential
# p-value: a p near 0.001 is then known to about 10 %, and a clear case costs one batch).
ORDER_EXACT_MAX = math.factorial(8)
ORDER_HITS = 100
ORDER_DRAWS = 200_000
_ORDER_BATCH = 20_000


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
        order_p: the permutation p-value of the depth order: the share of layer orders whose lag-1 ``|cos|``
            reaches the observed one (exact over all ``L!`` orders up to 8 layers, else sequential over random
            orders: see :func:`order_null`). A layer-shuffled model gets ``p <= a`` with probability ``<= a``.
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
    order_p: float = float("nan")  # share of layer orders whose lag-1 |cos| reaches the observed one

    @property
    def order_z(self) -> float:
        """``(lag-1 |cos| - order-null mean) / std``: is the continuity local in depth, or a frame all layers share?"""
        return (self.lag_abs_cos[0] - self.order_null_mean) / max(self.order_null_std, 1e-12)


def sign_align(vectors: torch.Tensor) -> torch.Tensor:
    """Eq. 6: flip each layer's vector to agree in sign with the (already aligned) previous one.

    Signs come from :func:`alignment_signs`, so the result depends only on the vectors up to sign (and a
    rotation): flipping any input vector gives the same stack, up to one global sign.

    Args:
        vectors: ``(..., L, d)``.

    Returns:
        ``(..., L, d)`` with ``<x^(l), x^(l-1)> >= 0`` for every ``l > 0`` whose ``|cos|`` exceeds
        :data:`SIGN_TIE` (an orthogonal pair has no sign to agree on; see :func:`alignment_signs`).

    Example:
        >>> sign_align(torch.tensor([[1.0, 0.0], [-1.0, 0.1]]))[1]
        tensor([ 1.0000, -0.1000])
    """
    unit = vectors.double() / vectors.double().norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return vectors * alignment_signs(unit @ unit.mT).unsqueeze(-1).to(vectors.dtype)


def alignment_signs(cosines: torch.Tensor) -> torch.Tensor:
    """Eq. 6's signs ``s_l`` from the cosine (Gram) matrix of a stack, with a rule for orthogonal pairs.

    Generically ``s_0 = 1`` and ``s_l = s_(l-1) sign(cos(x_l, x_(l-1)))``. Where ``|cos(x_l, x_(l-1))|``
    is at most :data:`SIGN_TIE`, Eq. 6 leaves the sign to the input (so the 3-PC ratio would change with
    the SVD's arbitrary signs): ``x_l`` is then aligned with the nearest earlier layer it is not
    orthogonal to, and two groups of layers that ``x_l`` links are aligned through it. Layers orthogonal
    to every earlier one start a group; groups never linked are mutually orthogonal, and flipping one
    of them is a reflection, which changes no explained variance. Every decision reads ``|cos|`` and
    sign products only, so flipping an input flips its sign with it: the aligned stack is a function of
    the vectors up to sign, and of their inner products (rotation-invariant).

    Args:
        cosines: ``(..., L, L)`` cosines of the stack's vectors (the Gram matrix of unit vectors).

    Returns:
        ``(..., L)`` signs (+1 or -1, the cosines' dtype).

    Example:
        >>> e = torch.eye(3, dtype=torch.float64)
        >>> x = torch.stack([e[0], e[1], -e[0]])  # x_1 is orthogonal to x_0: x_2 is aligned with x_0
        >>> alignment_signs(x @ x.T).tolist()
        [1.0, 1.0, -1.0]
    """
    consecutive = cosines.diagonal(1, -2, -1)  # (..., L-1): cos(x_l, x_(l+1))
    steps = torch.where(consecutive < 0, -1.0, 1.0).to(cosines.dtype)
    signs = torch.cat([torch.ones_like(steps[..., :1]), steps.cumprod(-1)], -1)  # (..., L)
    tied = (consecutive.abs() <= SIGN_TIE).any(-1)
    if bool(tied.any()):
        n_layers = cosines.shape[-1]
        flat_signs, flat_cos = signs.reshape(-1, n_layers), cosines.reshape(-1, n_layers, n_layers)
        for b in tied.reshape(-1).nonzero().flatten().tolist():
            flat_signs[b] = torch.tensor(_signs_with_ties(flat_cos[b].tolist()), dtype=cosines.dtype)
        signs = flat_signs.reshape(signs.shape)
    return signs


def _signs_with_ties(cos: list[list[float]]) -> list[float]:
    # alignment_signs for one stack with an orthogonal consecutive pair: layers join groups through their
    # links (|cos| > SIGN_TIE to an earlier layer); x_l follows its nearest link, and every other group it
    # links is flipped as a whole to agree with x_l at that group's nearest link.
    sign, group = [1.0] * len(cos), list(range(len(cos)))
    for layer in range(1, len(cos)):
        links = [j for j in range(layer) if abs(cos[layer][j]) > SIGN_TIE]
        if not links:
            continue
        nearest = links[-1]
        sign[layer] = sign[nearest] * (1.0 if cos[layer][nearest] > 0 else -1.0)
        own = group[layer] = group[nearest]
        for j in reversed(links):
            other = group[j]
            if other == own:
                continue
            flip = sign[layer] * sign[j] * cos[layer][j] < 0
            for i in range(layer):
                if group[i] == other:
                    group[i] = own
                    sign[i] = -sign[i] if flip else sign[i]
    return sign


def pca_explained_variance(vectors: torch.Tensor, components: int = N_COMPONENTS) -> torch.Tensor:
    """App. A.2: explained-variance ratio of the first ``components`` PCs of a stack of vectors.

    Args:
        vectors: ``(..., L, d)``; need not be normalised or sign-aligned (both are done here).
        components: PCs summed.

    Returns:
        ``(...)`` values in ``[0, 1]`` (1 when ``L - 1 <= components``: the centred stack has rank ``L - 1``;
        1 when all vectors coincide up to sign).

    Example:
        >>> angles = torch.tensor([0.0, 0.3, 0.6, 0.9])  # an arc in a 2-plane of R^3: two PCs explain it
        >>> arc = torch.stack([angles.cos(), angles.sin(), torch.zeros(4)], 1)
        >>> round(float(pca_explained_variance(arc, 2)), 4)
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
    order_mean, order_std, order_p = order_null(x, generator)
    return TrajectoryShape(
        role=role, label=label, space=space, dim=dim, layers=n_layers, components=N_COMPONENTS, evr=evr,
        evr_random_mean=float(random_evr.mean()), evr_random_std=float(random_evr.std()),
        evr_null_mean=float(null_evr.mean()), evr_null_std=float(null_evr.std()), lags=lags,
        lag_abs_cos=lag_abs_cos(x, lags), lag_null_mean=null_mean, lag_null_std=null_std,
        lag_floor=metrics.random_baseline(dim), draws=draws, order_null_mean=order_mean, order_null_std=order_std,
        order_p=order_p,
    )


def order_null(vectors: torch.Tensor, generator: torch.Generator) -> tuple[float, float, float]:
    """The layer-order null of the mean adjacent ``|cos|``: the same vectors with the layers in other orders.

    Every order when ``L! <= ORDER_EXACT_MAX`` (8 layers). Else uniformly random orders, in batches, until
    :data:`ORDER_HITS` of them reach the observed value or :data:`ORDER_DRAWS` were drawn: Besag &
    Clifford's (1991) sequential p-value, ``hits / drawn`` when the hits were reached, else ``(1 + hits) /
    (1 + drawn)``; valid as a permutation p-value, and precise where it matters (about 10 % near 0.001).
    The ``(L, L)`` Gram matrix is computed once; 20,000 orders of 30 layers take about 15 ms.

    Args:
        vectors: ``(L, d)``, in depth order.
        generator: draws the random orders (untouched when every order is enumerated).

    Returns:
        ``(mean, std, p)``: the mean adjacent ``|cos|`` over the orders, its std, and the p-value of the
        depth order (the share of orders whose value reaches the observed one).

    Example:
        >>> angles = torch.tensor([0.0, 0.5, 1.0, 1.5])  # four layers along an arc: nearby layers closest
        >>> arc = torch.stack([angles.cos(), angles.sin()], 1)
        >>> round(order_null(arc, torch.Generator())[2], 4)  # 2 of the 24 orders (this one, reversed) do as well
        0.0833
    """
    unit = vectors.double() / vectors.double().norm(dim=-1, keepdim=True).clamp_min(1e-300)
    gram = (unit @ unit.T).abs()  # (L, L)
    n_layers = vectors.shape[0]
    observed = float(gram.diagonal(1).mean())

    def values(orders: torch.Tensor) -> torch.Tensor:  # (n, L) orders -> (n,) mean adjacent |cos|
        return gram[orders[:, :-1], orders[:, 1:]].mean(-1)

    if math.factorial(n_layers) <= ORDER_EXACT_MAX:
        per_order = values(_all_orders(n_layers))
        hits = int((per_order >= observed - 1e-12).sum())  # the depth order itself (and its reverse) count
        return float(per_order.mean()), float(per_order.std()), hits / len(per_order)
    parts, hits, drawn = [], 0, 0
    while drawn < ORDER_DRAWS:
        batch = values(torch.rand(min(_ORDER_BATCH, ORDER_DRAWS - drawn), n_layers, generator=generator).argsort(-1))
        reached = hits + (batch >= observed - 1e-12).long().cumsum(0)  # hits after each order of the batch
        if int(reached[-1]) >= ORDER_HITS:
            batch = batch[:int((reached >= ORDER_HITS).nonzero()[0]) + 1]  # stop at the ORDER_HITS-th hit
        parts.append(batch)
        hits, drawn = min(int(reached[-1]), ORDER_HITS), drawn + len(batch)
        if hits >= ORDER_HITS:
            break
    per_order = torch.cat(parts)
    p = hits / drawn if hits >= ORDER_HITS else (1 + hits) / (1 + drawn)
    return float(per_order.mean()), float(per_order.std()), p


@functools.lru_cache(maxsize=8)
def _all_orders(n_layers: int) -> torch.Tensor:
    # (L!, L): every permutation of range(L), for the exact layer-order null of short stacks.
    return torch.tensor(list(itertools.permutations(range(n_layers))), dtype=torch.long)


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
