"""One canonical layer aligned to a canonical reference layer by orthogonal maps, across a residual rotation.

The default gauge fixing of a series (:mod:`geodrift.scanner.series_gauge`) brings every checkpoint's canonical
layer to the point nearest the reference's canonical layer. Both are balanced (every non-orthogonal gauge is
fixed), so what is left are orthogonal maps: the residual rotation ``R`` (from B's frame to A's: readers ``W R^T``,
writers ``R W``, fitted on the token rows by the caller), the head permutation, a rotation per key-value head on
V/O and per RoPE pair on Q/K, and a signed permutation of the hidden units. All but ``R`` act on the head or
hidden side and commute with it, so :func:`align_canonical_layer` fits them against B's rows turned into A's
frame only where a fit reads them (V's and K's rows: ``2 n_kv hd d^2`` work, against ``7 d_out d^2`` for the
whole layer) and applies them to B in its own frame; the caller rotates the singular vectors by ``R`` after the
decomposition. The cheap parts:

- **heads**: matched by what no gauge moves, power sums of the singular values of each query head's ``O_h V_g`` and
  ``Q_h^T K_g`` (:func:`head_features`, from ``head_dim``-sized Grams), ``linear_sum_assignment`` within and across
  groups;
- **V/O**: per key-value head the rotation nearest on V's rows (balanced factors: V's rows and O's columns carry
  the same Gram), on O's columns too where V's rows are rank-deficient;
- **Q/K**: per RoPE pair the rotation nearest on K's rows (on the group's Q rows where K's are zero);
- **hidden units**: by the cosines of their Gate rows near the diagonal (both layers are sorted by Gate norm),
  certified against the reference's :func:`~geodrift.gauge.align_layer.gate_peaks` with a slack for ``R``'s
  distance from the identity (B's Gate rows are turned into A's frame, and every pair scored, only where the
  certificate fails), each match signed by its Up and Down rows.

Every step is exact for an exactly reparametrised copy (its canonical form differs from the reference's by
orthogonal tie-breaks only) and continuous near the identity.
"""

from __future__ import annotations

import numpy as np
import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.align_layer import Layer, LayerAlignment, linear_sum_assignment, match_units
from geodrift.gauge.orbit import (
    GaugeShape,
    layer_key,
    permute_heads,
)

_RANK = 1e-6  # a head's cross matrix with a singular value below this share of its largest: V's rows do not fix it


def align_canonical_layer(ref: Layer, layer: Layer, shape: GaugeShape, index: int, rotation: torch.Tensor,
                          peaks: torch.Tensor, head_maps: str = "orthogonal", slack: float = float("inf"),
                          features: torch.Tensor | None = None) -> tuple[Layer, LayerAlignment]:
    """B's canonical layer (its own frame) aligned to the reference's canonical layer (A's frame) by orthogonal maps.

    Args:
        ref, layer: the two layers' seven canonical projections (float32).
        shape: the heads; index: the layer's index (named in notes).
        rotation: ``R`` from B's residual frame to A's (float32).
        peaks: :func:`geodrift.gauge.align_layer.gate_peaks` of the reference's Gate rows.
        head_maps: ``orthogonal`` (a rotation per key-value head and RoPE pair) or ``none``.
        slack: ``||R - I||`` or more (:func:`~geodrift.gauge.align_layer.match_units`; the default: unknown, so B's
            Gate rows are turned into A's frame).
        features: the reference's :func:`head_features` (None: computed here).

    Returns:
        ``(aligned layer in B's frame, what was recovered)``.

    Example:
        >>> from geodrift.gauge.canonical import canonical_layer
        >>> from geodrift.gauge.align_layer import gate_peaks
        >>> from geodrift.gauge.orbit import random_gauge, random_orthogonal, toy_state_dict
        >>> s = GaugeShape(1, 4, 2, 4)
        >>> sd = toy_state_dict(s, 8, 40, 30, torch.Generator().manual_seed(0))
        >>> names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
        >>> a = canonical_layer({n: sd[layer_key(0, n)] for n in names}, s)
        >>> moved = random_gauge(sd, s, torch.Generator().manual_seed(1), generators=("vo", "qk", "mlp_scale",
        ...                      "mlp_permute", "head_permute"))
        >>> b = canonical_layer({n: moved[layer_key(0, n)] for n in names}, s)
        >>> out, info = align_canonical_layer(a, b, s, 0, torch.eye(8), gate_peaks(a["gate_proj"]))
        >>> max(float((out[n] - a[n]).abs().max()) for n in names) < 1e-9, info.mutual_best_share
        (True, 1.0)
    """
    try:
        return _align_canonical_layer(ref, layer, shape, index, rotation, peaks, head_maps, slack, features)
    except GeodriftError as error:
        raise GeodriftError(f"--align: layer {index}: {error}") from None


def _align_canonical_layer(ref: Layer, layer: Layer, shape: GaugeShape, index: int, rotation: torch.Tensor,
                           peaks: torch.Tensor, head_maps: str, slack: float,
                           features: torch.Tensor | None) -> tuple[Layer, LayerAlignment]:
    r = rotation.to(layer["v_proj"].dtype)
    reference = head_features(ref, shape) if features is None else features
    kv_perm, q_perms, kept = _match_heads(reference, head_features(layer, shape), shape)
    b = permute_heads({layer_key(0, name): value for name, value in layer.items()}, shape, 0, kv_perm, q_perms)
    vo = qk = float("nan")
    notes: list[str] = []
    if head_maps != "none":
        b, vo = _rotate_vo(ref, b, shape, r, notes, index)
        b, qk = _rotate_qk(ref, b, shape, r)
    gate, up, down = (b[layer_key(0, n)] for n in ("gate_proj", "up_proj", "down_proj"))
    cols, signs, info = match_units((ref["gate_proj"], ref["up_proj"], ref["down_proj"].T),
                                    (gate, up, down.T), "gate", peaks, r, slack)
    out = {name: b[layer_key(0, name)] for name in layer}
    out["gate_proj"], out["up_proj"], out["down_proj"] = _signed_permutation(gate, up, down, cols, signs)
    return out, LayerAlignment(index, info[0], info[1], info[2], 0.0, kept, vo, qk,
                               float((signs < 0).double().mean()), notes)


def _signed_permutation(gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor, cols: np.ndarray,
                        signs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # orbit.permute_mlp then orbit.scale_mlp (the same values: a sign scales exactly), each matrix gathered once and
    # signed in place, neither step where it is the identity
    if not bool((cols == np.arange(cols.shape[0])).all()):
        pick = torch.from_numpy(cols)
        gate, up, down = gate.index_select(0, pick), up.index_select(0, pick), down.index_select(1, pick)
    elif bool((signs < 0).any()):
        up, down = up.clone(), down.clone()
    if bool((signs < 0).any()):
        s = signs.to(up.dtype)
        up, down = up.mul_(s.reshape(-1, 1)), down.div_(s.reshape(1, -1))
    return gate, up, down


def head_features(layer: Layer, shape: GaugeShape) -> torch.Tensor:
    """``(n_heads, 6)``: per query head what no gauge moves, the power sums ``(sum s^2, sum s^4, sum s^6)`` (each to
    the power ``1/k``, so all scale alike) of the singular values ``s`` of its ``O_h V_g`` and of its ``Q_h^T K_g``,
    from ``head_dim``-sized Grams: the ``s^2`` are the eigenvalues of ``(O_h^T O_h)(V_g V_g^T)``."""
    hd, d, group = shape.head_dim, layer["o_proj"].shape[0], shape.group
    o_heads = layer["o_proj"].reshape(d, shape.n_heads, hd).transpose(0, 1)
    q_heads = layer["q_proj"].reshape(shape.n_heads, hd, d)
    out = []
    for x_gram, y in ((o_heads.mT @ o_heads, layer["v_proj"]), (q_heads @ q_heads.mT, layer["k_proj"])):
        kv = y.reshape(shape.n_kv_heads, hd, d)
        product = (x_gram @ (kv @ kv.mT).repeat_interleave(group, 0)).double()  # (n_heads, hd, hd)
        square = product @ product
        sums = (product.diagonal(dim1=-2, dim2=-1).sum(-1), square.diagonal(dim1=-2, dim2=-1).sum(-1),
                (square * product.mT).sum((-2, -1)))
        out += [x.clamp_min(0).pow(1 / (2 * (i + 1))) for i, x in enumerate(sums)]
    return torch.stack(out, -1)


def _match_heads(fa: torch.Tensor, fb: torch.Tensor, shape: GaugeShape) -> tuple[torch.Tensor, torch.Tensor, float]:
    # Query heads matched within each pair of groups by the distance of their head_features, then the groups.
    group = shape.group
    cost = (torch.cdist(fa, fb) / fa.norm(dim=1, keepdim=True).clamp_min(1e-300)).numpy()
    within, group_cost = {}, np.zeros((shape.n_kv_heads, shape.n_kv_heads))
    for ga in range(shape.n_kv_heads):
        for gb in range(shape.n_kv_heads):
            block = cost[ga * group:(ga + 1) * group, gb * group:(gb + 1) * group]
            rows, cols = linear_sum_assignment(block)
            within[ga, gb], group_cost[ga, gb] = cols, block[rows, cols].sum()
    _, kv_cols = linear_sum_assignment(group_cost)
    q_perms = torch.tensor(np.stack([within[ga, int(gb)] for ga, gb in enumerate(kv_cols)]), dtype=torch.int64)
    kept = float(np.mean([int(gb) == ga and bool((within[ga, int(gb)] == np.arange(group)).all())
                          for ga, gb in enumerate(kv_cols)]))
    return torch.from_numpy(kv_cols.astype(np.int64)), q_perms, kept


def _rotate_vo(a: Layer, b: dict[str, torch.Tensor], shape: GaugeShape, r: torch.Tensor, notes: list[str],
               index: int) -> tuple[dict[str, torch.Tensor], float]:
    # Per KV head, the rotation N nearest on V's rows (B's turned into A's frame: V_B R^T), and on O's columns too
    # where V's rows leave it undetermined: N on V's rows and N^T (= N^-1) on the O columns of its query heads.
    v, o = layer_key(0, "v_proj"), layer_key(0, "o_proj")
    hd, n_kv, d = shape.head_dim, shape.n_kv_heads, b[v].shape[1]
    turned = (b[v] @ r.T).reshape(n_kv, hd, d)
    target = a["v_proj"].reshape(n_kv, hd, d)
    cross = (turned @ target.mT).double()  # (n_kv, hd, hd)
    u, s, wt = torch.linalg.svd(cross)
    deficient = [int(x) for x in torch.nonzero(s[:, -1] <= _RANK * s[:, 0].clamp_min(1e-300)).flatten()]
    for g in deficient:
        notes.append(f"layer {index} KV head {g}: V rows rank-deficient: its rotation fitted on O's columns too")
        cols = [shape.head_rows(q) for q in range(g * shape.group, (g + 1) * shape.group)]
        ob, oa = torch.cat([r @ b[o][:, c] for c in cols]), torch.cat([a["o_proj"][:, c] for c in cols])
        cross[g] += (ob.T @ oa).double()
    if deficient:
        u, _, wt = torch.linalg.svd(cross)
    n = (wt.mT @ u.mT).to(b[v].dtype)  # (n_kv, hd, hd): maximises tr(N cross)
    out = dict(b)
    out[v] = (n @ b[v].reshape(n_kv, hd, d)).reshape(n_kv * hd, d)
    o_heads = b[o].reshape(d, shape.n_heads, hd).transpose(0, 1)  # (n_heads, d, hd)
    out[o] = (o_heads @ n.mT.repeat_interleave(shape.group, 0)).transpose(0, 1).reshape(d, shape.n_heads * hd)
    num = float((n @ turned - target).double().pow(2).sum())
    den = float(target.double().pow(2).sum())
    return out, (num / den) ** 0.5 if den else 0.0


def _rotate_qk(a: Layer, b: dict[str, torch.Tensor], shape: GaugeShape, r: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], float]:
    # Per KV head and RoPE pair, the rotation R(theta) nearest on K's pair rows (B's turned into A's frame), on the
    # group's Q rows where K's are zero; applied to both (orbit.transform_qk_all with r = 1, every pair at once).
    k, q = layer_key(0, "k_proj"), layer_key(0, "q_proj")
    n_kv, half, d = shape.n_kv_heads, shape.pairs, b[k].shape[1]
    kb = (b[k] @ r.T).double().reshape(n_kv, 2, half, d)
    ka = a["k_proj"].double().reshape(n_kv, 2, half, d)
    first = (kb[:, 0] * ka[:, 0]).sum(-1) + (kb[:, 1] * ka[:, 1]).sum(-1)  # (n_kv, pairs): <B, A>
    second = (kb[:, 0] * ka[:, 1]).sum(-1) - (kb[:, 1] * ka[:, 0]).sum(-1)  # <J B, A>
    empty = (kb.pow(2).sum((1, 3)) == 0).any(1)
    for g in [int(x) for x in torch.nonzero(empty).flatten()]:  # K's pair rows zero: fit on the group's Q rows
        rows = torch.cat([shape.head_rows(h) for h in range(g * shape.group, (g + 1) * shape.group)])
        qb = (b[q][rows] @ r.T).double().reshape(shape.group, 2, half, d)
        qa = a["q_proj"][rows].double().reshape(shape.group, 2, half, d)
        first[g] = ((qb[:, 0] * qa[:, 0]).sum(-1) + (qb[:, 1] * qa[:, 1]).sum(-1)).sum(0)
        second[g] = ((qb[:, 0] * qa[:, 1]).sum(-1) - (qb[:, 1] * qa[:, 0]).sum(-1)).sum(0)
    theta = torch.atan2(second, first)  # (n_kv, pairs): R(theta) on every pair's rows, K's and its group's Q's
    # the fit's residual from B's turned K rows rotated in float64 (R(theta) commutes with the residual rotation)
    c64, s64 = theta.cos().reshape(n_kv, half, 1), theta.sin().reshape(n_kv, half, 1)
    num = float((c64 * kb[:, 0] - s64 * kb[:, 1] - ka[:, 0]).pow(2).sum()
                + (s64 * kb[:, 0] + c64 * kb[:, 1] - ka[:, 1]).pow(2).sum())
    den = float(ka.pow(2).sum())
    cos, sin = theta.cos().to(b[k].dtype), theta.sin().to(b[k].dtype)
    out = dict(b)
    for name, heads in ((k, n_kv), (q, shape.n_heads)):
        rows = b[name].reshape(n_kv, heads // n_kv, 2, half, d)
        c, s_ = cos.reshape(n_kv, 1, half, 1), sin.reshape(n_kv, 1, half, 1)
        out[name] = torch.stack([c * rows[:, :, 0] - s_ * rows[:, :, 1], s_ * rows[:, :, 0] + c * rows[:, :, 1]],
                                2).reshape(heads * shape.head_dim, d)
    return out, (num / den) ** 0.5 if den else 0.0


__all__ = ["align_canonical_layer", "head_features"]
