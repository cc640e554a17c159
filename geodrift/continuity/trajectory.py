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
null as Eq. 1's). Every number of a stack is a function of its ``(L, L)`` Gram matrix of unit
vectors (sign alignment, centring and the PCA energies included), so one permuted copy of the stack
per draw serves the EVR null and the null of every lag at once.

Permutation-bank policy (:class:`geodrift.continuity.PermutationBank`): the per-layer permutations
``P_l`` of a draw are composed from the report's per-pair bank of shape ``(L-1, d)``
(``P_0 = id``, ``P_{l+1} = Q_l o P_l``), the same bank the Eq. 1 nulls of that shape use. For any
lag ``k`` the relative permutations ``P_l^-1 P_{l+k}`` of the pairs ``(l, l+k)`` are independent
and uniform (their pairs form disjoint chains), so every lag's null is exact; the lag-1 null is
then Eq. 1's k = 1 null sample for sample. The random floor of a shape ``(L, d)`` is drawn once
per bank and shared by the stacks of that shape.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from geodrift import metrics
from geodrift.continuity.bank import PermutationBank
from geodrift.continuity.schedule import single_threaded_blas
from geodrift.gauge.status import null_kind
from geodrift.linalg import SVDTriplets
from geodrift.weights import ROLE_LABELS, WeightKey

# Principal components summed by the explained-variance ratio (the paper's 3D PCA).
N_COMPONENTS = 3
# Vector entries per chunk of null draws (float32 gathers plus their int64 indices: about 48 MB).
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
    unit = _unit(vectors)
    return explained_variance_of_gram(unit @ unit.mT, components)


def explained_variance_of_gram(gram: torch.Tensor, components: int = N_COMPONENTS) -> torch.Tensor:
    """:func:`pca_explained_variance` from the Gram matrix ``X X^T`` of the unit vectors alone.

    Sign alignment multiplies the Gram matrix by ``s s^T`` (``s_l = +-1``, Eq. 6), centring by
    ``H = I - 11^T/L`` on both sides, and the PCA energies ``s_i^2`` of the centred stack are the
    eigenvalues of ``H (G o s s^T) H``: no ``(L, d)`` work after the Gram matrix.

    Args:
        gram: ``(..., L, L)`` Gram matrices of unit vectors (float64 for the eigenvalues' accuracy).
        components: PCs summed.

    Returns:
        ``(...)`` float32 values in ``[0, 1]`` (1 for a stack of coincident vectors).

    Example:
        >>> round(float(explained_variance_of_gram(torch.eye(5, dtype=torch.float64), 3)), 4)
        0.75
    """
    gram = gram.double()
    s = alignment_signs(gram)  # (..., L)
    aligned = gram * s.unsqueeze(-1) * s.unsqueeze(-2)
    centred = (aligned - aligned.mean(-1, keepdim=True) - aligned.mean(-2, keepdim=True)
               + aligned.mean((-1, -2), keepdim=True))
    energy = torch.linalg.eigvalsh(centred).flip(-1).clamp_min(0.0)  # (..., L), descending
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
                     bank: PermutationBank | torch.Generator, null: str = "permutation") -> TrajectoryShape:
    """App. A.2's EVR and lag decay of one stack, with the random and permutation floors.

    Args:
        vectors: ``(L, d)`` one vector per layer, in depth order (``L >= 2``).
        role, label, space: names stored in the result.
        draws: random / permuted draws for each null (>= 2).
        bank: the report's shared permutations (see the module docstring); a bare generator gets a
            bank of its own.
        null: ``permutation`` or ``rotation`` (:func:`geodrift.gauge.status.null_kind`): the EVR's null is then the
            random floor (a uniformly random rotation per layer makes the stack random unit vectors) and each lag's
            the analytic :func:`geodrift.metrics.rotation_null` (its ``L - k`` pairs are pairwise independent).

    Returns:
        TrajectoryShape.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> t = trajectory_shape(torch.randn(6, 40, generator=g), "attn_q", "Q", "v", 8, g)
        >>> 0.0 <= t.evr_null_mean <= 1.0 and t.lags == [1, 2, 3, 4]
        True
    """
    if isinstance(bank, torch.Generator):
        bank = PermutationBank(bank)
    n_layers, dim = vectors.shape
    x = vectors.float()
    lags = default_lags(n_layers)
    # One thread, as the report's other nulls: these are many small ops, and on a busy 2-core machine each
    # two-thread parallel region waits for a descheduled thread (geodrift.continuity.measure.assemble).
    with single_threaded_blas():
        unit = _unit(x)  # (L, d) float64
        evr = float(explained_variance_of_gram(unit @ unit.T))
        random_mean, random_std = _random_floor(bank, draws, n_layers, dim)
        if null == "rotation":
            mean, sd = metrics.rotation_null(dim)
            evr_null_mean, evr_null_std = random_mean, random_std
            lag_mean, lag_std = [mean] * len(lags), [sd / (n_layers - k) ** 0.5 for k in lags]
        else:
            evr_null, lag_null = permutation_null_samples(x, lags, draws, bank)  # (draws,), (draws, lags)
            evr_null_mean, evr_null_std = float(evr_null.mean()), float(evr_null.std())
            lag_mean, lag_std = lag_null.mean(0).tolist(), lag_null.std(0).tolist()
        order_mean, order_std, order_p = order_null(x, bank)
        observed_lags = lag_abs_cos(x, lags)
    return TrajectoryShape(
        role=role, label=label, space=space, dim=dim, layers=n_layers, components=N_COMPONENTS, evr=evr,
        evr_random_mean=random_mean, evr_random_std=random_std,
        evr_null_mean=evr_null_mean, evr_null_std=evr_null_std, lags=lags,
        lag_abs_cos=observed_lags, lag_null_mean=lag_mean, lag_null_std=lag_std,
        lag_floor=metrics.random_baseline(dim), draws=draws, order_null_mean=order_mean, order_null_std=order_std,
        order_p=order_p,
    )


def permutation_null_samples(vectors: torch.Tensor, lags: list[int], draws: int,
                             bank: PermutationBank) -> tuple[torch.Tensor, torch.Tensor]:
    """The permutation null of the EVR and of every lag's mean ``|cos|``, draw by draw, from one permuted stack.

    Each draw permutes every layer's coordinates by the bank's per-layer permutations
    (:meth:`geodrift.continuity.PermutationBank.layer_permutations`), takes the ``(L, L)`` Gram matrix of the
    permuted unit vectors, and reads the EVR and each lag's ``|cos|`` off it. Runs in chunks of draws
    (memory stays about 32 MB at any width) with one BLAS thread.

    Args:
        vectors: ``(L, d)``.
        lags: layer distances, each in ``1..L-1``.
        draws: null draws.
        bank: the source of permutations.

    Returns:
        ``(evr (draws,), lag means (draws, len(lags)))``.

    Example:
        >>> bank = PermutationBank(torch.Generator().manual_seed(0))
        >>> evr, lag = permutation_null_samples(torch.randn(5, 30), [1, 2], 7, bank)
        >>> tuple(evr.shape), tuple(lag.shape)
        ((7,), (7, 2))
    """
    n_layers, dim = vectors.shape
    unit = _unit(vectors).float()  # float32 gathers and products: the Gram entries to ~1e-7, the EVR in float64
    chunk = max(1, _CHUNK_ELEMENTS // (n_layers * dim))  # draws per chunk: bounds memory at 8B widths
    evr, lag = [], []
    with single_threaded_blas():  # as the report's other nulls (geodrift.continuity.measure.assemble)
        for start in range(0, draws, chunk):
            stop = min(start + chunk, draws)
            perms = bank.layer_permutations(draws, n_layers, dim, start, stop)  # (n, L, d)
            permuted = torch.gather(unit.expand(stop - start, n_layers, dim), 2, perms)
            gram = (permuted @ permuted.mT).double()  # (n, L, L)
            evr.append(explained_variance_of_gram(gram))
            lag.append(_lag_means(gram, lags))
    return torch.cat(evr), torch.cat(lag)


def order_null(vectors: torch.Tensor, bank: PermutationBank) -> tuple[float, float, float]:
    """The layer-order null of the mean adjacent ``|cos|``: the same vectors with the layers in other orders.

    Every order when ``L! <= ORDER_EXACT_MAX`` (8 layers). Else uniformly random orders, in batches, until
    :data:`ORDER_HITS` of them reach the observed value or :data:`ORDER_DRAWS` were drawn: Besag &
    Clifford's (1991) sequential p-value, ``hits / drawn`` when the hits were reached, else ``(1 + hits) /
    (1 + drawn)``; valid as a permutation p-value, and precise where it matters (about 10 % near 0.001).
    The ``(L, L)`` Gram matrix is computed once; the random orders come from the report's bank
    (:meth:`PermutationBank.order_pairs`), drawn once per layer count and shared by every stack of that
    depth (each stack's p stays an exact permutation p-value; only the stacks' nulls are correlated).

    Args:
        vectors: ``(L, d)``, in depth order.
        bank: the report's permutation bank (unused when every order is enumerated).

    Returns:
        ``(mean, std, p)``: the mean adjacent ``|cos|`` over the orders, its std, and the p-value of the
        depth order (the share of orders whose value reaches the observed one).

    Example:
        >>> angles = torch.tensor([0.0, 0.5, 1.0, 1.5])  # four layers along an arc: nearby layers closest
        >>> arc = torch.stack([angles.cos(), angles.sin()], 1)
        >>> bank = PermutationBank(torch.Generator())
        >>> round(order_null(arc, bank)[2], 4)  # 2 of the 24 orders (this one, reversed) do as well
        0.0833
    """
    unit = _unit(vectors)
    gram = (unit @ unit.T).abs().numpy().ravel()  # (L * L,) float64
    n_layers = vectors.shape[0]
    observed = float(gram[1::n_layers + 1].mean())  # the first superdiagonal: adjacent layers in depth order

    def values(pairs: np.ndarray) -> np.ndarray:  # (n, L-1) flat adjacent pairs -> (n,) mean adjacent |cos|
        return gram[pairs].mean(-1)  # numpy indexes with the bank's int16 pairs directly (no int64 copy)

    if math.factorial(n_layers) <= ORDER_EXACT_MAX:
        orders = _all_orders(n_layers)
        per_order = values((orders[:, :-1] * n_layers + orders[:, 1:]).numpy())
        hits = int((per_order >= observed - 1e-12).sum())  # the depth order itself (and its reverse) count
        return float(per_order.mean()), float(per_order.std(ddof=1)), hits / len(per_order)
    parts, hits, drawn = [], 0, 0
    while drawn < ORDER_DRAWS:
        batch = values(bank.order_pairs_array(n_layers, drawn // _ORDER_BATCH, _ORDER_BATCH))
        reached = hits + np.cumsum(batch >= observed - 1e-12)  # hits after each order of the batch
        if int(reached[-1]) >= ORDER_HITS:
            batch = batch[:int(np.argmax(reached >= ORDER_HITS)) + 1]  # stop at the ORDER_HITS-th hit
        parts.append(batch)
        hits, drawn = min(int(reached[-1]), ORDER_HITS), drawn + len(batch)
        if hits >= ORDER_HITS:
            break
    per_order = np.concatenate(parts)
    p = hits / drawn if hits >= ORDER_HITS else (1 + hits) / (1 + drawn)
    return float(per_order.mean()), float(per_order.std(ddof=1)), p


@functools.lru_cache(maxsize=8)
def _all_orders(n_layers: int) -> torch.Tensor:
    # (L!, L): every permutation of range(L), for the exact layer-order null of short stacks.
    return torch.tensor(list(itertools.permutations(range(n_layers))), dtype=torch.long)


def trajectory_shapes(spectra: dict[WeightKey, SVDTriplets], draws: int, seed: int,
                      bank: PermutationBank | None = None, view: str = "raw") -> list[TrajectoryShape]:
    """:func:`trajectory_shape` of v1 and u1 for every role of a decomposed WeightSet.

    Args:
        spectra: ``{(role, layer): SVDTriplets}`` from :func:`geodrift.continuity.decompose`.
        draws: random / permuted draws per null.
        seed: seeds a fresh bank when ``bank`` is None.
        bank: the report's permutation bank (:func:`geodrift.continuity.assemble`'s), so the trajectory's
            nulls reuse its permutations; used in role order (v then u).
        view: the report's view: each space's null is :func:`geodrift.gauge.status.null_kind`'s.

    Returns:
        One TrajectoryShape per role with at least 3 layers, and per space, in role order.
    """
    bank = bank if bank is not None else PermutationBank(torch.Generator().manual_seed(seed))
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
            out.append(trajectory_shape(vectors, role, ROLE_LABELS.get(role, role), space, draws, bank,
                                        null_kind(view, role, space)))
    return out


def _unit(vectors: torch.Tensor) -> torch.Tensor:
    x = vectors.double()
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)


def _lag_means(gram: torch.Tensor, lags: list[int]) -> torch.Tensor:
    # gram (n, L, L) of unit vectors -> (n, len(lags)): mean over l of |cos(x_l, x_{l+k})| per draw.
    return torch.stack([gram.diagonal(k, -2, -1).abs().mean(-1) for k in lags], -1).float()


def _random_floor(bank: PermutationBank, draws: int, n_layers: int, dim: int) -> tuple[float, float]:
    # EVR of random unit vectors of this shape: drawn once per bank and shape, shared by its stacks.
    chunk = max(1, _CHUNK_ELEMENTS // (n_layers * dim))

    def draw() -> tuple[float, float]:
        parts = []
        for start in range(0, draws, chunk):
            unit = _unit(torch.randn(min(chunk, draws - start), n_layers, dim, generator=bank.generator))
            parts.append(explained_variance_of_gram(unit @ unit.mT))
        values = torch.cat(parts)
        return float(values.mean()), float(values.std())

    return bank.memo(("trajectory random floor", draws, n_layers, dim), draw)
