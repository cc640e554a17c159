"""The canonical point of a Llama layer's gauge orbit: one representative that every exact gauge maps to itself.

The orbit is the one :mod:`geodrift.gauge.orbit` generates (after the gains are folded): a residual
rotation, per KV head ``GL(head_dim)`` on V/O, per KV head and RoPE pair a rotation-scaling on Q/K,
per hidden unit a nonzero scale on Up/Down, hidden-unit and head permutations. The convention
(docs/verdicts.md says why):

- **residual basis** (:func:`residual_basis`): the eigenvectors of the token embedding's Gram
  ``E^T E`` (largest eigenvalue first; each signed so that the token coordinates' third moment
  ``sum((E p)^3)`` is positive). The embedding is the one residual-side matrix no other gauge touches, so
  a residual rotation ``R`` moves this basis to ``R P`` and every weight expressed in it is unchanged,
  coordinates included: the permutation null and z are then invariant too.
- **MLP**, per hidden unit ``j``: the sign that makes ``<Gate_j, Up_j>`` positive (Up enters
  linearly, so ``-1`` is a gauge too), then the **balanced** split ``||Up_j|| = ||Down_j||`` (the
  minimum-norm point of the scaling orbit), then units sorted by ``||Gate_j||`` (descending; ties by
  the balanced norm).
- **V/O**, per KV head: the balanced factorisation of the stacked ``[O_q V]`` of its query heads
  (SVD ``U S W^T``: ``V = S^1/2 W^T``, ``O_stack = U S^1/2``), each singular pair signed so that V's
  row has a positive third moment.
- **Q/K**, per KV head and RoPE pair: the balanced scale (the group's Q pair rows and K's pair
  rows of equal Frobenius norm), then the rotation that diagonalises their summed 2x2 Gram (the
  larger eigenvalue first), the remaining ``R(pi)`` fixed by a positive third moment of the first rows.
- **heads**: KV heads sorted by ``||[O_q V]||_F`` (descending), query heads within a group by
  ``||O_q V||_F``.

Everything is computed in float64.

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
from dataclasses import replace

import torch

from geodrift.gauge.orbit import (
    EMBED,
    LM_HEAD,
    GaugeShape,
    StateDict,
    fold_gains,
    layer_key,
)
from geodrift.gauge.status import residual_spaces
from geodrift.linalg import SVDTriplets

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
WRITERS = ("o_proj", "down_proj")  # write the residual stream (its basis acts on their rows); the others read it
_TINY = 1e-300
_TOKEN_BLOCK = 1024  # tokens per block of the residual basis's third moments


def _positive_third_moment(rows: torch.Tensor) -> torch.Tensor:
    # (n, d) -> (n,) signs making sum(row^3) >= 0 (+1 where it is exactly 0)
    return torch.where(rows.pow(3).sum(-1) < 0, -1.0, 1.0).to(rows.dtype)


def residual_basis(embedding: torch.Tensor) -> torch.Tensor:
    """The canonical residual basis ``P`` (``d x d``, orthogonal, columns = basis vectors) of a token embedding.

    Args:
        embedding: ``(vocab, d)``.

    Returns:
        float64 ``P``: eigenvectors of ``E^T E``, largest eigenvalue first, signs by a positive third moment
        (the Gram and the coordinates computed in the embedding's dtype).

    Example:
        >>> p = residual_basis(torch.randn(50, 4, generator=torch.Generator().manual_seed(0)))
        >>> bool(torch.allclose(p.T @ p, torch.eye(4, dtype=torch.float64)))
        True
    """
    # the Gram in the embedding's own precision (a float32 checkpoint's: 4x faster than float64 on a large
    # vocabulary), decomposed in float64
    gram = (embedding.T @ embedding).to(torch.float64)
    _, vectors = torch.linalg.eigh((gram + gram.T) / 2)
    vectors = vectors.flip(-1)  # descending eigenvalues
    # the tokens' coordinates in the embedding's precision too, their cubes summed in float64, a block of
    # tokens at a time (cache-sized: the whole (vocab, d) product and its float64 copy cost twice as much)
    basis = vectors.to(embedding.dtype)
    third = torch.zeros(vectors.shape[1], dtype=torch.float64)
    for start in range(0, embedding.shape[0], _TOKEN_BLOCK):
        third += (embedding[start:start + _TOKEN_BLOCK] @ basis).to(torch.float64).pow(3).sum(0)
    return vectors * torch.where(third < 0, -1.0, 1.0).to(torch.float64).reshape(1, -1)


def to_basis(layer: dict[str, torch.Tensor], basis: torch.Tensor) -> dict[str, torch.Tensor]:
    """A layer's projections in the residual basis ``P``: readers ``W P``, writers ``P^T W`` (in the weights' dtype)."""
    out = {}
    for name, weight in layer.items():
        p = basis.to(weight.dtype)
        out[name] = p.T @ weight if name in WRITERS else weight @ p
    return out


def _coordinates(rows: torch.Tensor, basis: torch.Tensor | None) -> torch.Tensor:
    # residual-side rows (..., d) in the residual basis P (None: they already are), for the third-moment signs;
    # the product in float32 like to_basis's, the cubes in the rows' dtype
    if basis is None:
        return rows
    return (rows.to(torch.float32) @ basis.to(torch.float32)).to(rows.dtype)


def rotate_triplets(triplets: SVDTriplets, basis: torch.Tensor, left: bool, right: bool) -> SVDTriplets:
    """The singular triplets of ``P^T W`` (``left``) and/or ``W P`` (``right``) from those of ``W``.

    A residual rotation moves singular vectors exactly: ``W = U S Vh`` gives ``W P = U S (Vh P)`` and
    ``P^T W = (P^T U) S Vh``; values, Frobenius norm and residual are unchanged. Costs ``k x d x d``
    instead of the ``m x n x d`` of rotating ``W`` itself.

    Example:
        >>> from geodrift.linalg import top_k_svd
        >>> g = torch.Generator().manual_seed(0)
        >>> w, p = torch.randn(5, 4, generator=g), residual_basis(torch.randn(30, 4, generator=g)).float()
        >>> moved = rotate_triplets(top_k_svd(w, 2), p, left=False, right=True)
        >>> bool(torch.allclose((moved.Vh @ (w @ p).T @ (w @ p) @ moved.Vh.T).diag().sqrt(), moved.S, atol=1e-5))
        True
    """
    u = basis.T.to(triplets.U.dtype) @ triplets.U if left else triplets.U
    vh = triplets.Vh @ basis.to(triplets.Vh.dtype) if right else triplets.Vh
    return replace(triplets, U=u, Vh=vh)


def rotate_residual(spectra: dict[tuple[str, int], SVDTriplets],
                    basis: torch.Tensor) -> dict[tuple[str, int], SVDTriplets]:
    """Every matrix's triplets after the residual basis change ``P``: each role's residual-side vectors
    rotated (:func:`geodrift.gauge.status.residual_spaces`: readers' ``v``, writers' ``u``, both of OV).

    Args:
        spectra: ``{(role, layer): triplets}`` of the matrices before the change (``decompose``'s output).
        basis: ``P`` (``d x d``).

    Returns:
        The triplets of the matrices in ``P``.
    """
    # one product per side and dtype for every matrix's vectors (240 small products cost 3x more on SmolLM2)
    rows: dict[tuple[str, torch.dtype], list[tuple[tuple[str, int], torch.Tensor]]] = {}
    for key, triplets in spectra.items():
        spaces = residual_spaces(key[0])
        if "u" in spaces:
            rows.setdefault(("u", triplets.U.dtype), []).append((key, triplets.U.T))
        if "v" in spaces:
            rows.setdefault(("v", triplets.Vh.dtype), []).append((key, triplets.Vh))
    moved: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
    for (side, dtype), items in rows.items():
        product = torch.cat([m for _, m in items]) @ basis.to(dtype)  # rows r -> r P (u: (P^T U)^T = U^T P)
        for (key, _), block in zip(items, product.split([m.shape[0] for _, m in items]), strict=True):
            moved.setdefault(key, {})[side] = block
    out = {}
    for key, triplets in spectra.items():
        change = moved.get(key, {})
        out[key] = replace(triplets, U=change["u"].T.contiguous() if "u" in change else triplets.U,
                           Vh=change.get("v", triplets.Vh))
    return out


def canonical_mlp(gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Signed, balanced and sorted ``(gate, up, down)`` (see the module docstring).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> gate, up, down = (torch.randn(3, 5, generator=g, dtype=torch.float64) for _ in range(3))
        >>> _, up_c, down_c = canonical_mlp(gate, up, down.T)
        >>> bool(torch.allclose(up_c.norm(dim=1), down_c.norm(dim=0)))
        True
    """
    sign = _finite(_positive_product, gate, up).to(up.dtype)
    # a sign changes no norm; the column norms as a sum of squares (a strided norm is 2x slower)
    up_norm, down_norm = _finite(lambda u: u.norm(dim=1), up), _finite(lambda d: d.pow(2).sum(0).sqrt(), down)
    scale = torch.where((up_norm > _TINY) & (down_norm > _TINY), (down_norm / up_norm.clamp_min(_TINY)).sqrt(), 1.0)
    factor = sign * scale.to(up.dtype)  # exact: the sign is +-1, so x * factor and x / factor round as x * sign * scale does
    up = up * factor.reshape(-1, 1)
    order = _descending(_finite(lambda g: g.norm(dim=1), gate), _finite(lambda u: u.norm(dim=1), up))
    return (gate.index_select(0, order), up.index_select(0, order),
            down.index_select(1, order).div_(factor[order].reshape(1, -1)))


def _finite(reduce: Callable[..., torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
    # reduce(*xs), again in float64 where squares or products overflow the dtype (weights near float32's limit)
    out = reduce(*xs)
    return out if bool(torch.isfinite(out).all()) else reduce(*(x.to(torch.float64) for x in xs))


def _positive_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where((a * b).sum(-1) < 0, -1.0, 1.0).to(a.dtype)


def _descending(key: torch.Tensor, tie: torch.Tensor) -> torch.Tensor:
    # lexicographic: key descending, then tie descending (a stable sort on the secondary key first)
    first = torch.argsort(-tie, stable=True)
    return first[torch.argsort(-key[first], stable=True)]


def canonical_vo(v: torch.Tensor, o: torch.Tensor, shape: GaugeShape,
                 basis: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per KV head, the balanced factorisation of the stacked ``[O_q V_h]`` (float64 ``v``, ``o``).

    Args:
        v: ``(n_kv_heads * head_dim, d)``; o: ``(d, n_heads * head_dim)``; shape: the heads.
        basis: the residual basis ``P`` when ``v``/``o`` are not yet in it (the signs read V's rows in ``P``).

    Returns:
        ``(v, o)`` canonical, the products ``O_q V_h`` unchanged.
    """
    d, hd, group = o.shape[0], shape.head_dim, shape.group
    v_blocks, o_blocks = [], []
    for kv in range(shape.n_kv_heads):
        # the group's query heads are contiguous columns of O: stacked as (group * d, hd) blocks
        o_group = o[:, kv * group * hd:(kv + 1) * group * hd]
        o_stack = o_group.reshape(d, group, hd).transpose(0, 1).reshape(group * d, hd)
        v_head = v[kv * hd:(kv + 1) * hd]
        # only the triangular factors: Q_O = O_stack R_O^-1 and Q_V^T = R_V^-T V (the explicit Qs cost twice),
        # unless a factor is (nearly) singular, e.g. a pruned head: then the explicit QR
        ro = torch.linalg.qr(o_stack, mode="r").R
        rv = torch.linalg.qr(v_head.T, mode="r").R  # (hd, hd)
        if _well_conditioned(ro) and _well_conditioned(rv):
            a, s, bt = torch.linalg.svd(ro @ rv.T)
            root = s.sqrt()
            # V = S^1/2 B^T Q_V^T = S^1/2 (R_V^-1 B)^T V;  O = Q_O A S^1/2 = O_stack (R_O^-1 A) S^1/2
            right = torch.linalg.solve_triangular(rv, bt.T, upper=True)  # R_V^-1 B
            v_blocks.append(root.reshape(-1, 1) * (right.T @ v_head))  # (hd, d)
            o_blocks.append((o_stack @ torch.linalg.solve_triangular(ro, a, upper=True)) * root.reshape(1, -1))
            continue
        qo, ro = torch.linalg.qr(o_stack)
        qv, rv = torch.linalg.qr(v_head.T)  # (d, hd), (hd, hd)
        a, s, bt = torch.linalg.svd(ro @ rv.T)
        root = s.sqrt()
        v_blocks.append(root.reshape(-1, 1) * (bt @ qv.T))  # (hd, d)
        o_blocks.append((qo @ a) * root.reshape(1, -1))  # (group * d, hd)
    v_new = torch.cat(v_blocks)
    sign = _positive_third_moment(_coordinates(v_new, basis))  # one product for every head's rows
    o_new = torch.cat([block.reshape(group, d, hd).transpose(0, 1).reshape(d, group * hd)
                       * sign[kv * hd:(kv + 1) * hd].repeat(group).reshape(1, -1)
                       for kv, block in enumerate(o_blocks)], 1)
    return v_new * sign.reshape(-1, 1), o_new


def _well_conditioned(triangular: torch.Tensor) -> bool:
    # a triangular factor whose diagonal spans less than 1e8 (float64: the solves keep ~8 digits to spare)
    diagonal = triangular.diagonal().abs()
    return bool(diagonal.min() > 1e-8 * diagonal.max())


def canonical_qk(q: torch.Tensor, k: torch.Tensor, shape: GaugeShape,
                 basis: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per KV head and RoPE pair: balanced scale, Gram-diagonalising rotation, sign (float64 ``q``, ``k``).

    Args:
        q: ``(n_heads * head_dim, d)``; k: ``(n_kv_heads * head_dim, d)`` (HF half-split pairs).
        basis: the residual basis ``P`` when ``q``/``k`` are not yet in it (the signs read rows in ``P``).

    Returns:
        ``(q, k)`` canonical; every RoPE score is unchanged.
    """
    q, k = q.clone(), k.clone()
    half = shape.pairs
    for kv in range(shape.n_kv_heads):
        heads = range(kv * shape.group, (kv + 1) * shape.group)
        kb = kv * shape.head_dim
        k_pairs = torch.stack([k[kb:kb + half], k[kb + half:kb + 2 * half]], 1)  # (pairs, 2, d)
        q_pairs = torch.stack([torch.stack([q[h * shape.head_dim:h * shape.head_dim + half],
                                            q[h * shape.head_dim + half:(h + 1) * shape.head_dim]], 1)
                               for h in heads], 1)  # (pairs, group, 2, d)
        q_sq = q_pairs.pow(2).sum((1, 2, 3))
        k_sq = k_pairs.pow(2).sum((1, 2))
        ok = (q_sq > _TINY) & (k_sq > _TINY)
        scale = torch.where(ok, (k_sq / q_sq.clamp_min(_TINY)).pow(0.25), 1.0)  # q * scale, k / scale
        q_pairs = q_pairs * scale.reshape(-1, 1, 1, 1)
        k_pairs = k_pairs / scale.reshape(-1, 1, 1)
        gram = torch.einsum("pgad,pgbd->pab", q_pairs, q_pairs) + torch.einsum("pad,pbd->pab", k_pairs, k_pairs)
        _, vectors = torch.linalg.eigh(gram)  # ascending
        top = vectors[..., 1]  # (pairs, 2): the larger eigenvalue's eigenvector
        cos, sin = top[:, 0], top[:, 1]
        # R(-alpha) with (cos alpha, sin alpha) = top: first row (cos, sin), second (-sin, cos)
        rot = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], 1)  # (pairs, 2, 2)
        q_pairs = torch.einsum("pab,pgbd->pgad", rot, q_pairs)
        k_pairs = torch.einsum("pab,pbd->pad", rot, k_pairs)
        first = _coordinates(torch.cat([q_pairs[:, :, 0], k_pairs[:, 0:1]], 1), basis)  # (pairs, group + 1, d)
        sign = torch.where(first.pow(3).sum((1, 2)) < 0, -1.0, 1.0).to(q.dtype)
        q_pairs, k_pairs = q_pairs * sign.reshape(-1, 1, 1, 1), k_pairs * sign.reshape(-1, 1, 1)
        k[kb:kb + half], k[kb + half:kb + 2 * half] = k_pairs[:, 0], k_pairs[:, 1]
        for i, h in enumerate(heads):
            hb = h * shape.head_dim
            q[hb:hb + half], q[hb + half:hb + 2 * half] = q_pairs[:, i, 0], q_pairs[:, i, 1]
    return q, k


def head_order(v: torch.Tensor, o: torch.Tensor, shape: GaugeShape) -> tuple[torch.Tensor, torch.Tensor]:
    """``(kv_perm, q_perms)`` for :func:`geodrift.gauge.orbit.permute_heads`: KV heads by ``||[O_q V]||_F``,
    query heads within a group by ``||O_q V||_F`` (both descending; gauge-invariant keys)."""
    # ||O_q V||_F^2 = <O_q^T O_q, V V^T>: head_dim-sized Grams instead of d x d products
    q_norms = torch.stack([
        torch.stack([((o[:, shape.head_rows(q)].T @ o[:, shape.head_rows(q)])
                      * (v[shape.head_rows(kv)] @ v[shape.head_rows(kv)].T)).sum()
                     for q in range(kv * shape.group, (kv + 1) * shape.group)])
        for kv in range(shape.n_kv_heads)])  # (n_kv, group): squared norms
    kv_perm = torch.argsort(-q_norms.sum(1), stable=True)
    q_perms = torch.stack([torch.argsort(-q_norms[int(kv)], stable=True) for kv in kv_perm])
    return kv_perm, q_perms


def canonical_layer(layer: dict[str, torch.Tensor], shape: GaugeShape,
                    basis: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """One layer's seven projections (folded, in the canonical residual basis) at their canonical point.

    Every step but the third-moment signs commutes with a residual rotation, so the layer may also be
    given *before* the rotation with ``basis`` = ``P``: the result is then the canonical layer before the
    rotation, ``canonical_layer(to_basis(layer, P)) == to_basis(canonical_layer(layer, basis=P), P)`` to
    rounding, and a scan may decompose it and rotate only the singular vectors (:func:`rotate_triplets`).

    Args:
        layer: ``{"q_proj": ..., ..., "down_proj": ...}`` (``nn.Linear`` layout).
        shape: the heads.
        basis: ``P`` when ``layer`` is not yet in the canonical residual basis (None: it is).

    Returns:
        The same keys and dtype, canonical (the attention's factorisations are computed in float64, the
        MLP's signs, scales and order in the given dtype).
    """
    w = {name: layer[name] for name in PROJECTIONS}
    wide = {name: w[name].to(torch.float64) for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
    v, o = (t.to(w["v_proj"].dtype) for t in canonical_vo(wide["v_proj"], wide["o_proj"], shape, basis))
    q, k = (t.to(w["q_proj"].dtype) for t in canonical_qk(wide["q_proj"], wide["k_proj"], shape, basis))
    kv_perm, q_perms = head_order(v, o, shape)
    kv_rows = torch.cat([shape.head_rows(int(h)) for h in kv_perm])
    q_rows = torch.cat([shape.head_rows(int(kv_perm[i]) * shape.group + int(q_perms[i, j]))
                        for i in range(shape.n_kv_heads) for j in range(shape.group)])
    gate, up, down = canonical_mlp(w["gate_proj"], w["up_proj"], w["down_proj"])
    return {"q_proj": q.index_select(0, q_rows), "k_proj": k.index_select(0, kv_rows),
            "v_proj": v.index_select(0, kv_rows), "o_proj": o.index_select(1, q_rows),
            "gate_proj": gate, "up_proj": up, "down_proj": down}


def canonicalise(sd: StateDict, shape: GaugeShape) -> StateDict:
    """A whole state dict at its canonical point: gains folded, the residual basis of :func:`residual_basis`,
    every layer by :func:`canonical_layer`. The function is unchanged (float64 out).

    Args:
        sd: a Llama state dict (HF names); shape: its :class:`~geodrift.gauge.orbit.GaugeShape`.

    Returns:
        The canonical state dict (gains 1, untied ``lm_head``).
    """
    out = {key: value.to(torch.float64) for key, value in fold_gains(sd, shape).items()}
    basis = residual_basis(out[EMBED])
    out[EMBED] = out[EMBED] @ basis
    out[LM_HEAD] = out[LM_HEAD] @ basis
    for layer in range(shape.n_layers):
        weights = to_basis({name: out[layer_key(layer, name)] for name in PROJECTIONS}, basis)
        for name, value in canonical_layer(weights, shape).items():  # float64 throughout here
            out[layer_key(layer, name)] = value
    return out


__all__ = ["PROJECTIONS", "WRITERS", "canonical_layer", "canonical_mlp", "canonical_qk",
           "canonical_vo", "canonicalise", "head_order", "residual_basis", "rotate_residual", "rotate_triplets",
           "to_basis"]
