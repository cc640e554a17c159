"""One layer of orbit alignment: B's layer brought to the reference layer's gauge (:mod:`geodrift.gauge.align`).

Both layers are folded and their residual streams already in one frame (the residual rotation is fitted
over the whole model by :mod:`geodrift.gauge.align`); what is left acts on the head and hidden side:

1. **head permutation**: ``linear_sum_assignment`` on the cosines of each query head's ``O_h V_g`` and
   ``Q_h^T K_g`` (products the per-head maps leave unchanged), within and across groups;
2. **V/O map** per key-value head (``head_maps``): ``general``, the least-squares ``N = V_A V_B^+`` on V's rows
   (its inverse on the O columns of the head's query heads), exact for any invertible map; ``orthogonal``,
   the rotation nearest on V's rows and O's columns together (orthogonal Procrustes); ``none``. A head whose
   V rows cannot carry a least-squares map (a pruned head: all zero, or rank-deficient) gets the rotation,
   and the layer's notes say so;
3. **Q/K map** per key-value head and RoPE pair: ``general``, the least-squares rotation-scaling
   ``rho R(theta)`` (the commutant of RoPE) on K's pair rows (on Q's where K's are zero), ``rho R(theta)`` on K and
   ``R(theta) / rho`` on Q; ``orthogonal``, the rotation nearest on Q's and K's rows together;
4. **hidden units**: a permutation *with signs* (an Up row and its Down column may both change sign: Up
   enters the gated product linearly). Units are scored by the cosines ``gate + |up + down|``, or, between two
   canonical layers, by their Gate rows' inner products (the nearest Gate rows; only the permutation moves
   them), each match signed by ``up + down``; the row-wise best match is taken when it is a permutation (then it
   is optimal: every row gets its largest score), else ``linear_sum_assignment``;
5. **Up/Down scale** (``scales="fit"``): each matched unit of B scaled so that ``log(||Up_j|| / ||Down_j||)``
   equals A's (exact for a rescaled copy); ``scales="keep"`` leaves B's (balanced) split.

Every map is applied with :mod:`geodrift.gauge.orbit`'s generators, so B keeps its function exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment as _scipy_assignment

from geodrift.errors import GeodriftError
from geodrift.gauge.orbit import (
    GaugeShape,
    layer_key,
    permute_heads,
    permute_mlp,
    scale_mlp,
    transform_qk_all,
    transform_vo,
)

Layer = dict[str, torch.Tensor]  # "q_proj" ... "down_proj" -> weight (nn.Linear layout)
HEAD_MAPS = ("general", "orthogonal", "none")
_TINY = 1e-300
_RANK_TOLERANCE = 1e-8  # a head's V rows with a singular value below this share of its largest: rank-deficient


@dataclass
class LayerAlignment:
    """What :func:`align_layer` recovered in one layer."""

    layer: int
    identity_share: float  # share of B's hidden units matched to the unit of the same index
    mutual_best_share: float  # share of matches that are each other's best score (1.0 for an exact copy)
    matched_cosine: float  # mean over units of (cos Gate + cos Up + cos Down) / 3 after matching (signs applied)
    log_scale_std: float  # spread of the recovered Up/Down log-scales (0 with scales kept)
    heads_kept: float  # share of KV groups matched to the group (and query order) of the same index
    vo_residual: float  # ||N V_B - V_A|| / ||V_A|| over the layer's key-value heads
    qk_residual: float  # ||N K_B - K_A|| / ||K_A|| after the rotation-scaling fit
    sign_flip_share: float = 0.0  # share of hidden units matched with their Up row and Down column negated
    notes: list[str] = field(default_factory=list)  # heads whose map fell back to a rotation, and why


def linear_sum_assignment(score: np.ndarray, maximize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``scipy.optimize.linear_sum_assignment``, refusing scores that are not finite (weights whose products
    overflow float32, or NaN) in one line instead of scipy's ValueError.

    Raises:
        GeodriftError: ``the matching scores are not finite ...`` (:func:`align_layer` adds the layer).
    """
    if not np.isfinite(score).all():
        raise GeodriftError("the matching scores of heads or hidden units are not finite (weights whose products "
                            "overflow float32, or NaN); check the weights, or compare without alignment (--view raw)")
    return _scipy_assignment(score, maximize=maximize)


def align_layer(ref: Layer, layer: Layer, shape: GaugeShape, index: int, *, head_maps: str = "general",
                scales: str = "fit", score: str = "cosine", peaks: torch.Tensor | None = None
                ) -> tuple[Layer, LayerAlignment]:
    """B's layer mapped into the reference layer's gauge (heads, per-head maps, signed hidden units, scales).

    Args:
        ref, layer: the two layers' seven projections (float32 or float64, folded, one residual frame).
        shape: the heads; index: the layer's index (named in notes).
        head_maps: ``general``, ``orthogonal`` or ``none`` (see the module docstring).
        scales: ``fit`` (B's Up/Down split set to A's) or ``keep``.
        score, peaks: :func:`match_units`'s (``gate`` for two canonical layers).

    Returns:
        ``(aligned layer, what was recovered)``; ``layer`` is not modified.

    Example:
        >>> from geodrift.gauge.orbit import random_gauge, toy_state_dict
        >>> s = GaugeShape(1, 4, 2, 4)
        >>> sd = toy_state_dict(s, 8, 12, 30, torch.Generator().manual_seed(0))
        >>> moved = random_gauge(sd, s, torch.Generator().manual_seed(1), generators=("vo", "qk", "mlp_scale",
        ...                      "mlp_permute", "head_permute"))
        >>> names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
        >>> a, b = ({n: x[layer_key(0, n)] for n in names} for x in (sd, moved))
        >>> out, info = align_layer(a, b, s, 0)
        >>> max(float((out[n] - a[n]).abs().max()) for n in names) < 1e-9, info.mutual_best_share
        (True, 1.0)
    """
    try:
        return _align_layer(ref, layer, shape, index, head_maps, scales, score, peaks)
    except GeodriftError as error:
        raise GeodriftError(f"--align: layer {index}: {error}") from None


def _align_layer(ref: Layer, layer: Layer, shape: GaugeShape, index: int, head_maps: str, scales: str, score: str,
                 peaks: torch.Tensor | None) -> tuple[Layer, LayerAlignment]:
    a, b = _as_state(ref), _as_state(layer)
    kv_perm, q_perms, heads_kept = _match_heads(a, b, shape)
    b = permute_heads(b, shape, 0, kv_perm, q_perms)
    vo = qk = float("nan")
    notes: list[str] = []
    if head_maps != "none":
        b, vo = _fit_vo(a, b, shape, head_maps == "orthogonal", notes, index)
        b, qk = _fit_qk(a, b, shape, head_maps == "orthogonal")
    cols, signs, info = match_units(_mlp(a), _mlp(b), score, peaks)
    b = permute_mlp(b, 0, torch.from_numpy(cols))
    factor = signs * (_balance_scales(a, b) if scales == "fit" else torch.ones_like(signs))
    b = scale_mlp(b, 0, factor)
    log_scale = factor.abs().log()
    out = {name: b[layer_key(0, name)] for name in layer}
    return out, LayerAlignment(index, info[0], info[1], info[2], float(log_scale.std())
                               if scales == "fit" and log_scale.numel() > 1 else 0.0, heads_kept, vo, qk,
                               float((signs < 0).double().mean()), notes)


def _as_state(layer: Layer) -> dict[str, torch.Tensor]:
    return {layer_key(0, name): value for name, value in layer.items()}


def _head_similarity(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], shape: GaugeShape) -> np.ndarray:
    # Per pair of query heads (h in A, h' in B), the mean of the cosines of O_h V_g(h) and of Q_h^T K_g(h)
    # (d x d products the per-head maps cancel in), from hd x hd blocks of four cross-Gram matrices:
    # <X1 Y1, X2 Y2>_F = tr((X1^T X2)(Y2 Y1^T)) = sum((X1^T X2) * (Y1 Y2^T)).
    hd, group, n = shape.head_dim, shape.group, shape.n_heads
    w = {side: {name: sd[layer_key(0, name)] for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
         for side, sd in (("a", a), ("b", b))}

    def blocks(x: torch.Tensor, heads: int) -> torch.Tensor:  # (heads*hd, heads*hd) -> (heads, heads, hd, hd)
        return x.reshape(heads, hd, heads, hd).permute(0, 2, 1, 3)

    def expand(x: torch.Tensor) -> torch.Tensor:  # KV-head blocks -> query-head blocks
        return x.repeat_interleave(group, dim=0).repeat_interleave(group, dim=1)

    def pair(x1: torch.Tensor, y1: torch.Tensor, x2: torch.Tensor, y2: torch.Tensor, kv_first: bool) -> torch.Tensor:
        xs = blocks(x1.T @ x2 if not kv_first else x1 @ x2.T, n)
        ys = expand(blocks(y1 @ y2.T, shape.n_kv_heads))
        return (xs * ys).sum(dim=(2, 3))

    sims = []
    for x, y, kv_first in (("o_proj", "v_proj", False), ("q_proj", "k_proj", True)):
        cross = pair(w["a"][x], w["a"][y], w["b"][x], w["b"][y], kv_first)
        norms = [_head_norms(w[side][x], w[side][y], shape, kv_first) for side in ("a", "b")]
        sims.append(cross / _floor(norms[0].reshape(-1, 1) * norms[1].reshape(1, -1)).sqrt())
    return ((sims[0] + sims[1]) / 2).numpy()


def _head_norms(x: torch.Tensor, y: torch.Tensor, shape: GaugeShape, kv_first: bool) -> torch.Tensor:
    # ||X_h Y_g(h)||_F^2 per query head from hd x hd Grams: O_h V_g (x = O's columns) or Q_h^T K_g (x = Q's rows)
    hd, d = shape.head_dim, x.shape[1] if kv_first else x.shape[0]
    heads = x.reshape(shape.n_heads, hd, d) if kv_first else x.reshape(d, shape.n_heads, hd).transpose(0, 1).mT
    x_gram = heads @ heads.mT  # (n_heads, hd, hd)
    kv = y.reshape(shape.n_kv_heads, hd, y.shape[1])
    y_gram = (kv @ kv.mT).repeat_interleave(shape.group, 0)
    return (x_gram * y_gram).sum((1, 2))


def _match_heads(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], shape: GaugeShape
                 ) -> tuple[torch.Tensor, torch.Tensor, float]:
    # Query heads matched within each pair of groups, then the groups matched on those matchings' totals.
    group = shape.group
    sim = _head_similarity(a, b, shape)
    within = {}
    group_score = np.zeros((shape.n_kv_heads, shape.n_kv_heads))
    for ga in range(shape.n_kv_heads):
        for gb in range(shape.n_kv_heads):
            block = sim[ga * group:(ga + 1) * group, gb * group:(gb + 1) * group]
            rows, cols = linear_sum_assignment(block, maximize=True)
            within[ga, gb] = cols
            group_score[ga, gb] = block[rows, cols].sum()
    _, kv_cols = linear_sum_assignment(group_score, maximize=True)
    q_perms = torch.tensor(np.stack([within[ga, int(gb)] for ga, gb in enumerate(kv_cols)]), dtype=torch.int64)
    kv_perm = torch.from_numpy(kv_cols.astype(np.int64))
    kept = float(np.mean([int(gb) == ga and bool((within[ga, int(gb)] == np.arange(group)).all())
                          for ga, gb in enumerate(kv_cols)]))
    return kv_perm, q_perms, kept


def _o_stack(sd: dict[str, torch.Tensor], shape: GaugeShape, kv: int) -> torch.Tensor:
    # (group * d, hd): the O columns of KV head kv's query heads, stacked
    o = sd[layer_key(0, "o_proj")]
    return torch.cat([o[:, shape.head_rows(q)] for q in range(kv * shape.group, (kv + 1) * shape.group)])


def _least_squares_map(target: torch.Tensor, source: torch.Tensor) -> torch.Tensor | None:
    # N with N source ~ target (rows), or None where source or N is rank-deficient (a pruned or singular head)
    s = torch.linalg.svdvals(source)
    if s.numel() == 0 or float(s[-1]) <= _RANK_TOLERANCE * float(s[0]):
        return None
    n = target @ torch.linalg.pinv(source)
    sn = torch.linalg.svdvals(n)
    return n if float(sn[-1]) > _RANK_TOLERANCE * float(sn[0]) else None


def _nearest_rotation(cross: torch.Tensor) -> torch.Tensor:
    # the orthogonal N maximising tr(N cross) (= W U^T for cross = U S W^T); the identity for a zero cross
    u, _, wt = torch.linalg.svd(cross)
    return wt.mT @ u.mT


def _fit_vo(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], shape: GaugeShape, orthogonal: bool,
            notes: list[str], index: int) -> tuple[dict[str, torch.Tensor], float]:
    # Per KV head, N on V's rows and N^-1 on its query heads' O columns (orbit.transform_vo).
    v = layer_key(0, "v_proj")
    num = den = 0.0
    for g in range(shape.n_kv_heads):
        rows = shape.head_rows(g)
        va, vb = a[v][rows], b[v][rows]
        n = None if orthogonal else _least_squares_map(va, vb)
        if n is None and not orthogonal:  # V's rows cannot carry it (a singular head): O's columns may, N^-1 on them
            inverse = _least_squares_map(_o_stack(a, shape, g).T, _o_stack(b, shape, g).T)
            n = None if inverse is None else torch.linalg.inv(inverse.T)
            if n is not None:
                notes.append(f"layer {index} KV head {g}: V rows rank-deficient in B: its V/O map fitted on O's "
                             "columns")
        if n is None:
            if not orthogonal:
                notes.append(f"layer {index} KV head {g}: V rows and O columns rank-deficient in B (e.g. a pruned "
                             "head): its V/O map fitted as a rotation on both")
            # ||N V_B - V_A||^2 + ||O_B N^T - O_A||^2 is least at the N maximising tr(N (V_B V_A^T + O_B^T O_A))
            n = _nearest_rotation(vb @ va.T + _o_stack(b, shape, g).T @ _o_stack(a, shape, g))
        b = transform_vo(b, shape, 0, g, n)
        num += float(torch.linalg.vector_norm(b[v][rows] - va)) ** 2
        den += float(torch.linalg.vector_norm(va)) ** 2
    return b, (num / den) ** 0.5 if den else 0.0


def _pair_products(a: torch.Tensor, b: torch.Tensor, heads: int, group: int, half: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Per KV head and RoPE pair (HF half-split rows), summed over the group's heads: (<B, A>, <J B, A>, ||B||^2), each
    # (heads, pairs), J = [[0, -1], [1, 0]] on the pair's two rows. B and J B are orthogonal and of one norm, so the
    # least-squares (c, s) of A ~ (c I + s J) B are the first two over the third, and the nearest rotation R(theta)
    # has theta = atan2(second, first).
    d = a.shape[1]
    a1, a2 = a.reshape(heads, group, 2, half, d).unbind(2)
    b1, b2 = b.reshape(heads, group, 2, half, d).unbind(2)
    first = ((b1 * a1).sum((1, 3)) + (b2 * a2).sum((1, 3))).double()
    second = ((b1 * a2).sum((1, 3)) - (b2 * a1).sum((1, 3))).double()
    energy = (b1.pow(2).sum((1, 3)) + b2.pow(2).sum((1, 3))).double()
    return first, second, energy


def _fit_qk(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], shape: GaugeShape,
            orthogonal: bool) -> tuple[dict[str, torch.Tensor], float]:
    # Per KV head and RoPE pair, rho R(theta) on K's pair rows and R(theta) / rho on Q's
    # (orbit.transform_qk_all with r = 1 / rho, phi = theta).
    q, k = layer_key(0, "q_proj"), layer_key(0, "k_proj")
    n_kv, half = shape.n_kv_heads, shape.pairs
    ck, sk, ek = _pair_products(a[k], b[k], n_kv, 1, half)
    cq, sq, eq = _pair_products(a[q], b[q], n_kv, shape.group, half)
    if orthogonal:  # the rotation nearest on Q's and K's rows together
        rho, theta = torch.ones_like(ck), torch.atan2(sk + sq, ck + cq)
    else:  # least squares on K's rows; where K's pair rows are zero, on Q's (which carry R(theta) / rho)
        on_k = (ek > _TINY) & (ck.abs() + sk.abs() > 0)
        on_q = ~on_k & (eq > _TINY) & (cq.abs() + sq.abs() > 0)
        rho = torch.where(on_k, torch.hypot(ck, sk) / ek.clamp_min(_TINY),
                          torch.where(on_q, eq / torch.hypot(cq, sq).clamp_min(_TINY), 1.0))
        theta = torch.where(on_k, torch.atan2(sk, ck), torch.where(on_q, torch.atan2(sq, cq), 0.0))
    for g in range(n_kv):
        b = transform_qk_all(b, shape, 0, g, 1.0 / rho[g], theta[g])
    num = float(torch.linalg.vector_norm((b[k] - a[k]).double())) ** 2
    den = float(torch.linalg.vector_norm(a[k].double())) ** 2
    return b, (num / den) ** 0.5 if den else 0.0


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / _floor(x.norm(dim=1, keepdim=True))


def _floor(norms: torch.Tensor) -> torch.Tensor:
    # Norms kept off zero in their own dtype (1e-300 is 0 in float32): a zero row or head divides to 0, not NaN.
    return norms.clamp_min(torch.finfo(norms.dtype).tiny)


def _mlp(sd: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # (gate rows, up rows, down columns as rows): each (d_ff, d)
    return sd[layer_key(0, "gate_proj")], sd[layer_key(0, "up_proj")], sd[layer_key(0, "down_proj")].T


def match_units(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...], score: str = "cosine",
                peaks: torch.Tensor | None = None, rotation: torch.Tensor | None = None, slack: float = 0.0
                ) -> tuple[np.ndarray, torch.Tensor, tuple[float, float, float]]:
    """The signed hidden-unit matching of two MLPs (see the module docstring, step 4).

    Args:
        a, b: ``(gate rows, up rows, down columns)`` of each, each ``(d_ff, d)``.
        score: ``cosine`` (``S(i, j) = cos(g_i, g'_j) + |cos(u_i, u'_j) + cos(d_i, d'_j)|``) or ``gate`` (two
            canonical layers: the units matched by the cosines of their Gate rows, which no gauge but the permutation
            moves, each match signed by its Up and Down rows).
        peaks: with ``gate``, A's :func:`gate_peaks`: then the matching is tried near the diagonal first (two
            canonical layers are sorted by Gate norm) and taken where certified (:func:`_near_diagonal`), which
            scores ``O(d_ff)`` pairs instead of ``d_ff^2``.
        rotation: ``R`` from B's residual frame to A's where B's rows are still in their own (readers ``W R^T``);
            None: one frame.
        slack: ``||R - I||`` (spectral) or more: up to :data:`NEAR_IDENTITY`, B's rows are scored in their own frame
            (a cosine moves by at most ``slack`` under ``R``) and the result is taken only where the margins exceed
            it; beyond, or where they do not, B's rows are turned into A's frame first.

    Returns:
        ``(cols, signs, (identity share, mutual-best share, mean matched cosine))``: A's unit ``i`` is B's unit
        ``cols[i]`` times ``signs[i]`` (float64 +-1).
    """
    fa, fb = [x.float() for x in a], [x.float() for x in b]
    n = fa[0].shape[0]
    if rotation is not None and slack > NEAR_IDENTITY:
        fb, rotation, slack = [x @ rotation.float().T for x in fb], None, 0.0
    found = None
    if score == "gate" and peaks is not None:
        found = _near_diagonal(_unit(fa[0]), _unit(fb[0]), peaks, slack)
    if found is not None:
        cols, mutual = found
        cos = _pair_cosines(fa, fb, torch.from_numpy(cols))
    if found is None or bool(((cos[1] + cos[2]).abs() <= 4 * slack).any()):  # every pair, in A's frame
        if rotation is not None:
            fb, rotation, slack = [x @ rotation.float().T for x in fb], None, 0.0
        ua, ub = [_unit(x) for x in fa], [_unit(x) for x in fb]
        sim = ua[0] @ ub[0].T
        if score == "cosine":
            sim.add_((torch.cat(ua[1:], 1) @ torch.cat(ub[1:], 1).T).abs())
        best = sim.argmax(1)
        if len(torch.unique(best)) == n:  # the row-wise best is a permutation: it is the assignment's optimum
            cols = best.numpy()
        else:
            _, cols = linear_sum_assignment(sim.double().numpy(), maximize=True)
        mutual = (sim.argmax(0)[torch.from_numpy(cols)] == torch.arange(n)).numpy()
        cos = _pair_cosines(fa, fb, torch.from_numpy(cols))
    signs = torch.where(cos[1] + cos[2] < 0, -1.0, 1.0).to(torch.float64)
    matched = float(((cos[0] + (cos[1] + cos[2]) * signs.float()) / 3).mean())
    return cols.astype(np.int64), signs, (float(np.mean(cols == np.arange(n))), float(np.mean(mutual)), matched)


def _pair_cosines(fa: list[torch.Tensor], fb: list[torch.Tensor], pick: torch.Tensor) -> list[torch.Tensor]:
    # cos(a_i, b_pick[i]) for gate, up and down rows, without normalising whole matrices
    out = []
    for x, y in zip(fa, fb, strict=True):
        if not x.is_contiguous() and x.T.is_contiguous() and y.T.is_contiguous():  # columns (Down's): reduced along
            xc, yc = x.T, y.T.index_select(1, pick)  # dim 0 of the stored matrices, no strided gather or norm
            norms = (torch.linalg.vecdot(xc, xc, dim=0) * torch.linalg.vecdot(yc, yc, dim=0)).sqrt()
            out.append(torch.linalg.vecdot(xc, yc, dim=0) / _floor(norms))
            continue
        y = y.index_select(0, pick)
        out.append(torch.linalg.vecdot(x, y) / _floor(x.norm(dim=1) * y.norm(dim=1)))
    return out


_BAND = 8  # _near_diagonal: B's units scored against A's within this many places of the same index
NEAR_IDENTITY = 0.05  # match_units: a residual rotation this close to the identity need not be applied to B's rows


def gate_peaks(gate: torch.Tensor) -> torch.Tensor:
    """Per hidden unit ``i``, the largest ``cos(g_i, g_k)`` over the other units ``k`` of one layer's Gate rows
    (float32; ``d_ff^2 d`` work once per reference layer): what :func:`_near_diagonal` certifies a matching against."""
    g = _unit(gate.float()).numpy()
    sim = torch.from_numpy(g @ g.T)  # numpy's product of a matrix and its transpose is one syrk: half the work
    sim.fill_diagonal_(-float("inf"))
    return sim.max(1).values


def _near_diagonal(ga: torch.Tensor, gb: torch.Tensor, peaks: torch.Tensor, slack: float = 0.0
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    # Two canonical layers of nearby checkpoints (unit Gate rows): each of A's units is B's unit of nearly the same
    # index. Score the pairs within _BAND places, take each row's best, and certify it: when that is a permutation
    # sigma with |g'_sigma(k) - g_k| <= delta for every k, any other score S(i, j) = <g_i, g_k> + <g_i, g'_j - g_k>
    # (k = sigma^-1 j != i) is at most peak_i + delta, so a row whose best exceeds that has its best certified; if
    # every row does, the row-wise best is the assignment's optimum. B's rows may still be in a frame ``slack`` from
    # A's (every score, and delta, then within slack of the true one): the margins must exceed it. Returns
    # (cols, mutual flags) or None.
    n = ga.shape[0]
    scores = torch.full((n, 2 * _BAND + 1), -float("inf"))  # column o: row i against B's unit i + o - _BAND
    for o in range(-_BAND, _BAND + 1):
        lo, hi = max(0, -o), min(n, n - o)
        if lo < hi:
            scores[lo:hi, o + _BAND] = torch.linalg.vecdot(ga[lo:hi], gb[lo + o:hi + o])
    top = scores.topk(2, dim=1)
    cols = top.indices[:, 0] + torch.arange(n) - _BAND
    if len(torch.unique(cols)) != n:
        return None
    best, runner_up = top.values[:, 0], top.values[:, 1]
    delta = float((gb[cols] - ga).norm(dim=1).max()) + slack
    if not bool((best - slack > torch.maximum(peaks + delta, runner_up + slack)).all()):
        return None
    # mutual too: any other row k scores column cols[i] at most peak_i + delta as well (the self-products are symmetric)
    return cols.numpy(), np.ones(n, dtype=bool)


def _balance_scales(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> torch.Tensor:
    # |s| per unit of B (already matched) making its log(||Up_j|| / ||Down_j||) A's: exact for a rescaled copy;
    # 1 where a norm is zero (a dead unit has no ratio to match)
    (_, up_a, down_a), (_, up_b, down_b) = _mlp(a), _mlp(b)
    na, da, nb, db = up_a.norm(dim=1), down_a.norm(dim=1), up_b.norm(dim=1), down_b.norm(dim=1)
    ok = (na > _TINY) & (da > _TINY) & (nb > _TINY) & (db > _TINY)
    ratio = (na * db) / (da * nb).clamp_min(_TINY)
    return torch.where(ok, ratio.sqrt(), torch.ones_like(ratio))


__all__ = ["HEAD_MAPS", "NEAR_IDENTITY", "Layer", "LayerAlignment", "align_layer", "gate_peaks", "match_units"]
