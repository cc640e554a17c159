"""The baselines of the seed-pair barriers: Git Re-Basin weight matching, and rotation-symmetry matching.

Both work on folded (gains 1, untied head) float64 Llama state dicts and move B with
:mod:`geodrift.gauge.orbit`'s exact maps, so the moved B computes B's function.

- :func:`permutation_match` - **Git Re-Basin weight matching** (Ainsworth et al. 2023, arXiv 2209.04836, its
  Algorithm 1): the permutations of a Llama - one of the residual stream (shared by every layer), per layer
  one of the hidden units and one of the heads (key-value groups, and query heads within a group) - chosen
  by coordinate descent: each in turn (in a random order per sweep, from ``seed``) solved as a linear
  assignment (``scipy.optimize.linear_sum_assignment``) that maximises ``sum <W_A, P W_B>`` over every
  weight it touches with the others held fixed, until a sweep changes nothing. No rotations, no scalings.
- :func:`rotation_match` - **rotation-symmetry matching** in the style of Zhang et al. 2025 (arXiv
  2502.00264): the permutations above, then per key-value head the orthogonal map on V's rows (and its
  inverse on O's columns) that best matches ``[V; O^T]`` (Procrustes), and per RoPE pair the rotation on Q's
  and K's rows that best matches them (rotations commute with RoPE; the paper's Q/K rotations, restricted to
  the RoPE commutant). No residual rotation, no Up/Down scalings: those are geodrift's own
  (:func:`geodrift.gauge.align.align`).

Example:
    >>> from geodrift.gauge.orbit import GaugeShape, fold_gains, random_gauge, toy_state_dict
    >>> shape = GaugeShape(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=4)
    >>> a = fold_gains(toy_state_dict(shape, 16, 24, 40, torch.Generator().manual_seed(0)), shape)
    >>> b = random_gauge(a, shape, torch.Generator().manual_seed(1), generators=("mlp_permute", "head_permute"))
    >>> moved = permutation_match(a, b, shape)
    >>> max(float((moved[k] - a[k]).abs().max()) for k in a) < 1e-12
    True
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from geodrift.gauge.orbit import (
    EMBED,
    LM_HEAD,
    GaugeShape,
    StateDict,
    layer_key,
    permute_heads,
    permute_mlp,
    rotate_residual,
    transform_qk_all,
    transform_vo,
)

READERS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
WRITERS = ("o_proj", "down_proj")
MAX_SWEEPS = 50


def objective(a: StateDict, b: StateDict, shape: GaugeShape) -> float:
    """``sum <W_A, W_B>`` over the embedding, the head and every projection (what weight matching maximises)."""
    names = [EMBED, LM_HEAD] + [layer_key(lay, r) for lay in range(shape.n_layers) for r in READERS + WRITERS]
    return float(sum((a[n] * b[n]).sum() for n in names))


def _residual_step(a: StateDict, b: StateDict, shape: GaugeShape) -> tuple[StateDict, bool]:
    cross = a[EMBED].T @ b[EMBED] + a[LM_HEAD].T @ b[LM_HEAD]
    for layer in range(shape.n_layers):
        for name in READERS:
            cross += a[layer_key(layer, name)].T @ b[layer_key(layer, name)]
        for name in WRITERS:
            cross += a[layer_key(layer, name)] @ b[layer_key(layer, name)].T
    _, cols = linear_sum_assignment(cross.numpy(), maximize=True)
    if (cols == np.arange(len(cols))).all():
        return b, False
    perm = torch.zeros(len(cols), len(cols), dtype=torch.float64)
    perm[torch.arange(len(cols)), torch.from_numpy(cols)] = 1.0  # new coordinate i <- B's coordinate cols[i]
    return rotate_residual(b, shape, perm), True


def _hidden_step(a: StateDict, b: StateDict, layer: int) -> tuple[StateDict, bool]:
    gate, up, down = (layer_key(layer, n) for n in ("gate_proj", "up_proj", "down_proj"))
    cross = a[gate] @ b[gate].T + a[up] @ b[up].T + a[down].T @ b[down]
    _, cols = linear_sum_assignment(cross.numpy(), maximize=True)
    if (cols == np.arange(len(cols))).all():
        return b, False
    return permute_mlp(b, layer, torch.from_numpy(cols)), True


def _head_step(a: StateDict, b: StateDict, shape: GaugeShape, layer: int) -> tuple[StateDict, bool]:
    hd, group = shape.head_dim, shape.group

    def blocks(x: torch.Tensor, heads: int) -> torch.Tensor:  # rows of each head -> (heads, hd * d)
        return x.reshape(heads, hd * x.shape[1])

    q = blocks(a[layer_key(layer, "q_proj")], shape.n_heads) @ blocks(b[layer_key(layer, "q_proj")], shape.n_heads).T
    o_a, o_b = (x[layer_key(layer, "o_proj")].T.contiguous() for x in (a, b))
    q = q + blocks(o_a, shape.n_heads) @ blocks(o_b, shape.n_heads).T
    k_a, k_b, v_a, v_b = (blocks(x[layer_key(layer, n)], shape.n_kv_heads) for n in ("k_proj", "v_proj") for x in (a, b))
    kv = k_a @ k_b.T + v_a @ v_b.T
    within = {}
    score = np.zeros((shape.n_kv_heads, shape.n_kv_heads))
    for ga in range(shape.n_kv_heads):
        for gb in range(shape.n_kv_heads):
            block = q[ga * group:(ga + 1) * group, gb * group:(gb + 1) * group].numpy()
            rows, cols = linear_sum_assignment(block, maximize=True)
            within[ga, gb] = cols
            score[ga, gb] = block[rows, cols].sum() + float(kv[ga, gb])
    _, kv_cols = linear_sum_assignment(score, maximize=True)
    q_perms = np.stack([within[ga, int(gb)] for ga, gb in enumerate(kv_cols)])
    if (kv_cols == np.arange(len(kv_cols))).all() and (q_perms == np.arange(group)).all():
        return b, False
    return permute_heads(b, shape, layer, torch.from_numpy(kv_cols.astype(np.int64)),
                         torch.from_numpy(q_perms.astype(np.int64))), True


def permutation_match(a: StateDict, b: StateDict, shape: GaugeShape, seed: int = 0, *, rotations: bool = False
                      ) -> StateDict:
    """Git Re-Basin weight matching of folded ``b`` to folded ``a`` (the module docstring); returns the moved ``b``.

    With ``rotations``, each sweep also fits the per-head orthogonal maps (:func:`rotation_match`), so that the
    permutations are chosen against heads already rotated towards A's; sweeps stop when the objective gains
    less than 1e-12 of itself.
    """
    order = ["residual"] + [f"{kind} {layer}" for layer in range(shape.n_layers) for kind in ("heads", "hidden")]
    rng = random.Random(seed)
    before = objective(a, b, shape)
    for _ in range(MAX_SWEEPS):
        rng.shuffle(order)
        changed = False
        for step in order:
            kind, _, layer = step.partition(" ")
            if kind == "residual":
                b, moved = _residual_step(a, b, shape)
            elif kind == "heads":
                b, moved = _head_step(a, b, shape, int(layer))
            else:
                b, moved = _hidden_step(a, b, int(layer))
            changed |= moved
        if rotations:
            b = _fit_head_rotations(a, b, shape)
            after = objective(a, b, shape)
            changed = after > before + 1e-12 * abs(before)
            before = after
        if not changed:
            break
    return b


def _procrustes(cross: torch.Tensor) -> torch.Tensor:
    # The orthogonal N maximising tr(N^T cross): U V^T of cross's SVD.
    u, _, vh = torch.linalg.svd(cross)
    return u @ vh


def rotation_match(a: StateDict, b: StateDict, shape: GaugeShape, seed: int = 0) -> StateDict:
    """Weight matching with orthogonal V/O maps per key-value head and RoPE-commuting Q/K rotations per pair,
    alternated with the permutations until the objective stops growing (:func:`permutation_match`)."""
    return permutation_match(a, b, shape, seed, rotations=True)


def _fit_head_rotations(a: StateDict, b: StateDict, shape: GaugeShape) -> StateDict:
    # Per layer and key-value head: the orthogonal N best matching [V; O^T] (Procrustes), then per RoPE pair the
    # rotation best matching the pair's K and Q rows (closed form: the angle of the 2x2 cross matrix).
    for layer in range(shape.n_layers):
        v, o, q, k = (layer_key(layer, n) for n in ("v_proj", "o_proj", "q_proj", "k_proj"))
        for g in range(shape.n_kv_heads):
            rows = shape.head_rows(g)
            cross = a[v][rows] @ b[v][rows].T  # N with N V_B ~ V_A and O_B N^T ~ O_A
            for h in range(g * shape.group, (g + 1) * shape.group):
                cols = shape.head_rows(h)
                cross = cross + a[o][:, cols].T @ b[o][:, cols]
            b = transform_vo(b, shape, layer, g, _procrustes(cross))
            phis = torch.zeros(shape.pairs, dtype=torch.float64)
            for i in range(shape.pairs):
                pair = shape.head_rows(g, pair=i)
                m = b[k][pair] @ a[k][pair].T
                for h in range(g * shape.group, (g + 1) * shape.group):
                    m = m + b[q][shape.head_rows(h, pair=i)] @ a[q][shape.head_rows(h, pair=i)].T
                phis[i] = math.atan2(float(m[0, 1] - m[1, 0]), float(m[0, 0] + m[1, 1]))
            b = transform_qk_all(b, shape, layer, g, torch.ones(shape.pairs, dtype=torch.float64), phis)
    return b
