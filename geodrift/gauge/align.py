"""Orbit alignment of two Llama-family checkpoints: bring B into A's gauge before comparing them.

Two checkpoints that compute the same function can differ by the network's exact symmetries
(issue 31, docs/scan.md "Aligned comparison"): a rotation of the residual stream once the norm gains
are folded, a permutation and positive scaling of each layer's hidden units (Up rows against Down
columns; Gate rows permuted only), an invertible map per key-value head on V's rows against O's
columns, a rotation-scaling per key-value head and RoPE frequency pair on K's rows against Q's, and
a permutation of the heads. :func:`align` recovers each of them from the weights alone, in this order,
and applies their inverses to B with :mod:`geodrift.gauge.orbit`'s maps:

1. **fold** both models' norm gains into the projections that read them (Q/K/V, Gate/Up, the head);
2. **residual rotation**: orthogonal Procrustes (``scipy.linalg.orthogonal_procrustes``) between the
   stacked token-indexed rows of the embedding and the (folded) head, whose rows no other gauge moves;
3. per layer, **head permutation**: ``linear_sum_assignment`` on the cosines of each query head's
   ``O_h V_g`` and ``Q_h^T K_g`` (products the per-head maps leave unchanged), within and across groups;
4. **V/O map** per key-value head: the least-squares ``N = V_A V_B^+`` on V's rows, its inverse on the
   O columns of the head's query heads;
5. **Q/K map** per key-value head and RoPE pair: the least-squares 2x2 map on K's pair rows,
   projected onto rotation-scalings (the commutant of RoPE), its inverse transpose on Q's;
6. **hidden permutation**: ``scipy.optimize.linear_sum_assignment`` on the summed cosines of Gate rows,
   Up rows and Down columns (a cosine is blind to the positive Up/Down scaling);
7. **Up/Down scaling**: each matched unit of B scaled so that its ``log(||Up_j|| / ||Down_j||)`` equals
   A's (exact for a rescaled copy; for an unrelated model it puts B's units at A's balance).

For an exact reparametrisation every step is exact, and the aligned B equals the folded A up to
float error; for two independently trained models each step is the best fit of its kind, and the
report says how good (the fit residuals, the mean matched cosine, the share of mutual best matches).
All of this works on Hugging Face-named state dicts in memory (float64 inside), for models
whose MLP is gated (SwiGLU) with RMSNorm pre-norms and RoPE in the half-split layout.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.optimize import linear_sum_assignment

from geodrift.errors import GeodriftError
from geodrift.gauge.orbit import (
    EMBED,
    LM_HEAD,
    GaugeShape,
    StateDict,
    fold_gains,
    layer_key,
    permute_heads,
    permute_mlp,
    rotate_residual,
    scale_mlp,
    transform_qk_all,
    transform_vo,
)

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class LayerAlignment:
    """What :func:`align` recovered in one layer."""

    layer: int
    identity_share: float  # share of B's hidden units matched to the unit of the same index
    mutual_best_share: float  # share of matches that are each other's best cosine (1.0 for an exact copy)
    matched_cosine: float  # mean over units of (cos Gate + cos Up + cos Down) / 3 after matching
    log_scale_std: float  # spread of the recovered Up/Down log-scales
    heads_kept: float  # share of KV groups matched to the group (and query order) of the same index
    vo_residual: float  # ||N V_B - V_A|| / ||V_A|| over the layer's key-value heads
    qk_residual: float  # ||N K_B - K_A|| / ||K_A|| after the rotation-scaling projection


@dataclass
class AlignmentReport:
    """What :func:`align` recovered: the residual rotation's fit and each layer's maps."""

    rotation_residual: float  # ||X_B R - X_A|| / ||X_A|| over the embedding and head rows
    naive_weight_error: float  # ||B - A|| / ||A|| over every projection, both folded, before alignment
    aligned_weight_error: float  # the same after alignment
    layers: list[LayerAlignment] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (docs/output-schema.md, ``alignment``)."""
        return asdict(self)

    def summary(self) -> str:
        """One line: the fits and the permutation agreement.

        Example:
            >>> AlignmentReport(1e-9, 0.9, 2e-8, [LayerAlignment(0, 0.5, 1.0, 1.0, 0.3, 1.0, 0.0, 0.0)]).summary()[:48]
            'aligned B to A: rotation fit residual 1.00e-09, '
        """
        mutual = float(np.mean([x.mutual_best_share for x in self.layers])) if self.layers else float("nan")
        cosine = float(np.mean([x.matched_cosine for x in self.layers])) if self.layers else float("nan")
        return (f"aligned B to A: rotation fit residual {self.rotation_residual:.2e}, hidden units matched with "
                f"mean cosine {cosine:.3f} ({100 * mutual:.1f}% mutual best), weight distance "
                f"{self.naive_weight_error:.3g} -> {self.aligned_weight_error:.3g} (relative, gains folded)")


def shape_of(sd: StateDict, n_heads: int, n_kv_heads: int | None = None) -> GaugeShape:
    """The :class:`~geodrift.gauge.orbit.GaugeShape` of a Hugging Face-named Llama state dict.

    Args:
        sd: ``model.embed_tokens.weight`` and ``model.layers.{l}.…`` for ``l = 0..L-1``.
        n_heads, n_kv_heads: from the model's config (``n_kv_heads`` None: ``n_heads``).

    Raises:
        GeodriftError: no embedding, layers not numbered ``0..L-1``, heads that do not divide the width.

    Example:
        >>> shape_of({EMBED: torch.zeros(5, 8), layer_key(0, "q_proj"): torch.zeros(8, 8)}, 2)
        GaugeShape(n_layers=1, n_heads=2, n_kv_heads=2, head_dim=4)
    """
    if EMBED not in sd:
        raise GeodriftError(f"align: the state dict has no {EMBED}; alignment needs a Llama-family model with "
                            "Hugging Face names")
    d = int(sd[EMBED].shape[1])
    layers = sorted({int(k.split(".")[2]) for k in sd if k.startswith("model.layers.")})
    if not layers or layers != list(range(len(layers))):
        raise GeodriftError("align: the state dict's layers are not numbered 0..L-1; pass a whole model")
    kv = n_kv_heads or n_heads
    if n_heads <= 0 or d % n_heads or n_heads % kv:
        raise GeodriftError(f"align: {n_heads} heads / {kv} key-value heads do not divide d_model {d}")
    return GaugeShape(len(layers), n_heads, kv, d // n_heads)


HEAD_MAPS = ("general", "orthogonal", "none")
# The per-head maps ``compare``/``drift --align`` fit unless told (``--head-maps``): orthogonal. Between two
# independently trained models a general least-squares map per head distorts them (benchmarks/RESULTS_barriers.md,
# 3 seed pairs of the tiny simulator Llama: loss barrier 0.616 without head maps, 0.441 with orthogonal ones,
# 2.102 with general ones, above the naive 1.165; seeds 1, 2: weight distance 1.513 -> 0.278 orthogonal, 4.751
# general), while an isometry per head never does. ``general`` is for an exactly reparametrised copy whose V/O or
# Q/K maps are not orthogonal (AWQ's V/O scales, a random gauge): it recovers every exact gauge (and stays the
# default of :func:`align` itself).
DEFAULT_HEAD_MAPS = "orthogonal"


def align(sd_a: StateDict, sd_b: StateDict, shape: GaugeShape, *, head_maps: str = "general"
          ) -> tuple[StateDict, StateDict, AlignmentReport]:
    """Bring B into A's gauge: residual rotation, head and hidden permutations, scalings, V/O and Q/K maps.

    Args:
        sd_a, sd_b: Hugging Face-named Llama state dicts of one shape (tied or untied heads).
        shape: their :class:`~geodrift.gauge.orbit.GaugeShape`.
        head_maps: the per-head V/O and Q/K maps fitted: ``general`` (any invertible V/O map and any
            rotation-scaling per RoPE pair: recovers every exact gauge), ``orthogonal`` (rotations only:
            the conservative fit for two unrelated models) or ``none``.

    Returns:
        ``(a_folded, b_aligned, report)``: A with its gains folded, B folded and mapped into A's frame
        by the inverse maps (float64; each computes its model's function), and what was recovered.

    Raises:
        GeodriftError: the two differ in a tensor's presence or shape (naming the tensor), or an
            unknown ``head_maps``.

    Example:
        >>> from geodrift.gauge.orbit import random_gauge, toy_state_dict
        >>> shape = GaugeShape(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=4)
        >>> sd = toy_state_dict(shape, d_model=16, d_ff=24, vocab=40, generator=torch.Generator().manual_seed(0))
        >>> moved = random_gauge(sd, shape, torch.Generator().manual_seed(1), condition=10.0, sigma=0.5)
        >>> _, _, rep = align(sd, moved, shape)
        >>> rep.naive_weight_error > 0.5, rep.aligned_weight_error < 1e-9
        (True, True)
    """
    if head_maps not in HEAD_MAPS:
        raise GeodriftError(f"align: head_maps {head_maps!r} is not one of {', '.join(HEAD_MAPS)}")
    check_same_shape(sd_a, sd_b, shape)
    a = fold_gains({k: v.detach().to(torch.float64) for k, v in sd_a.items()}, shape, in_place=True)
    b = fold_gains({k: v.detach().to(torch.float64) for k, v in sd_b.items()}, shape, in_place=True)
    b, report = align_folded(a, b, shape, head_maps=head_maps)
    return a, b, report


def fold_float64(sd: StateDict, shape: GaugeShape) -> StateDict:
    """``sd`` in float64 with its gains folded, **emptying** ``sd`` as it goes (one tensor at a time in two
    precisions, instead of the whole model).

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> s = GaugeShape(1, 2, 2, 2); sd = toy_state_dict(s, 4, 6, 5, torch.Generator().manual_seed(1))
        >>> wide = fold_float64(sd, s)
        >>> len(sd), wide[EMBED].dtype
        (0, torch.float64)
    """
    wide = {}
    for key in list(sd):
        wide[key] = sd.pop(key).detach().to(torch.float64)
    return fold_gains(wide, shape, in_place=True)


def align_folded(a: StateDict, b: StateDict, shape: GaugeShape, *, head_maps: str = "general"
                 ) -> tuple[StateDict, AlignmentReport]:
    """:func:`align` on models whose gains are folded, float64 (:func:`fold_float64`): ``b`` is consumed (its
    tensors replaced in place where the maps allow), ``a`` only read, so a series aligns every model to one
    folded ``a``.

    Returns:
        ``(b_aligned, report)``.

    Raises:
        GeodriftError: an unknown ``head_maps``.
    """
    t0 = time.perf_counter()
    if head_maps not in HEAD_MAPS:
        raise GeodriftError(f"align: head_maps {head_maps!r} is not one of {', '.join(HEAD_MAPS)}")
    naive = weight_error(a, b, shape)
    b = rotate_residual(b, shape, _residual_rotation(a, b).T, in_place=True)  # rows x -> x R: B's stream to A's
    rot_residual = (sum(float(torch.linalg.vector_norm(b[n] - a[n])) ** 2 for n in (EMBED, LM_HEAD))
                    / sum(float(torch.linalg.vector_norm(a[n])) ** 2 for n in (EMBED, LM_HEAD))) ** 0.5
    layers = []
    for layer in range(shape.n_layers):
        kv_perm, q_perms, heads_kept = _match_heads(a, b, shape, layer)
        b = permute_heads(b, shape, layer, kv_perm, q_perms)
        vo = qk = float("nan")
        if head_maps != "none":
            b, vo = _fit_vo(a, b, shape, layer, head_maps == "orthogonal")
            b, qk = _fit_qk(a, b, shape, layer, head_maps == "orthogonal")
        cols, info = _match_hidden(a, b, layer)
        b = permute_mlp(b, layer, torch.from_numpy(cols))
        b = scale_mlp(b, layer, _balance_scales(a, b, layer))
        layers.append(LayerAlignment(layer, *info, heads_kept, vo, qk))
    steps = ["fold gains", "residual rotation (Procrustes on embedding and head rows)",
             "head permutation (linear_sum_assignment on OV and QK cosines)"]
    steps += [f"V/O map per key-value head ({head_maps})", f"Q/K map per RoPE pair ({head_maps})"] \
        if head_maps != "none" else []
    steps += ["hidden permutation (linear_sum_assignment on Gate/Up/Down cosines)", "Up/Down scaling"]
    report = AlignmentReport(rot_residual, naive, weight_error(a, b, shape), layers, steps, time.perf_counter() - t0)
    return b, report


def check_same_shape(sd_a: StateDict, sd_b: StateDict, shape: GaugeShape, label_a: str = "A",
                     label_b: str = "B") -> None:
    """Refuse two state dicts that differ in a projection's presence or shape.

    Raises:
        GeodriftError: one line naming the tensor, both shapes and both models.
    """
    names = [EMBED] + [layer_key(lay, r) for lay in range(shape.n_layers) for r in PROJECTIONS]
    for name in names:
        ta, tb = sd_a.get(name), sd_b.get(name)
        sa = "missing" if ta is None else "x".join(map(str, ta.shape))
        sb = "missing" if tb is None else "x".join(map(str, tb.shape))
        if sa != sb or ta is None:
            raise GeodriftError(f"--align: {name} is {sa} in {label_a} but {sb} in {label_b}; --align needs two "
                                "models of one architecture and shape")


def weight_error(a: StateDict, b: StateDict, shape: GaugeShape) -> float:
    """``||B - A|| / ||A||`` over the embedding, the head and every projection (Frobenius, all stacked).

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> s = GaugeShape(1, 2, 2, 2); sd = toy_state_dict(s, 4, 6, 5, torch.Generator().manual_seed(1))
        >>> weight_error(sd, sd, s)
        0.0
    """
    names = [EMBED, LM_HEAD] + [layer_key(lay, r) for lay in range(shape.n_layers) for r in PROJECTIONS]
    num = sum(float(torch.linalg.vector_norm(b[n].double() - a[n].double())) ** 2 for n in names if n in a)
    den = sum(float(torch.linalg.vector_norm(a[n].double())) ** 2 for n in names if n in a)
    return (num / den) ** 0.5 if den else 0.0


# ---- the fits (the maps themselves are geodrift.gauge.orbit's) -------------------------------------
def _residual_rotation(a: StateDict, b: StateDict) -> torch.Tensor:
    # Token-indexed rows (embedding, folded head) carry no gauge but the stream's: X_B = X_A Q^T.
    # orthogonal_procrustes(A, B) depends on A^T B only, so it is given (I, X_B^T X_A) rather than the
    # two (2 V x d) stacks. Returns R with X_B R ~ X_A.
    cross = b[EMBED].T @ a[EMBED] + b[LM_HEAD].T @ a[LM_HEAD]
    rotation, _ = orthogonal_procrustes(np.eye(cross.shape[0]), cross.numpy())
    return torch.from_numpy(rotation)


def _head_similarity(a: StateDict, b: StateDict, shape: GaugeShape, layer: int) -> np.ndarray:
    # Per pair of query heads (h in A, h' in B), the mean of the cosines of O_h V_g(h) and of Q_h^T K_g(h)
    # (d x d products the per-head maps cancel in), from hd x hd blocks of four cross-Gram matrices:
    # <X1 Y1, X2 Y2>_F = tr((X1^T X2)(Y2 Y1^T)) = sum((X1^T X2) * (Y1 Y2^T)).
    hd, group, n = shape.head_dim, shape.group, shape.n_heads
    w = {side: {name: sd[layer_key(layer, name)] for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
         for side, sd in (("a", a), ("b", b))}

    def blocks(x: torch.Tensor, heads: int) -> torch.Tensor:  # (heads*hd, heads*hd) -> (heads, heads, hd, hd)
        return x.reshape(heads, hd, heads, hd).permute(0, 2, 1, 3)

    def expand(x: torch.Tensor) -> torch.Tensor:  # KV-head blocks -> query-head blocks
        return x.repeat_interleave(group, dim=0).repeat_interleave(group, dim=1)

    def pair(x1: torch.Tensor, y1: torch.Tensor, x2: torch.Tensor, y2: torch.Tensor, kv_first: bool) -> torch.Tensor:
        # x: query-head factors (columns of O, or rows of Q), y: KV-head factors; -> (n, n) inner products
        xs = blocks(x1.T @ x2 if not kv_first else x1 @ x2.T, n)
        ys = expand(blocks(y1 @ y2.T, shape.n_kv_heads))
        return (xs * ys).sum(dim=(2, 3))

    sims = []
    for x, y, kv_first in (("o_proj", "v_proj", False), ("q_proj", "k_proj", True)):
        cross = pair(w["a"][x], w["a"][y], w["b"][x], w["b"][y], kv_first)
        self_a = pair(w["a"][x], w["a"][y], w["a"][x], w["a"][y], kv_first).diagonal()
        self_b = pair(w["b"][x], w["b"][y], w["b"][x], w["b"][y], kv_first).diagonal()
        sims.append(cross / (self_a.reshape(-1, 1) * self_b.reshape(1, -1)).clamp_min(1e-300).sqrt())
    return ((sims[0] + sims[1]) / 2).numpy()


def _match_heads(a: StateDict, b: StateDict, shape: GaugeShape, layer: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    # Query heads matched within each pair of groups, then the groups matched on those matchings' totals.
    group = shape.group
    sim = _head_similarity(a, b, shape, layer)
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


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)


def _match_hidden(a: StateDict, b: StateDict, layer: int) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    w = {n: (a[layer_key(layer, n)], b[layer_key(layer, n)]) for n in ("gate_proj", "up_proj", "down_proj")}
    # rows of [Gate | Up | Down^T], each part unit-normalised (blind to the Up/Down scaling); float32 is ample
    feats = [torch.cat([_unit(w[n][i] if n != "down_proj" else w[n][i].T) for n in w], dim=1).float() for i in (0, 1)]
    sim = (feats[0] @ feats[1].T / 3).double().numpy()
    rows, cols = linear_sum_assignment(sim, maximize=True)  # rows == arange: A's unit i <- B's unit cols[i]
    mutual = (sim.argmax(axis=1) == cols) & (sim.argmax(axis=0)[cols] == rows)
    ratio_a = w["up_proj"][0].norm(dim=1) / w["down_proj"][0].norm(dim=0)
    ratio_b = w["up_proj"][1].norm(dim=1)[cols] / w["down_proj"][1].norm(dim=0)[cols]
    log_scale = 0.5 * torch.log(ratio_a / ratio_b)
    return cols.astype(np.int64), (float(np.mean(cols == rows)), float(mutual.mean()), float(sim[rows, cols].mean()),
                                   float(log_scale.std()) if log_scale.numel() > 1 else 0.0)


def _balance_scales(a: StateDict, b: StateDict, layer: int) -> torch.Tensor:
    # Each of B's units scaled so its log(||Up_j|| / ||Down_j||) equals A's: exact for a rescaled copy.
    up, down = layer_key(layer, "up_proj"), layer_key(layer, "down_proj")
    ratio_a = a[up].norm(dim=1) / a[down].norm(dim=0)
    ratio_b = b[up].norm(dim=1) / b[down].norm(dim=0)
    return (ratio_a / ratio_b).sqrt()


def _fit_vo(a: StateDict, b: StateDict, shape: GaugeShape, layer: int, orthogonal: bool) -> tuple[StateDict, float]:
    # Least squares N V_B ~ V_A per KV head (N orthogonal: Procrustes); orbit.transform_vo puts N on V's
    # rows and N^-1 on O's columns.
    v = layer_key(layer, "v_proj")
    num = den = 0.0
    for g in range(shape.n_kv_heads):
        rows = shape.head_rows(g)
        va, vb = a[v][rows], b[v][rows]
        if orthogonal:
            n = torch.from_numpy(orthogonal_procrustes(vb.T.numpy(), va.T.numpy())[0]).T
        else:
            n = va @ vb.T @ torch.linalg.inv(vb @ vb.T)
        b = transform_vo(b, shape, layer, g, n)
        num += float(torch.linalg.vector_norm(b[v][rows] - va)) ** 2
        den += float(torch.linalg.vector_norm(va)) ** 2
    return b, (num / den) ** 0.5 if den else 0.0


def _fit_qk(a: StateDict, b: StateDict, shape: GaugeShape, layer: int, orthogonal: bool) -> tuple[StateDict, float]:
    # Per KV head and RoPE pair, the least-squares 2x2 N K_B ~ K_A projected onto rotation-scalings
    # rho R(theta) (RoPE's commutant): orbit.transform_qk_all with r = 1/rho, phi = theta puts
    # (1/r) R(phi) = N on K's pair rows and r R(phi) = N^-T on Q's (rho = 1: rotations only).
    k = layer_key(layer, "k_proj")
    num = den = 0.0
    for g in range(shape.n_kv_heads):
        rho = torch.ones(shape.pairs, dtype=torch.float64)
        theta = torch.zeros(shape.pairs, dtype=torch.float64)
        for i in range(shape.pairs):
            rows = shape.head_rows(g, pair=i)
            ka, kb = a[k][rows], b[k][rows]
            n = ka @ kb.T @ torch.linalg.inv(kb @ kb.T)
            c, s = float(n[0, 0] + n[1, 1]) / 2, float(n[1, 0] - n[0, 1]) / 2
            rho[i], theta[i] = 1.0 if orthogonal else (c * c + s * s) ** 0.5, float(np.arctan2(s, c))
        b = transform_qk_all(b, shape, layer, g, 1.0 / rho, theta)
        rows = shape.head_rows(g)
        num += float(torch.linalg.vector_norm(b[k][rows] - a[k][rows])) ** 2
        den += float(torch.linalg.vector_norm(a[k][rows])) ** 2
    return b, (num / den) ** 0.5 if den else 0.0
