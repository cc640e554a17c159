"""The canonical point of one layer for every architecture family: the steps a row of the table lists.

:mod:`geodrift.gauge.canonical` canonicalises a Llama layer (its steps ``fold, basis, heads, vo, qk_rope,
mlp``). The other rows of :data:`geodrift.architectures.ARCHITECTURES` list more steps; this module runs
any list of them on one layer given as ``{role: weight}`` (folded: every gain already in the weights,
pre-norms into readers, post-norms into writers), in the original residual coordinates with the basis
``P`` for the signs (as :func:`geodrift.gauge.canonical.canonical_layer`), so that every generator of the
row leaves the result unchanged:

- ``heads``: KV heads by ``||[O_q V]||``, query heads within a group by ``||O_q V||`` (invariant keys);
- ``vo``: the balanced factorisation of ``O_q V`` per KV head (:func:`~geodrift.gauge.canonical.canonical_vo`);
- ``qk_rope``: per RoPE pair the balanced, Gram-diagonalising rotation-scaling
  (:func:`~geodrift.gauge.canonical.canonical_qk`);
- ``qk_head_norm``: every query head's Q rows and every KV head's K rows scaled to unit Frobenius norm (the
  per-head scale a q/k norm divides out), then each RoPE pair signed by a positive third moment (the sign per
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

import torch

from geodrift.gauge.canonical import canonical_mlp, canonical_qk, canonical_vo, head_order
from geodrift.gauge.orbit import GaugeShape

Layer = dict[str, torch.Tensor]
ATTENTION = ("attn_q", "attn_k", "attn_v", "attn_o")


def ones_projector(d: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``I - 1 1^T / d``: the projection off ``1``."""
    return torch.eye(d, dtype=dtype) - torch.ones(d, d, dtype=dtype) / d


def center_ones(layer: Layer) -> Layer:
    """Readers' columns and writers' rows projected off ``1`` (:mod:`geodrift.gauge.status`'s residual sides)."""
    from geodrift.gauge.status import residual_spaces

    out = dict(layer)
    for role, w in layer.items():
        spaces = residual_spaces(role)
        if "v" in spaces:
            out[role] = w - w.mean(1, keepdim=True)
        if "u" in spaces:
            out[role] = out[role] - out[role].mean(0, keepdim=True)
    return out


def order_heads(layer: Layer, shape: GaugeShape) -> Layer:
    """Heads in the canonical order (keys from V and O, invariant under every head gauge)."""
    kv_perm, q_perms = head_order(layer["attn_v"].to(torch.float64), layer["attn_o"].to(torch.float64), shape)
    hd, group = shape.head_dim, shape.group
    within = torch.arange(hd)
    q_heads = (kv_perm.reshape(-1, 1) * group + q_perms).reshape(-1)
    kv_rows = (kv_perm.reshape(-1, 1) * hd + within).reshape(-1)
    q_rows = (q_heads.reshape(-1, 1) * hd + within).reshape(-1)
    out = dict(layer)
    out["attn_q"] = layer["attn_q"].index_select(0, q_rows)
    out["attn_k"] = layer["attn_k"].index_select(0, kv_rows)
    out["attn_v"] = layer["attn_v"].index_select(0, kv_rows)
    out["attn_o"] = layer["attn_o"].index_select(1, q_rows)
    return out


def _head_norms(w: torch.Tensor, heads: int, hd: int) -> torch.Tensor:
    blocks = w.to(torch.float64).reshape(heads, hd * w.shape[1])
    return torch.linalg.vector_norm(blocks, dim=1).clamp_min(1e-300).repeat_interleave(hd).reshape(-1, 1)


def qk_head_norm(layer: Layer, shape: GaugeShape) -> Layer:
    """Every query head's Q rows and every KV head's K rows at unit Frobenius norm."""
    out = dict(layer)
    for role, heads in (("attn_q", shape.n_heads), ("attn_k", shape.n_kv_heads)):
        w = layer[role]
        out[role] = (w.to(torch.float64) / _head_norms(w, heads, shape.head_dim)).to(w.dtype)
    return out


def qk_pair_signs(layer: Layer, shape: GaugeShape, basis: torch.Tensor | None) -> Layer:
    """Each RoPE pair of each KV head signed (its Q rows in every query head of the group and its K rows together)
    so that the third moment of those rows' coordinates in ``P`` is positive (a q/k norm leaves a sign per pair)."""
    n_kv, group, half = shape.n_kv_heads, shape.group, shape.pairs
    q, k = layer["attn_q"], layer["attn_k"]
    d = q.shape[1]
    q_pairs = q.to(torch.float64).reshape(n_kv, group, 2, half, d)
    k_pairs = k.to(torch.float64).reshape(n_kv, 1, 2, half, d)
    rows = torch.cat([q_pairs, k_pairs], 1)  # (n_kv, group + 1, 2, half, d)
    coords = rows if basis is None else rows @ basis.to(torch.float64)
    third = coords.pow(3).sum((1, 2, 4))  # (n_kv, half)
    sign = torch.where(third < 0, -1.0, 1.0).to(torch.float64).reshape(n_kv, 1, 1, half, 1)
    return {**layer, "attn_q": (q_pairs * sign).reshape(q.shape).to(q.dtype),
            "attn_k": (k_pairs * sign).reshape(k.shape).to(k.dtype)}


def qk_joint_norm(layer: Layer) -> Layer:
    """Q and K each at unit Frobenius norm."""
    out = dict(layer)
    for role in ("attn_q", "attn_k"):
        w = layer[role]
        out[role] = (w.to(torch.float64) / torch.linalg.vector_norm(w.to(torch.float64)).clamp_min(1e-300)).to(w.dtype)
    return out


def qk_gl(layer: Layer, shape: GaugeShape, basis: torch.Tensor | None) -> Layer:
    """Per head the balanced factorisation of ``Q_h^T K_h`` (the V/O form with K as V and ``Q^T`` as O)."""
    per_head = GaugeShape(1, shape.n_heads, shape.n_heads, shape.head_dim)
    k, qt = canonical_vo(layer["attn_k"].to(torch.float64), layer["attn_q"].to(torch.float64).T, per_head, basis)
    return {**layer, "attn_q": qt.T.to(layer["attn_q"].dtype).contiguous(), "attn_k": k.to(layer["attn_k"].dtype)}


def mlp_order(layer: Layer) -> Layer:
    """A plain MLP's units sorted by ``||Up_j||`` (descending; permutations are its only gauge)."""
    order = torch.argsort(-torch.linalg.vector_norm(layer["mlp_up"].to(torch.float64), dim=1), stable=True)
    return {**layer, "mlp_up": layer["mlp_up"].index_select(0, order),
            "mlp_down": layer["mlp_down"].index_select(1, order)}


def _unit_roles(layer: Layer, prefix: str, suffix: str = "") -> tuple[str, str, str]:
    return f"{prefix}gate{suffix}", f"{prefix}up{suffix}", f"{prefix}down{suffix}"


def gated(layer: Layer, prefix: str = "mlp_", suffix: str = "") -> Layer:
    """One gated MLP (dense ``mlp_``, ``shared_``, or expert ``expert_`` with ``.E``) at its canonical point."""
    gate, up, down = _unit_roles(layer, prefix, suffix)
    g, u, d = canonical_mlp(layer[gate], layer[up], layer[down])
    return {**layer, gate: g, up: u, down: d}


def experts(layer: Layer) -> Layer:
    """Every expert as :func:`gated`, experts sorted by ``||Gate_e||_F`` with the router's rows, the router centred."""
    count = sum(1 for role in layer if role.startswith("expert_gate."))
    out = dict(layer)
    for e in range(count):
        out = gated(out, "expert_", f".{e}")
    keys = torch.stack([torch.linalg.vector_norm(out[f"expert_gate.{e}"].to(torch.float64)) for e in range(count)])
    order = torch.argsort(-keys, stable=True).tolist()
    moved = {f"{kind}.{new}": out[f"{kind}.{old}"] for new, old in enumerate(order)
             for kind in ("expert_gate", "expert_up", "expert_down")}
    router = out["router"]
    centred = router.to(torch.float64) - router.to(torch.float64).mean(0, keepdim=True)
    return {**out, **moved, "router": centred.to(router.dtype).index_select(0, torch.tensor(order))}


def family_layer(layer: Layer, shape: GaugeShape, steps: tuple[str, ...],
                 basis: torch.Tensor | None = None) -> Layer:
    """One layer (``{role: weight}``, folded) at the canonical point the steps define (module docstring).

    Args:
        layer: the layer's projections by role (``attn_q`` ... ``mlp_down``, ``router``, ``expert_up.3`` ...).
        shape: the heads.
        steps: the row's canonical steps (``fold``, ``fold_post`` and ``basis`` are the caller's: the folded
            weights and ``P``).
        basis: ``P`` when the layer is not yet in the canonical residual basis (the signs read coordinates in it).

    Returns:
        The same roles, canonical, in the weights' dtype (V/O and Q/K factorisations in float64).
    """
    out = center_ones(layer) if "center_ones" in steps else dict(layer)
    if "heads" in steps:
        out = order_heads(out, shape)
    if "vo" in steps:
        dtype = out["attn_v"].dtype
        v, o = canonical_vo(out["attn_v"].to(torch.float64), out["attn_o"].to(torch.float64), shape, basis)
        out["attn_v"], out["attn_o"] = v.to(dtype), o.to(dtype)
    if "qk_rope" in steps:
        dtype = out["attn_q"].dtype
        q, k = canonical_qk(out["attn_q"], out["attn_k"], shape, basis)
        out["attn_q"], out["attn_k"] = q.to(dtype), k.to(dtype)
    if "qk_head_norm" in steps:
        out = qk_pair_signs(qk_head_norm(out, shape), shape, basis)
    if "qk_joint_norm" in steps:
        out = qk_pair_signs(qk_joint_norm(out), shape, basis)
    if "qk_gl" in steps:
        out = qk_gl(out, shape, basis)
    if "mlp" in steps:
        out = gated(out)
    if "mlp_order" in steps:
        out = mlp_order(out)
    if "experts" in steps:
        out = experts(out)
    if "shared" in steps:
        out = gated(out, "shared_")
    return out


STEPS = frozenset({"fold", "fold_post", "basis", "center_ones", "heads", "vo", "qk_rope", "qk_head_norm",
                   "qk_joint_norm", "qk_gl", "mlp", "mlp_order", "experts", "shared"})
