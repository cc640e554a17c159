"""The canonical point of one layer for every architecture family: the steps a row of the table lists.

:mod:`geodrift.gauge.canonical` canonicalises a Llama layer (its steps ``fold, signs, heads, vo, qk_rope,
mlp``). The other rows of :data:`geodrift.architectures.ARCHITECTURES` list more steps; this module runs
any list of them on one layer given as ``{role: weight}`` (folded: every gain already in the weights,
pre-norms into readers, post-norms into writers), in the original residual coordinates with the token
embedding's mean for the signs (as :func:`geodrift.gauge.canonical.canonical_layer`), so that every generator of
the row leaves the result unchanged:

- ``heads``: KV heads by ``||[O_q V]||``, query heads within a group by ``||O_q V||`` (invariant keys);
- ``vo``: the balanced factorisation of ``O_q V`` per KV head (:func:`~geodrift.gauge.canonical.canonical_vo`);
- ``qk_rope``: per RoPE pair the balanced, Gram-diagonalising rotation-scaling
  (:func:`~geodrift.gauge.canonical.canonical_qk`);
- ``qk_head_norm``: every query head's Q rows and every KV head's K rows scaled to unit Frobenius norm (the
  per-head scale a q/k norm divides out), then each RoPE pair signed against the embedding's mean (the sign per
  pair a q/k norm leaves);
- ``qk_joint_norm``: Q and K each scaled to unit Frobenius norm (a q/k norm over all heads), pairs signed alike;
- ``qk_gl``: without RoPE, the balanced factorisation of ``Q_h^T K_h`` per head (``GL(d_head)`` as ``A``,
  ``A^-T``), signed like V/O;
- ``center_ones``: LayerNorm: every reader's columns and every writer's rows projected off ``1`` (LayerNorm's
  output never has a ``1`` component; a write along ``1`` is never read);
- ``mlp``: a gated MLP's units signed, balanced and sorted (:func:`~geodrift.gauge.canonical.canonical_mlp`);
  ``mlp_order``: a plain MLP's units (permutations only) sorted by ``||Up_j||``;
- ``experts``: each expert's units as ``mlp``, the experts sorted by ``||Gate_e||_F`` with the router's rows,
  the router centred (the mean row removed: a shift of every row is exact); ``shared``: the shared expert as ``mlp``.

Example:
    >>> g = torch.Generator().manual_seed(0)
    >>> layer = {r: torch.randn(*s, generator=g, dtype=torch.float64) for r, s in (("attn_q", (8, 6)),
    ...          ("attn_k", (4, 6)), ("attn_v", (4, 6)), ("attn_o", (6, 8)))}
    >>> out = family_layer(layer, GaugeShape(1, 2, 1, 4), ("heads", "vo", "qk_head_norm"))
    >>> round(float(out["attn_q"][:4].norm()), 6), round(float(out["attn_k"].norm()), 6)
    (1.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from geodrift.gauge.canonical import (  # the MLP's steps as canonical_mlp takes them, replaced matrix by matrix
    _balanced_vo,
    _head_grams,
    _head_rows,
    _order_from_grams,
    canonical_qk,
    canonical_vo,
    column_norms,
    head_order,
    mlp_maps,
    sign_scores,
    unit_keys,
)
from geodrift.gauge.orbit import GaugeShape

Layer = dict[str, torch.Tensor]
GATED_MLP = "mlp"  # the step that canonicalises a gated MLP's units (a step's name, not a simulator's)
ATTENTION = ("attn_q", "attn_k", "attn_v", "attn_o")


def ones_projector(d: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``I - 1 1^T / d``: the projection off ``1``."""
    return torch.eye(d, dtype=dtype) - torch.ones(d, d, dtype=dtype) / d


def center_ones(layer: Layer) -> Layer:
    """Readers' columns and writers' rows projected off ``1`` (:mod:`geodrift.gauge.status`'s residual sides)."""
    from geodrift.gauge.status import residual_spaces

    for role in list(layer):
        spaces = residual_spaces(role)
        if "v" in spaces:
            layer[role] = layer[role] - layer[role].mean(1, keepdim=True)
        if "u" in spaces:
            layer[role] = layer[role] - layer[role].mean(0, keepdim=True)
    return layer


def order_heads(layer: Layer, shape: GaugeShape) -> Layer:
    """Heads in the canonical order (keys from V and O, invariant under every head gauge)."""
    kv_perm, q_perms = head_order(layer["attn_v"].to(torch.float64), layer["attn_o"].to(torch.float64), shape)
    hd, group = shape.head_dim, shape.group
    within = torch.arange(hd)
    q_heads = (kv_perm.reshape(-1, 1) * group + q_perms).reshape(-1)
    kv_rows = (kv_perm.reshape(-1, 1) * hd + within).reshape(-1)
    q_rows = (q_heads.reshape(-1, 1) * hd + within).reshape(-1)
    layer["attn_q"] = layer["attn_q"].index_select(0, q_rows)
    layer["attn_k"] = layer["attn_k"].index_select(0, kv_rows)
    layer["attn_v"] = layer["attn_v"].index_select(0, kv_rows)
    layer["attn_o"] = layer["attn_o"].index_select(1, q_rows)
    return layer


def ordered_vo(layer: Layer, shape: GaugeShape, sign_reference: torch.Tensor | None) -> Layer:
    """:func:`order_heads` then V/O's balanced factorisation, from one computation of the heads' Grams (as
    :func:`~geodrift.gauge.canonical.canonical_layer` does)."""
    dtype = layer["attn_v"].dtype
    o_gram, v_gram = _head_grams(layer["attn_v"], layer["attn_o"], shape)  # float64
    kv_perm, q_perms = _order_from_grams(o_gram, v_gram, shape)
    kv_rows, q_rows = _head_rows(kv_perm, q_perms, shape)
    q_heads = (kv_perm.reshape(-1, 1) * shape.group + q_perms).reshape(-1)
    v, o = _balanced_vo(layer.pop("attn_v").index_select(0, kv_rows), layer.pop("attn_o").index_select(1, q_rows),
                        o_gram.index_select(0, q_heads), v_gram.index_select(0, kv_perm), shape, sign_reference)
    layer["attn_v"], layer["attn_o"] = v.to(dtype), o.to(dtype)
    layer["attn_q"] = layer["attn_q"].index_select(0, q_rows)
    layer["attn_k"] = layer["attn_k"].index_select(0, kv_rows)
    return layer


def _head_norms(w: torch.Tensor, heads: int, hd: int) -> torch.Tensor:
    blocks = w.to(torch.float64).reshape(heads, hd * w.shape[1])
    return torch.linalg.vector_norm(blocks, dim=1).clamp_min(1e-300).repeat_interleave(hd).reshape(-1, 1)


def qk_head_norm(layer: Layer, shape: GaugeShape) -> Layer:
    """Every query head's Q rows and every KV head's K rows at unit Frobenius norm."""
    for role, heads in (("attn_q", shape.n_heads), ("attn_k", shape.n_kv_heads)):
        w = layer[role]
        layer[role] = (w.to(torch.float64) / _head_norms(w, heads, shape.head_dim)).to(w.dtype)
    return layer


def qk_pair_signs(layer: Layer, shape: GaugeShape, sign_reference: torch.Tensor | None) -> Layer:
    """Each RoPE pair of each KV head signed (its Q rows in every query head of the group and its K rows together)
    so that the sum of those rows' scores is positive (:func:`~geodrift.gauge.canonical.sign_scores`: against the
    token embedding's mean, or their coordinates' third moment without one): a q/k norm leaves a sign per pair."""
    n_kv, group, half = shape.n_kv_heads, shape.group, shape.pairs
    q, k = layer["attn_q"], layer["attn_k"]
    d = q.shape[1]
    q_pairs = q.to(torch.float64).reshape(n_kv, group, 2, half, d)
    k_pairs = k.to(torch.float64).reshape(n_kv, 1, 2, half, d)
    rows = torch.cat([q_pairs, k_pairs], 1)  # (n_kv, group + 1, 2, half, d)
    score = sign_scores(rows.reshape(-1, d), sign_reference).reshape(n_kv, group + 1, 2, half).sum((1, 2))
    sign = torch.where(score < 0, -1.0, 1.0).to(torch.float64).reshape(n_kv, 1, 1, half, 1)
    layer["attn_q"], layer["attn_k"] = (q_pairs * sign).reshape(q.shape).to(q.dtype), \
        (k_pairs * sign).reshape(k.shape).to(k.dtype)
    return layer


def qk_joint_norm(layer: Layer) -> Layer:
    """Q and K each at unit Frobenius norm."""
    for role in ("attn_q", "attn_k"):
        w = layer[role]
        layer[role] = (w.to(torch.float64) / torch.linalg.vector_norm(w.to(torch.float64)).clamp_min(1e-300)).to(w.dtype)
    return layer


def qk_gl(layer: Layer, shape: GaugeShape, sign_reference: torch.Tensor | None) -> Layer:
    """Per head the balanced factorisation of ``Q_h^T K_h`` (the V/O form with K as V and ``Q^T`` as O)."""
    per_head = GaugeShape(1, shape.n_heads, shape.n_heads, shape.head_dim)
    k, qt = canonical_vo(layer["attn_k"].to(torch.float64), layer["attn_q"].to(torch.float64).T, per_head,
                         sign_reference)
    layer["attn_q"], layer["attn_k"] = qt.T.to(layer["attn_q"].dtype).contiguous(), k.to(layer["attn_k"].dtype)
    return layer


def mlp_order(layer: Layer) -> Layer:
    """A plain MLP's units sorted by ``||Up_j||`` (descending; permutations are its only gauge)."""
    order = torch.argsort(-torch.linalg.vector_norm(layer["mlp_up"].to(torch.float64), dim=1), stable=True)
    layer["mlp_up"] = layer["mlp_up"].index_select(0, order)
    layer["mlp_down"] = layer["mlp_down"].index_select(1, order)
    return layer


def _unit_roles(layer: Layer, prefix: str, suffix: str = "") -> tuple[str, str, str]:
    return f"{prefix}gate{suffix}", f"{prefix}up{suffix}", f"{prefix}down{suffix}"


def gated(layer: Layer, prefix: str = "mlp_", suffix: str = "") -> Layer:
    """One gated MLP (dense ``mlp_``, ``shared_``, or expert ``expert_`` with ``.E``) at its canonical point: the
    maps of :func:`~geodrift.gauge.canonical.canonical_mlp` (the same signs, balanced scales and order), each
    matrix replaced in ``layer`` as soon as it is done (one new matrix at a time, not three: an 8B layer's MLP
    is 0.7 GB in float32)."""
    gate, up, down = _unit_roles(layer, prefix, suffix)
    order, kept = mlp_maps(unit_keys(layer[gate], layer[up]), column_norms(layer[down]))
    # the dict holds the only references: each old matrix is freed as its new one replaces it
    layer[gate] = layer[gate].index_select(0, order)
    layer[up] = layer[up].index_select(0, order).mul_(kept.reshape(-1, 1))
    layer[down] = layer[down].index_select(1, order).div_(kept.reshape(1, -1))
    return layer


def gated_maps(load_gate: Callable[[], torch.Tensor], load_up: Callable[[], torch.Tensor],
               load_down: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gated`'s maps from matrices loaded one or two at a time: ``(order, factor)``, the canonical unit order
    and each canonical unit's Up factor (its Down column is divided by it); see :func:`apply_gated`."""
    down_norm = column_norms(load_down())  # Down first and freed: a caller may keep the Gate and Up it loads
    return mlp_maps(unit_keys(load_gate(), load_up()), down_norm)


def apply_gated(kind: str, weight: torch.Tensor, maps: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """One matrix of a gated MLP (``gate``, ``up`` or ``down``) at its canonical point, from :func:`gated_maps`."""
    order, kept = maps
    if kind == "gate":
        return weight.index_select(0, order)
    if kind == "up":
        return weight.index_select(0, order).mul_(kept.reshape(-1, 1).to(weight.dtype))
    return weight.index_select(1, order).div_(kept.reshape(1, -1).to(weight.dtype))


def experts(layer: Layer) -> Layer:
    """Every expert as :func:`gated`, experts sorted by ``||Gate_e||_F`` with the router's rows, the router centred."""
    count = sum(1 for role in layer if role.startswith("expert_gate."))
    for e in range(count):
        gated(layer, "expert_", f".{e}")
    keys = torch.stack([torch.linalg.vector_norm(layer[f"expert_gate.{e}"].to(torch.float64)) for e in range(count)])
    order = torch.argsort(-keys, stable=True).tolist()
    moved = {f"{kind}.{new}": layer[f"{kind}.{old}"] for new, old in enumerate(order)
             for kind in ("expert_gate", "expert_up", "expert_down")}
    router = layer["router"].to(torch.float64)
    layer.update(moved)
    layer["router"] = (router - router.mean(0, keepdim=True)).to(layer["router"].dtype).index_select(
        0, torch.tensor(order))
    return layer


def family_layer(layer: Layer, shape: GaugeShape, steps: tuple[str, ...],
                 sign_reference: torch.Tensor | None = None) -> Layer:
    """One layer (``{role: weight}``, folded) at the canonical point the steps define (module docstring).

    Args:
        layer: the layer's projections by role (``attn_q`` ... ``mlp_down``, ``router``, ``expert_up.3`` ...).
        shape: the heads.
        steps: the row's canonical steps (``fold`` and ``fold_post`` are the caller's: the folded weights).
        sign_reference: the token embedding's mean in the layer's residual basis: the factors' rows are signed
            against it (rotation-equivariant); None signs them by third moments of their coordinates.

    Returns:
        ``layer`` itself, each role's matrix replaced by its canonical one (in the weights' dtype; V/O and Q/K
        factorisations in float64): an old matrix is freed as soon as it is replaced, if nothing else holds it.
    """
    out = center_ones(layer) if "center_ones" in steps else layer
    if "heads" in steps and "vo" in steps:
        out = ordered_vo(out, shape, sign_reference)
    elif "heads" in steps:
        out = order_heads(out, shape)
    elif "vo" in steps:
        dtype = out["attn_v"].dtype
        v, o = canonical_vo(out["attn_v"].to(torch.float64), out["attn_o"].to(torch.float64), shape, sign_reference)
        out["attn_v"], out["attn_o"] = v.to(dtype), o.to(dtype)
    if "qk_rope" in steps:
        dtype = out["attn_q"].dtype
        q, k = canonical_qk(out["attn_q"], out["attn_k"], shape, sign_reference)
        out["attn_q"], out["attn_k"] = q.to(dtype), k.to(dtype)
    if "qk_head_norm" in steps:
        out = qk_pair_signs(qk_head_norm(out, shape), shape, sign_reference)
    if "qk_joint_norm" in steps:
        out = qk_pair_signs(qk_joint_norm(out), shape, sign_reference)
    if "qk_gl" in steps:
        out = qk_gl(out, shape, sign_reference)
    if GATED_MLP in steps:
        out = gated(out)
    if "mlp_order" in steps:
        out = mlp_order(out)
    if "experts" in steps:
        out = experts(out)
    if "shared" in steps:
        out = gated(out, "shared_")
    return out


# The groups of a layer's projections that the steps tie together (each canonicalised on its own: the scan holds
# one group at a time), and the steps that act on each.
GROUPS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "attention": (("attn_q", "attn_k", "attn_v", "attn_o"),
                  frozenset({"center_ones", "heads", "vo", "qk_rope", "qk_head_norm", "qk_joint_norm", "qk_gl"})),
    "mlp": (("mlp_gate", "mlp_up", "mlp_down"), frozenset({"center_ones", "mlp", "mlp_order"})),
    "shared": (("shared_gate", "shared_up", "shared_down"), frozenset({"center_ones", "shared"})),
    "experts": (("router", "expert_gate", "expert_up", "expert_down"), frozenset({"center_ones", "experts"})),
}


def group_of(role: str) -> str:
    """The group (:data:`GROUPS`) a role belongs to (``expert_up.3`` to ``experts``)."""
    base = role.split(".", 1)[0]
    return next(name for name, (roles, _) in GROUPS.items() if base in roles)


STEPS = frozenset({"fold", "fold_post", "signs", "center_ones", "heads", "vo", "qk_rope", "qk_head_norm",
                   "qk_joint_norm", "qk_gl", "mlp", "mlp_order", "experts", "shared"})
