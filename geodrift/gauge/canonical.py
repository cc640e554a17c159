"""The canonical point of a Llama layer's gauge orbit: one representative that every exact gauge maps to itself.

The orbit is the one :mod:`geodrift.gauge.orbit` generates (after the gains are folded): a residual
rotation, per KV head ``GL(head_dim)`` on V/O, per KV head and RoPE pair a rotation-scaling on Q/K,
per hidden unit a nonzero scale on Up/Down, hidden-unit and head permutations. The convention
(docs/verdicts.md says why):

- **residual basis**: none per layer. Every map below commutes with a residual rotation, so a layer is
  canonicalised in whatever residual basis it comes in, and every number a scan reads off the residual side
  (``|cos|`` of adjacent layers, and the rotation null of ``geodrift.continuity``) is basis-free: the scan
  needs no residual basis at all. :func:`canonicalise` (a whole state dict, for tests and the library) also
  fixes one: the eigenbasis of the token embedding's Gram (:func:`geodrift.gauge.basis.residual_basis`).
- **signs** (the orthogonal tie-breaks of the V/O and Q/K factorisations): a row is signed so that its inner
  product with the **token embedding's mean** ``e`` is positive (``sign_reference``; rotation-equivariant: a
  residual rotation moves the rows and ``e`` together); without a reference, so that the row's coordinates
  have a positive third moment.
- **MLP**, per hidden unit ``j``: the sign that makes ``<Gate_j, Up_j>`` positive (Up enters
  linearly, so ``-1`` is a gauge too), then the **balanced** split ``||Up_j|| = ||Down_j||`` (the
  minimum-norm point of the scaling orbit), then units sorted by ``||Gate_j||`` (descending; ties by
  the balanced norm).
- **V/O**, per KV head: the balanced factorisation of the stacked ``[O_q V]`` of its query heads
  (SVD ``U S W^T``: ``V = S^1/2 W^T``, ``O_stack = U S^1/2``), each singular pair signed so that V's
  row is signed as above.
- **Q/K**, per KV head and RoPE pair: the balanced scale (the group's Q pair rows and K's pair
  rows of equal Frobenius norm), then the rotation that diagonalises their summed 2x2 Gram (the
  larger eigenvalue first), the remaining ``R(pi)`` fixed by the sign of the first rows' summed score.
- **heads**: KV heads sorted by ``||[O_q V]||_F`` (descending), query heads within a group by
  ``||O_q V||_F``.

Precision: the V/O factorisations in float64 (from the heads' Grams, accumulated in float64, by Cholesky, with the
explicit QR for a nearly singular head) and their per-head maps applied in the weights' dtype, the Q/K pair Grams accumulated and diagonalised in float64 and their orthogonal 2x2
maps applied in the weights' dtype, the MLP's signs, scales and order in the weights' dtype; a float64 state
dict stays float64 throughout. Every KV head, pair and hidden unit is processed at once (batched).

Example:
    >>> from geodrift.gauge.orbit import GaugeShape, random_gauge, toy_state_dict
    >>> shape = GaugeShape(2, 4, 2, 4)
    >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=40, generator=torch.Generator().manual_seed(0))
    >>> moved = random_gauge(sd, shape, torch.Generator().manual_seed(1), condition=30.0, sigma=1.0)
    >>> a, b = canonicalise(sd, shape), canonicalise(moved, shape)
    >>> max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-9
    True
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from geodrift.gauge.basis import (
    WRITERS,
    residual_basis,
    rotate_residual,
    rotate_triplets,
    to_basis,
)
from geodrift.gauge.orbit import (
    EMBED,
    LM_HEAD,
    GaugeShape,
    StateDict,
    fold_gains,
    layer_key,
)

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_TINY = 1e-300
_NORM_BLOCK = 1 << 18  # entries of a matrix converted to float64 at a time by _norms_in_float64 (2 MiB)
_COLUMN_BLOCK = 512  # columns whose squares column_norms sums at a time
_NEAR_TIE = 4e-6  # relative gap of float32 row norms (their error: <= 2.4e-7, SmolLM2 and 4096-wide rows) below which
# the hidden units' order is decided in float64


def canonical_mlp(gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Signed, balanced and sorted ``(gate, up, down)`` (see the module docstring).

    Args:
        gate, up: ``(d_ff, d)``; down: ``(d, d_ff)`` (``nn.Linear`` layout, any float dtype).

    Returns:
        ``(gate, up, down)`` canonical, in the same dtype (new tensors; the inputs are not modified).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> gate, up, down = (torch.randn(3, 5, generator=g, dtype=torch.float64) for _ in range(3))
        >>> _, up_c, down_c = canonical_mlp(gate, up, down.T)
        >>> bool(torch.allclose(up_c.norm(dim=1), down_c.norm(dim=0)))
        True
    """
    order, kept = mlp_maps(unit_keys(gate, up), column_norms(down))
    # gather first, then scale in place: one new tensor per matrix (the products round as scale-then-gather)
    return (gate.index_select(0, order), up.index_select(0, order).mul_(kept.reshape(-1, 1)),
            down.index_select(1, order).div_(kept.reshape(1, -1)))


def unit_keys(gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A gated MLP's per-unit keys from Gate and Up: ``(sign, up_norm, order_key)`` (the sign making
    ``<Gate_j, Up_j>`` positive, ``||Up_j||``, and ``||Gate_j||`` ranked as in float64); :func:`mlp_maps` takes them."""
    # a sign changes no norm; in float64 where the squares overflow the dtype (weights near float32's limit)
    return (_finite(_positive_product, gate, up).to(up.dtype), _finite(lambda u: u.norm(dim=1), up),
            _row_norms_for_order(gate))


def column_norms(down: torch.Tensor) -> torch.Tensor:
    """Each column's norm of ``down`` (``(d, d_ff)``, in its dtype; in float64 where the squares overflow it).

    The squares are summed :data:`_COLUMN_BLOCK` columns at a time: the same reduction down each column as one
    ``vecdot`` over the whole matrix (bitwise, where the width is a multiple of the block: SmolLM2's, an 8B's),
    without its full-size temporary of squares (on an 8B Down, 0.06 s instead of 0.16-0.35 s of fresh pages).
    """
    def squares(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.linalg.vecdot(block, block, dim=0) for block in x.split(_COLUMN_BLOCK, dim=1)])

    return _finite(squares, down).sqrt()


def mlp_maps(keys: tuple[torch.Tensor, torch.Tensor, torch.Tensor], down_norm: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(order, kept)``: the canonical unit order and each canonical unit's Up factor (sign x balanced scale; its
    Down column is divided by it), from :func:`unit_keys` and :func:`column_norms`."""
    sign, up_norm, key = keys
    scale = torch.where((up_norm > _TINY) & (down_norm > _TINY), (down_norm / up_norm.clamp_min(_TINY)).sqrt(), 1.0)
    factor = sign * scale.to(sign.dtype)  # exact: the sign is +-1, so x * factor and x / factor round as x * sign * scale does
    # the balanced norm sqrt(|Up_j| |Down_j|) breaks what ties the (float64-exact) Gate norm leaves, then the index
    order = _descending(key, up_norm * scale)
    return order, factor.index_select(0, order)


def _row_norms_for_order(rows: torch.Tensor) -> torch.Tensor:
    # Row norms (float64) whose descending order is that of norms accumulated in float64. A float32 norm's own
    # rounding (~1e-7) is what swapped near-tied hidden units of two gauge-equivalent copies (their exact norms differ
    # only by the weights' float32 rounding, ~5e-9); a float64 norm of every row costs a float64 copy of the matrix,
    # so only the rows within _NEAR_TIE of a neighbour's float32 norm are recomputed in float64: the others' order is
    # decided by gaps far above any float32 error, and is unchanged.
    norms = _finite(lambda r: r.norm(dim=1), rows)
    if norms.dtype == torch.float64 or rows.shape[0] < 2:
        return norms.to(torch.float64)
    ranked = torch.sort(norms, descending=True)
    near = (ranked.values[:-1] - ranked.values[1:]) <= _NEAR_TIE * ranked.values[:-1]
    involved = torch.zeros(rows.shape[0], dtype=torch.bool)
    involved[:-1] |= near
    involved[1:] |= near
    out = norms.to(torch.float64)
    if bool(involved.any()):
        which = ranked.indices[involved]
        if 4 * which.numel() > rows.shape[0]:  # most rows near a tie (an 8B MLP's): every row's, without a gathered copy
            return _norms_in_float64(rows)
        out[which] = torch.linalg.vector_norm(rows.index_select(0, which), dim=1, dtype=torch.float64)
    return out


def _norms_in_float64(rows: torch.Tensor) -> torch.Tensor:
    # each row's norm accumulated in float64, a block of rows converted at a time (bitwise the norms of one call on
    # the whole matrix, without its float64 copy: 235k fresh pages and 0.23 s of a 0.33 s call on an 8B Gate)
    step = max(1, _NORM_BLOCK // max(rows.shape[1], 1))
    return torch.cat([torch.linalg.vector_norm(block, dim=1, dtype=torch.float64) for block in rows.split(step)])


def _finite(reduce: Callable[..., torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
    # reduce(*xs), again in float64 where squares or products overflow the dtype (weights near float32's limit)
    out = reduce(*xs)
    return out if bool(torch.isfinite(out).all()) else reduce(*(x.to(torch.float64) for x in xs))


def _positive_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # the sign of each row pair's dot product, a block of rows at a time (bitwise one call's dots, without its
    # full-size temporary product)
    step = max(1, _NORM_BLOCK // max(a.shape[1], 1))
    dots = torch.cat([torch.linalg.vecdot(x, y) for x, y in zip(a.split(step), b.split(step), strict=True)])
    return torch.where(dots < 0, -1.0, 1.0).to(a.dtype)


def _descending(key: torch.Tensor, tie: torch.Tensor) -> torch.Tensor:
    # lexicographic: key descending, then tie descending (a stable sort on the secondary key first)
    first = torch.argsort(-tie, stable=True)
    return first[torch.argsort(-key[first], stable=True)]


def canonical_vo(v: torch.Tensor, o: torch.Tensor, shape: GaugeShape,
                 sign_reference: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per KV head, the balanced factorisation of the stacked ``[O_q V_h]`` (float64 ``v``, ``o``).

    Args:
        v: ``(n_kv_heads * head_dim, d)``; o: ``(d, n_heads * head_dim)``; shape: the heads.
        sign_reference: the token embedding's mean in ``v``'s basis (None: signs by third moments).

    Returns:
        ``(v, o)`` canonical, the products ``O_q V_h`` unchanged.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> shape = GaugeShape(1, 4, 2, 4)
        >>> v, o = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((8, 6), (6, 16)))
        >>> v_c, o_c = canonical_vo(v, o, shape)
        >>> bool(torch.allclose(o_c[:, :4] @ v_c[:4], o[:, :4] @ v[:4]))
        True
    """
    return _balanced_vo(v, o, *_head_grams(v, o, shape), shape, sign_reference)


def _head_grams(v: torch.Tensor, o: torch.Tensor, shape: GaugeShape) -> tuple[torch.Tensor, torch.Tensor]:
    # (O_q^T O_q per query head: (n_heads, hd, hd), V_h V_h^T per KV head: (n_kv, hd, hd)), accumulated in float64
    # whatever the weights' dtype (a float32 product is exact in float64); O converted a few heads at a time, so no
    # float64 copy of the whole matrix is resident
    d, hd, wide = o.shape[0], shape.head_dim, torch.float64
    o_heads = o.reshape(d, shape.n_heads, hd)
    step = max(1, shape.n_heads // 4)
    o_gram = torch.cat([_gram_of_heads(o_heads[:, start:start + step].to(wide)) for start in range(0, shape.n_heads, step)])
    v_heads = v.to(wide).reshape(shape.n_kv_heads, hd, d)
    return o_gram, v_heads @ v_heads.mT


def _gram_of_heads(o_heads: torch.Tensor) -> torch.Tensor:
    # (d, heads, hd) -> (heads, hd, hd): each head's O_q^T O_q
    heads = o_heads.permute(1, 2, 0)  # (heads, hd, d)
    return heads @ heads.mT


def _balanced_vo(v: torch.Tensor, o: torch.Tensor, o_gram: torch.Tensor, v_gram: torch.Tensor, shape: GaugeShape,
                 sign_reference: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    # canonical_vo from the head Grams (float64): every KV head at once. The stacked O_stack = Q_O R_O and
    # V^T = Q_V R_V need only their triangular factors, the Cholesky factors of the Grams (R^T R = O_stack^T O_stack);
    # then svd(R_O R_V^T) = A S B^T gives V = S^1/2 (R_V^-1 B)^T V and each O_q -> O_q R_O^-1 A S^1/2: one hd x hd map
    # per KV head (float64), never the stacked matrix, applied in the weights' dtype (a float32 checkpoint's rows then
    # carry the float32 rounding its stored weights already carry); the signs from float64 scores. A (nearly)
    # singular factor (a pruned head) takes the explicit QR, in float64.
    d, hd, group, n_kv, wide = o.shape[0], shape.head_dim, shape.group, shape.n_kv_heads, torch.float64
    l_o, bad_o = torch.linalg.cholesky_ex(o_gram.reshape(n_kv, group, hd, hd).sum(1))
    l_v, bad_v = torch.linalg.cholesky_ex(v_gram)
    if bool((bad_o == 0).all() and (bad_v == 0).all()) and _well_conditioned(l_o) and _well_conditioned(l_v):
        r_o, r_v = l_o.mT, l_v.mT
        a, s, bt = torch.linalg.svd(r_o @ r_v.mT)
        root = s.sqrt()
        v_map = root.unsqueeze(-1) * torch.linalg.solve_triangular(r_v, bt.mT, upper=True).mT  # (n_kv, hd, hd)
        o_map = torch.linalg.solve_triangular(r_o, a, upper=True) * root.unsqueeze(1)
        # each new V row's score <row, e> = v_map (V_h e), in float64
        if sign_reference is None:
            sign = row_signs((v_map @ v.to(wide).reshape(n_kv, hd, d)).reshape(n_kv * hd, d), None)
        else:
            heads_e = (v.to(wide) @ sign_reference.to(wide)).reshape(n_kv, hd, 1)
            sign = torch.where((v_map @ heads_e).reshape(-1) < 0, -1.0, 1.0).to(wide)
        v_map = v_map * sign.reshape(n_kv, hd, 1)
        o_map = o_map * sign.reshape(n_kv, 1, hd)
        v_new = (v_map.to(v.dtype) @ v.reshape(n_kv, hd, d)).reshape(n_kv * hd, d)
        o_heads = o.reshape(d, shape.n_heads, hd).transpose(0, 1)  # (n_heads, d, hd), a strided view
        o_new = o_heads @ o_map.to(o.dtype).repeat_interleave(group, 0)
        return v_new, o_new.transpose(0, 1).reshape(d, shape.n_heads * hd)
    v, o = v.to(wide), o.to(wide)
    v_heads = v.reshape(n_kv, hd, d)
    o_stack = o.reshape(d, n_kv, group, hd).permute(1, 2, 0, 3).reshape(n_kv, group * d, hd)
    qo, r_o = torch.linalg.qr(o_stack)
    qv, r_v = torch.linalg.qr(v_heads.mT)  # (n_kv, d, hd), (n_kv, hd, hd)
    a, s, bt = torch.linalg.svd(r_o @ r_v.mT)
    root = s.sqrt()
    v_new = (root.unsqueeze(-1) * (bt @ qv.mT)).reshape(n_kv * hd, d)
    sign = row_signs(v_new, sign_reference).reshape(n_kv, 1, 1, hd)
    o_new = ((qo @ a) * root.unsqueeze(1)).reshape(n_kv, group, d, hd) * sign
    return v_new * sign.reshape(-1, 1), o_new.permute(2, 0, 1, 3).reshape(d, n_kv * group * hd)


def _well_conditioned(triangular: torch.Tensor) -> bool:
    # every triangular factor's diagonal spans less than 1e4 (a Cholesky factor of a float64 Gram: its error grows
    # with the square of that span, so ~1e-8 relative at the bound)
    diagonal = triangular.diagonal(dim1=-2, dim2=-1).abs()
    return bool((diagonal.amin(-1) > 1e-4 * diagonal.amax(-1)).all())


def canonical_qk(q: torch.Tensor, k: torch.Tensor, shape: GaugeShape,
                 sign_reference: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per KV head and RoPE pair: balanced scale, Gram-diagonalising rotation, sign.

    Every KV head and pair at once: the pairs' 2x2 Grams accumulated and diagonalised in float64 (one
    batched ``eigh``), the orthogonal 2x2 maps and scales then applied in ``q``'s dtype (they amplify no
    rounding: a float32 checkpoint's rows stay within an ulp or two of the float64 result).

    Args:
        q: ``(n_heads * head_dim, d)``; k: ``(n_kv_heads * head_dim, d)`` (HF half-split pairs).
        sign_reference: the token embedding's mean in ``q``'s basis (None: signs by third moments).

    Returns:
        ``(q, k)`` canonical (new tensors); every RoPE score is unchanged.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> shape = GaugeShape(1, 2, 1, 4)
        >>> q, k = torch.randn(8, 6, generator=g, dtype=torch.float64), torch.randn(4, 6, generator=g, dtype=torch.float64)
        >>> q_c, k_c = canonical_qk(q, k, shape)
        >>> bool(torch.allclose(q_c[[0, 2]].T @ k_c[[0, 2]], q[[0, 2]].T @ k[[0, 2]]))  # a pair's score form
        True
    """
    n_kv, group, half, d = shape.n_kv_heads, shape.group, shape.pairs, q.shape[1]
    # HF half-split: a head's rows [0, half) are its pairs' first coordinates, [half, head_dim) the second
    q_first, q_second = q.reshape(n_kv, group, 2, half, d).unbind(2)  # (n_kv, group, pairs, d) each
    k_first, k_second = k.reshape(n_kv, 2, half, d).unbind(1)  # (n_kv, pairs, d) each
    # the pairs' 2x2 Grams, Q's summed over the group's query heads: (n_kv, pairs), accumulated in float64
    wide = torch.float64
    # (the products in float64 where they overflow the weights' dtype: weights near float32's limit)
    qaa, qbb, qab = (_finite(lambda x, y: (x * y).sum((1, 3), dtype=wide), a, b)
                     for a, b in ((q_first, q_first), (q_second, q_second), (q_first, q_second)))
    kaa, kbb, kab = (_finite(lambda x, y: (x * y).sum(2, dtype=wide), a, b)
                     for a, b in ((k_first, k_first), (k_second, k_second), (k_first, k_second)))
    q_sq, k_sq = qaa + qbb, kaa + kbb
    ok = (q_sq > _TINY) & (k_sq > _TINY)
    scale = torch.where(ok, (k_sq / q_sq.clamp_min(_TINY)).pow(0.25), 1.0)  # q * scale, k / scale
    s2 = scale.pow(2)
    gram = torch.stack([torch.stack([qaa * s2 + kaa / s2, qab * s2 + kab / s2], -1),
                        torch.stack([qab * s2 + kab / s2, qbb * s2 + kbb / s2], -1)], -2)  # (n_kv, pairs, 2, 2)
    _, vectors = torch.linalg.eigh(gram)  # ascending
    # R(-alpha) with (cos alpha, sin alpha) = the larger eigenvalue's eigenvector: rows (cos, sin), (-sin, cos)
    cos, sin, scale = vectors[..., 0, 1].unsqueeze(-1), vectors[..., 1, 1].unsqueeze(-1), scale.unsqueeze(-1)
    cq, sq = (cos * scale).to(q.dtype), (sin * scale).to(q.dtype)  # (n_kv, pairs, 1)
    ck, sk = (cos / scale).to(q.dtype), (sin / scale).to(q.dtype)
    first_q = (q_first * cq.unsqueeze(1)).addcmul_(q_second, sq.unsqueeze(1))
    first_k = (k_first * ck).addcmul_(k_second, sk)
    # the sign of each pair: a positive summed score (sign_scores) of its first rows (the group's Q rows and K's)
    rows = torch.cat([first_q.transpose(0, 1).reshape(group, n_kv * half, d), first_k.reshape(1, n_kv * half, d)])
    score = sign_scores(rows.reshape(-1, d), sign_reference).reshape(group + 1, n_kv * half).sum(0)
    sign = torch.where(score < 0, -1.0, 1.0).to(q.dtype).reshape(n_kv, half, 1)
    # the outputs written in place: first rows * sign, second rows (c x2 - s x1) * sign
    q_out = torch.empty((n_kv, group, 2, half, d), dtype=q.dtype)
    torch.mul(first_q, sign.unsqueeze(1), out=q_out[:, :, 0])
    torch.mul(q_second, (cq * sign).unsqueeze(1), out=q_out[:, :, 1])
    q_out[:, :, 1].addcmul_(q_first, (-sq * sign).unsqueeze(1))
    k_out = torch.empty((n_kv, 2, half, d), dtype=k.dtype)
    torch.mul(first_k, sign, out=k_out[:, 0])
    torch.mul(k_second, ck * sign, out=k_out[:, 1])
    k_out[:, 1].addcmul_(k_first, -sk * sign)
    return q_out.reshape(q.shape), k_out.reshape(k.shape)


def head_order(v: torch.Tensor, o: torch.Tensor, shape: GaugeShape) -> tuple[torch.Tensor, torch.Tensor]:
    """``(kv_perm, q_perms)`` for :func:`geodrift.gauge.orbit.permute_heads`: KV heads by ``||[O_q V]||_F``,
    query heads within a group by ``||O_q V||_F`` (both descending; gauge-invariant keys, so the order may
    be taken before or after the V/O and Q/K canonical maps).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> v, o = torch.randn(8, 6, generator=g), torch.randn(6, 16, generator=g)
        >>> kv_perm, q_perms = head_order(v, o, GaugeShape(1, 4, 2, 4))
        >>> tuple(kv_perm.shape), tuple(q_perms.shape)
        ((2,), (2, 2))
    """
    return _order_from_grams(*_head_grams(v, o, shape), shape)


def _order_from_grams(o_gram: torch.Tensor, v_gram: torch.Tensor, shape: GaugeShape
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    # ||O_q V||_F^2 = <O_q^T O_q, V V^T>: head_dim-sized Grams instead of d x d products
    q_norms = (o_gram.reshape(shape.n_kv_heads, shape.group, *o_gram.shape[1:]) * v_gram.unsqueeze(1)).sum((2, 3))
    kv_perm = torch.argsort(-q_norms.sum(1), stable=True)
    q_perms = torch.argsort(-q_norms.index_select(0, kv_perm), dim=1, stable=True)
    return kv_perm, q_perms


def _head_rows(kv_perm: torch.Tensor, q_perms: torch.Tensor, shape: GaugeShape) -> tuple[torch.Tensor, torch.Tensor]:
    # the K/V rows and Q rows (= O columns) of :func:`head_order`'s order
    within = torch.arange(shape.head_dim)
    q_heads = (kv_perm.reshape(-1, 1) * shape.group + q_perms).reshape(-1)
    return ((kv_perm.reshape(-1, 1) * shape.head_dim + within).reshape(-1),
            (q_heads.reshape(-1, 1) * shape.head_dim + within).reshape(-1))


def canonical_layer(layer: dict[str, torch.Tensor], shape: GaugeShape,
                    sign_reference: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """One layer's seven projections (folded) at their canonical point.

    Every step commutes with a residual rotation (the signs read rows against ``sign_reference``, which
    rotates with them), so the layer may come in any residual basis: ``canonical_layer(to_basis(layer, P),
    sign_reference=P^T e) == to_basis(canonical_layer(layer, sign_reference=e), P)`` to rounding. The heads are
    put in their canonical order first (its keys are invariant) and then canonicalised in place of it, which
    equals canonicalising and then ordering (each head's maps are its own).

    Args:
        layer: ``{"q_proj": ..., ..., "down_proj": ...}`` (``nn.Linear`` layout).
        shape: the heads.
        sign_reference: the token embedding's mean, in the layer's residual basis (None: signs by third moments
            of the rows' own coordinates, which a residual rotation moves).

    Returns:
        The same keys and dtype, canonical (the attention's factorisations are computed in float64, the
        MLP's signs, scales and order in the given dtype).

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> shape = GaugeShape(1, 4, 2, 4)
        >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=40, generator=torch.Generator().manual_seed(0))
        >>> out = canonical_layer({n: sd[layer_key(0, n)] for n in PROJECTIONS}, shape)
        >>> sorted(out) == sorted(PROJECTIONS)
        True
    """
    dtype = layer["q_proj"].dtype
    reference = None if sign_reference is None else sign_reference.to(torch.float64)
    o_gram, v_gram = _head_grams(layer["v_proj"], layer["o_proj"], shape)
    kv_perm, q_perms = _order_from_grams(o_gram, v_gram, shape)
    kv_rows, q_rows = _head_rows(kv_perm, q_perms, shape)
    q_heads = (kv_perm.reshape(-1, 1) * shape.group + q_perms).reshape(-1)
    v, o = _balanced_vo(layer["v_proj"].index_select(0, kv_rows), layer["o_proj"].index_select(1, q_rows),
                        o_gram.index_select(0, q_heads), v_gram.index_select(0, kv_perm), shape, reference)
    q, k = canonical_qk(layer["q_proj"].index_select(0, q_rows), layer["k_proj"].index_select(0, kv_rows), shape,
                        reference)
    gate, up, down = canonical_mlp(layer["gate_proj"], layer["up_proj"], layer["down_proj"])
    return {"q_proj": q.to(dtype), "k_proj": k.to(dtype), "v_proj": v.to(dtype), "o_proj": o.to(dtype),
            "gate_proj": gate, "up_proj": up, "down_proj": down}


def sign_scores(rows: torch.Tensor, sign_reference: torch.Tensor | None) -> torch.Tensor:
    """``(n,)`` float64 scores whose signs fix the rows' signs: ``<row, e>`` with the token embedding's mean ``e``,
    or (no reference) the third moment of the row's coordinates."""
    if sign_reference is None:
        return rows.to(torch.float64).pow(3).sum(-1)
    return rows.to(torch.float64) @ sign_reference.to(torch.float64)


def row_signs(rows: torch.Tensor, sign_reference: torch.Tensor | None) -> torch.Tensor:
    """``(n,)`` signs (in ``rows``' dtype) making each row's :func:`sign_scores` non-negative (+1 at exactly 0)."""
    return torch.where(sign_scores(rows, sign_reference) < 0, -1.0, 1.0).to(rows.dtype)


def canonicalise(sd: StateDict, shape: GaugeShape) -> StateDict:
    """A whole state dict at its canonical point: gains folded, the residual basis of :func:`residual_basis`,
    every layer by :func:`canonical_layer` (signed against the token embedding's mean). The function is unchanged
    (float64 out).

    Args:
        sd: a Llama state dict (HF names); shape: its :class:`~geodrift.gauge.orbit.GaugeShape`.

    Returns:
        The canonical state dict (gains 1, untied ``lm_head``).

    Raises:
        GeodriftError: an embedding whose Gram does not fix the basis (:func:`residual_basis`).
    """
    out = {key: value.to(torch.float64) for key, value in fold_gains(sd, shape).items()}
    basis = residual_basis(out[EMBED])
    out[EMBED] = out[EMBED] @ basis
    out[LM_HEAD] = out[LM_HEAD] @ basis
    reference = out[EMBED].mean(0)
    for layer in range(shape.n_layers):
        weights = to_basis({name: out[layer_key(layer, name)] for name in PROJECTIONS}, basis)
        for name, value in canonical_layer(weights, shape, reference).items():  # float64 throughout here
            out[layer_key(layer, name)] = value
    return out


__all__ = ["PROJECTIONS", "WRITERS", "canonical_layer", "canonical_mlp", "canonical_qk", "canonical_vo",
           "canonicalise", "column_norms", "head_order", "mlp_maps", "residual_basis", "rotate_residual",
           "rotate_triplets", "row_signs", "sign_scores", "to_basis", "unit_keys"]
