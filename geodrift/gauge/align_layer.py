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
   enters the gated product linearly). Units are scored by ``gate + |up + down|`` (cosines, or inner products
   where both layers are balanced: then the score is the distance the match removes), each pair's sign the
   sign of ``up + down``; the row-wise best match is taken when it is a permutation (then it is optimal: every
   row gets its largest score), else ``linear_sum_assignment``;
5. **Up/Down scale** (``scales="fit"``): each matched unit of B scaled so that ``log(||Up_j|| / ||Down_j||)``
   equals A's (exact for a rescaled copy); ``scales="keep"`` leaves B's (balanced) split.

Every map is applied with :mod:`geodrift.gauge.orbit`'s generators, so B keeps its function exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

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


def align_layer(ref: Layer, layer: Layer, shape: GaugeShape, index: int, *, head_maps: str = "general",
                scales: str = "fit", score: str = "cosine") -> tuple[Layer, LayerAlignment]:
    """B's layer mapped into the reference layer's gauge (heads, per-head maps, signed hidden units, scales).

    Args:
        ref, layer: the two layers' seven projections (float64, folded, one residual frame).
        shape: the heads; index: the layer's index (named in notes).
        head_maps: ``general``, ``orthogonal`` or ``none`` (see the module docstring).
        scales: ``fit`` (B's Up/Down split set to A's) or ``keep``.
        score: ``cosine`` or ``inner`` (for two balanced layers: the matching then minimises the distance).

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
    a, b = _as_state(ref), _as_state(layer)
    kv_perm, q_perms, heads_kept = _match_heads(a, b, shape)
    b = permute_heads(b, shape, 0, kv_perm, q_perms)
    vo = qk = float("nan")
    notes: list[str] = []
    if head_maps != "none":
        b, vo = _fit_vo(a, b, shape, head_maps == "orthogonal", notes, index)
        b, qk = _fit_qk(a, b, shape, head_maps == "orthogonal")
    cols, signs, info = _match_units(a, b, score)
    b = permute_mlp(b, 0, torch.from_numpy(cols))
    factor = signs * (_balance_scales(a, b) if scales == "fit" else torch.ones_like(signs))
    b = scale_mlp(b, 0, factor)
    log_scale = factor.abs().log()
    out = {name: b[layer_key(0, name)] for name in layer}
    return out, LayerAlignment(index, info[0], info[1], _matched_cosine(a, b), float(log_scale.std())
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
        self_a = pair(w["a"][x], w["a"][y], w["a"][x], w["a"][y], kv_first).diagonal()
        self_b = pair(w["b"][x], w["b"][y], w["b"][x], w["b"][y], kv_first).diagonal()
        sims.append(cross / (self_a.reshape(-1, 1) * self_b.reshape(1, -1)).clamp_min(_TINY).sqrt())
    return ((sims[0] + sims[1]) / 2).numpy()


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


def _pair_rows(sd: dict[str, torch.Tensor], name: str, shape: GaugeShape, kv: int, pair: int) -> torch.Tensor:
    # (heads, 2, d): the pair's two rows of K's head kv, or of every query head of its group
    heads = [kv] if name == "k_proj" else range(kv * shape.group, (kv + 1) * shape.group)
    return torch.stack([sd[layer_key(0, name)][shape.head_rows(h, pair=pair)] for h in heads])


def _pair_products(target: torch.Tensor, source: torch.Tensor) -> tuple[float, float, float]:
    # (<source, target>, <J source, target>, ||source||^2) over (..., 2, d) rows, J = [[0, -1], [1, 0]]: source and
    # J source are orthogonal and of one norm, so the least-squares (c, s) of target ~ (c I + s J) source are the
    # first two over the third, and the rotation R(theta) nearest has theta = atan2(second, first)
    turned = torch.stack([-source[..., 1, :], source[..., 0, :]], -2)
    return float((source * target).sum()), float((turned * target).sum()), float(source.pow(2).sum())


def _fit_qk(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], shape: GaugeShape,
            orthogonal: bool) -> tuple[dict[str, torch.Tensor], float]:
    # Per KV head and RoPE pair, rho R(theta) on K's pair rows and R(theta) / rho on Q's
    # (orbit.transform_qk_all with r = 1 / rho, phi = theta).
    k = layer_key(0, "k_proj")
    num = den = 0.0
    for g in range(shape.n_kv_heads):
        rho = torch.ones(shape.pairs, dtype=torch.float64)
        theta = torch.zeros(shape.pairs, dtype=torch.float64)
        for i in range(shape.pairs):
            ck, sk, ek = _pair_products(_pair_rows(a, "k_proj", shape, g, i), _pair_rows(b, "k_proj", shape, g, i))
            cq, sq, eq = _pair_products(_pair_rows(a, "q_proj", shape, g, i), _pair_rows(b, "q_proj", shape, g, i))
            if orthogonal:  # the rotation nearest on Q's and K's rows together
                theta[i] = float(np.arctan2(sk + sq, ck + cq))
            elif ek > _TINY and (ck, sk) != (0.0, 0.0):  # least squares on K's rows: rho R(theta) = (c I + s J)
                rho[i], theta[i] = float(np.hypot(ck, sk)) / ek, float(np.arctan2(sk, ck))
            elif eq > _TINY and (cq, sq) != (0.0, 0.0):  # K's pair rows are zero: Q's carry R(theta) / rho
                rho[i], theta[i] = eq / float(np.hypot(cq, sq)), float(np.arctan2(sq, cq))
        b = transform_qk_all(b, shape, 0, g, 1.0 / rho, theta)
        rows = shape.head_rows(g)
        num += float(torch.linalg.vector_norm(b[k][rows] - a[k][rows])) ** 2
        den += float(torch.linalg.vector_norm(a[k][rows])) ** 2
    return b, (num / den) ** 0.5 if den else 0.0


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(_TINY)


def _mlp(sd: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # (gate rows, up rows, down columns as rows): each (d_ff, d)
    return sd[layer_key(0, "gate_proj")], sd[layer_key(0, "up_proj")], sd[layer_key(0, "down_proj")].T


def match_units(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...], score: str = "cosine"
                ) -> tuple[np.ndarray, torch.Tensor, tuple[float, float]]:
    """The signed hidden-unit matching of two MLPs (see the module docstring, step 4).

    Args:
        a, b: ``(gate rows, up rows, down columns)`` of each, each ``(d_ff, d)``.
        score: ``cosine`` or ``inner``.

    Returns:
        ``(cols, signs, (identity share, mutual-best share))``: A's unit ``i`` is B's unit ``cols[i]`` times
        ``signs[i]`` (float64 +-1).
    """
    prep = _unit if score == "cosine" else (lambda x: x)
    gate = prep(a[0]).float() @ prep(b[0]).float().T
    both = prep(a[1]).float() @ prep(b[1]).float().T + prep(a[2]).float() @ prep(b[2]).float().T
    sim = (gate + both.abs()).double().numpy()
    rows = np.arange(sim.shape[0])
    cols = sim.argmax(axis=1)
    if len(np.unique(cols)) != len(cols):  # the row-wise best is no permutation: solve the assignment
        _, cols = linear_sum_assignment(sim, maximize=True)
    mutual = (sim.argmax(axis=1) == cols) & (sim.argmax(axis=0)[cols] == rows)
    signs = torch.where(both[torch.from_numpy(rows), torch.from_numpy(cols)] < 0, -1.0, 1.0).to(torch.float64)
    return cols.astype(np.int64), signs, (float(np.mean(cols == rows)), float(mutual.mean()))


def _match_units(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], score: str
                 ) -> tuple[np.ndarray, torch.Tensor, tuple[float, float]]:
    return match_units(_mlp(a), _mlp(b), score)


def _balance_scales(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> torch.Tensor:
    # |s| per unit of B (already matched) making its log(||Up_j|| / ||Down_j||) A's: exact for a rescaled copy;
    # 1 where a norm is zero (a dead unit has no ratio to match)
    (_, up_a, down_a), (_, up_b, down_b) = _mlp(a), _mlp(b)
    na, da, nb, db = up_a.norm(dim=1), down_a.norm(dim=1), up_b.norm(dim=1), down_b.norm(dim=1)
    ok = (na > _TINY) & (da > _TINY) & (nb > _TINY) & (db > _TINY)
    ratio = (na * db) / (da * nb).clamp_min(_TINY)
    return torch.where(ok, ratio.sqrt(), torch.ones_like(ratio))


def _matched_cosine(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    cos = [(_unit(x) * _unit(y)).sum(1) for x, y in zip(_mlp(a), _mlp(b), strict=True)]
    return float(((cos[0] + cos[1] + cos[2]) / 3).mean())


__all__ = ["HEAD_MAPS", "Layer", "LayerAlignment", "align_layer", "match_units"]
