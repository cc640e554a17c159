"""Exact reparametrisations (gauges) of a Llama-family state dict: maps that leave the function unchanged.

A state dict here uses Hugging Face's Llama names (geodrift's :class:`~geodrift.lm.llama.LlamaLM` and
``transformers.LlamaForCausalLM`` share them): ``model.embed_tokens.weight``, ``lm_head.weight``
(absent or equal to the embedding when tied), ``model.norm.weight`` and per layer ``l``
``model.layers.{l}.self_attn.{q,k,v,o}_proj.weight``, ``model.layers.{l}.mlp.{gate,up,down}_proj.weight``,
``model.layers.{l}.input_layernorm.weight``, ``model.layers.{l}.post_attention_layernorm.weight``.
Q/K rows are in Hugging Face's half-split rotary layout: frequency pair ``j`` of a head is the
coordinate pair ``(j, j + head_dim / 2)``.

The generators (each returns a new dict; the input is not modified):

- :func:`fold_gains`: every RMSNorm gain into the projections that read it (``W diag(g)``; the
  final norm's gain into ``lm_head``, which unties a tied head), gains set to 1. Exact, and the
  condition of every other generator here: the residual stream's group is O(d) only once the norms are
  gain-free (an RMSNorm without gain is radial, so it commutes with rotations).
- :func:`rotate_residual`: ``R`` in O(d): embedding ``E -> E R^T``, readers of the stream
  (Q, K, V, Gate, Up, lm_head) ``W -> W R^T``, writers (O, Down) ``W -> R W``.
- :func:`transform_vo`: per KV head, an invertible ``B`` on V's rows and ``B^-1`` on the O columns
  of every query head of that KV group (``O_h V_h`` unchanged).
- :func:`transform_qk`: per KV head and RoPE frequency pair, ``r R(phi)`` on the pair's Q rows (every
  query head of the group) and ``(1/r) R(phi)`` on K's (2x2 rotation-scalings commute with RoPE's
  rotations, so every score ``q^T R(theta (s - t)) k`` is unchanged).
- :func:`scale_mlp`: per hidden unit, Up row ``* s`` and Down column ``/ s`` (Up enters the gated
  product linearly); :func:`permute_mlp`: one hidden-unit permutation of Gate/Up rows and Down columns.
- :func:`permute_heads`: a permutation of the KV heads (with their query groups) and of the query
  heads within each group.

:func:`random_gauge` draws all of them at once from a ``torch.Generator``. The proofs that these maps
(and only these, for the Llama family) are exact live in ``proofs/`` (issue 31, item 1).

Example:
    >>> g = torch.Generator().manual_seed(0)
    >>> shape = GaugeShape(n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4)
    >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=5, generator=g)
    >>> moved = random_gauge(sd, shape, g, condition=10.0, sigma=0.5)
    >>> sorted(set(sd) ^ set(moved)), moved["model.norm.weight"].tolist() == [1.0] * 8
    ([], True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from geodrift.errors import GeodriftError

StateDict = dict[str, torch.Tensor]

EMBED, LM_HEAD, FINAL_NORM = "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"
ATTN_INPUTS = ("q_proj", "k_proj", "v_proj")  # read the attention input norm
MLP_INPUTS = ("gate_proj", "up_proj")  # read the MLP input norm


def layer_key(layer: int, name: str) -> str:
    """The HF name of a layer's tensor: ``q_proj``..``o_proj`` (self_attn), ``gate_proj``..``down_proj`` (mlp),
    ``input_layernorm`` / ``post_attention_layernorm``.

    Example:
        >>> layer_key(3, "up_proj")
        'model.layers.3.mlp.up_proj.weight'
    """
    if name.endswith("layernorm"):
        return f"model.layers.{layer}.{name}.weight"
    block = "self_attn" if name in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return f"model.layers.{layer}.{block}.{name}.weight"


@dataclass(frozen=True)
class GaugeShape:
    """The shape facts a gauge needs: layers, heads, KV heads (GQA), head size (even: RoPE pairs).

    Example:
        >>> GaugeShape(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8).group
        2
    """

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise GeodriftError(f"gauge shape: n_heads={self.n_heads} must be a multiple of n_kv_heads="
                                f"{self.n_kv_heads} and head_dim={self.head_dim} even (RoPE pairs)")

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    @property
    def pairs(self) -> int:
        """RoPE frequency pairs per head."""
        return self.head_dim // 2

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GaugeShape:
        """From a checkpoint's normalised ``config`` (``n_layers, n_heads, n_kv_heads, head_dim, d_model``)."""
        n_heads = int(config["n_heads"])
        head_dim = int(config.get("head_dim") or int(config["d_model"]) // n_heads)
        return cls(int(config["n_layers"]), n_heads, int(config.get("n_kv_heads") or n_heads), head_dim)

    @classmethod
    def from_model(cls, model: Any) -> GaugeShape:
        """From a :class:`~geodrift.lm.llama.LlamaLM` (its ``n_layers``, ``n_heads``, ``n_kv_heads``, ``head_dim``)."""
        return cls(int(model.n_layers), int(model.n_heads), int(model.n_kv_heads), int(model.head_dim))

    def head_rows(self, head: int, pair: int | None = None) -> torch.Tensor:
        """Row indices of ``head`` in Q (a query head) or K/V (a KV head); only ``pair``'s two rows if given.

        Example:
            >>> GaugeShape(1, 2, 1, 4).head_rows(1, pair=0).tolist()
            [4, 6]
        """
        start = head * self.head_dim
        if pair is None:
            return torch.arange(start, start + self.head_dim)
        return torch.tensor([start + pair, start + pair + self.pairs])


def _copy(sd: StateDict) -> StateDict:
    # shallow: every generator replaces the tensors it changes with new ones, never writes into the input's
    return dict(sd)


def fold_gains(sd: StateDict, shape: GaugeShape, *, in_place: bool = False) -> StateDict:
    """Fold every RMSNorm gain into the projections that read it; gains become 1.

    Q, K, V take ``input_layernorm``, Gate and Up ``post_attention_layernorm``, ``lm_head``
    ``model.norm`` (as :mod:`geodrift.scanner.fold` does for the scan's folded view). A tied head (no
    ``lm_head.weight``, or the same values as the embedding) becomes an untied one.

    Args:
        sd: a Llama state dict (HF names).
        shape: its :class:`GaugeShape`.
        in_place: replace ``sd``'s tensors in ``sd`` itself (each old tensor freed as soon as it is replaced,
            where nothing else holds it) instead of a new dict.

    Returns:
        A new state dict (``sd`` when ``in_place``) with ``lm_head.weight`` always present and every gain equal to 1.

    Raises:
        GeodriftError: when a norm or projection is missing.
    """
    out = sd if in_place else _copy(sd)
    if LM_HEAD not in out:
        out[LM_HEAD] = out[EMBED].clone()
    for layer in range(shape.n_layers):
        for norm, readers in (("input_layernorm", ATTN_INPUTS), ("post_attention_layernorm", MLP_INPUTS)):
            gain = _get(out, layer_key(layer, norm))
            for name in readers:
                out[layer_key(layer, name)] = _get(out, layer_key(layer, name)) * gain.reshape(1, -1)
            out[layer_key(layer, norm)] = torch.ones_like(gain)
    gain = _get(out, FINAL_NORM)
    out[LM_HEAD] = out[LM_HEAD] * gain.reshape(1, -1)
    out[FINAL_NORM] = torch.ones_like(gain)
    return out


def _get(sd: StateDict, key: str) -> torch.Tensor:
    if key not in sd:
        raise GeodriftError(f"state dict has no {key!r}; the gauge maps need a Llama-family state dict with HF names")
    return sd[key]


def gains_folded(sd: StateDict, shape: GaugeShape) -> bool:
    """Whether every RMSNorm gain is exactly 1 (the residual stream's group is then O(d))."""
    keys = [FINAL_NORM] + [layer_key(l, n) for l in range(shape.n_layers)
                           for n in ("input_layernorm", "post_attention_layernorm")]
    return all(bool((_get(sd, k) == 1).all()) for k in keys)


def rotate_residual(sd: StateDict, shape: GaugeShape, rotation: torch.Tensor, *, in_place: bool = False
                    ) -> StateDict:
    """Rotate the residual stream by an orthogonal ``rotation`` (d_model x d_model).

    Args:
        sd: a state dict with folded gains (:func:`fold_gains`) and an ``lm_head.weight``.
        shape: its :class:`GaugeShape`.
        rotation: ``R`` with ``R R^T = I``.
        in_place: as :func:`fold_gains`'s.

    Returns:
        The new state dict (``sd`` when ``in_place``): the stream ``h`` of the new network is ``R h`` of the old.

    Raises:
        GeodriftError: when a gain is not 1 (a gain does not commute with a rotation) or the head is tied.
    """
    if not gains_folded(sd, shape) or LM_HEAD not in sd:
        raise GeodriftError("rotate_residual needs folded gains and an untied lm_head: call fold_gains first")
    out = sd if in_place else _copy(sd)
    rt = rotation.T.to(sd[EMBED].dtype)
    out[EMBED] = out[EMBED] @ rt
    out[LM_HEAD] = out[LM_HEAD] @ rt
    for layer in range(shape.n_layers):
        for name in ATTN_INPUTS + MLP_INPUTS:
            out[layer_key(layer, name)] = out[layer_key(layer, name)] @ rt
        for name in ("o_proj", "down_proj"):
            out[layer_key(layer, name)] = rt.T @ out[layer_key(layer, name)]
    return out


def transform_vo(sd: StateDict, shape: GaugeShape, layer: int, kv: int, matrix: torch.Tensor) -> StateDict:
    """V's rows of KV head ``kv`` times ``matrix`` (``B``), O's columns of its query heads times ``B^-1``.

    Args:
        sd: a Llama state dict; shape: its :class:`GaugeShape`; layer: the layer.
        kv: the KV head; matrix: an invertible ``(head_dim, head_dim)`` ``B``.

    Returns:
        The new state dict.
    """
    out = _copy(sd)
    v_key, o_key = layer_key(layer, "v_proj"), layer_key(layer, "o_proj")
    out[v_key], out[o_key] = out[v_key].clone(), out[o_key].clone()
    b = matrix.to(out[v_key].dtype)
    rows = shape.head_rows(kv)
    out[v_key][rows] = b @ out[v_key][rows]
    inverse = torch.linalg.inv(b)
    for q in range(kv * shape.group, (kv + 1) * shape.group):
        cols = shape.head_rows(q)  # query head q's columns of O
        out[o_key][:, cols] = out[o_key][:, cols] @ inverse
    return out


def transform_qk(sd: StateDict, shape: GaugeShape, layer: int, kv: int, pair: int, r: float,
                 phi: float) -> StateDict:
    """``r R(phi)`` on frequency pair ``pair`` of every query head of KV group ``kv``, ``(1/r) R(phi)`` on K's.

    Args:
        sd: a Llama state dict (HF half-split rotary rows); shape: its :class:`GaugeShape`.
        layer, kv, pair: where; ``pair`` in ``[0, head_dim / 2)``.
        r: a positive scale; phi: an angle.

    Returns:
        The new state dict.
    """
    scales = torch.ones(shape.pairs, dtype=torch.float64)
    angles = torch.zeros(shape.pairs, dtype=torch.float64)
    scales[pair], angles[pair] = r, phi
    return transform_qk_all(sd, shape, layer, kv, scales, angles)


def scale_mlp(sd: StateDict, layer: int, scales: torch.Tensor) -> StateDict:
    """Up row ``j`` times ``scales[j]`` and Down column ``j`` divided by it (``scales`` positive or not: exact
    for any nonzero value, since Up enters the gated product linearly).

    Returns:
        The new state dict.
    """
    out = _copy(sd)
    up, down = layer_key(layer, "up_proj"), layer_key(layer, "down_proj")
    s = scales.to(out[up].dtype)
    out[up] = out[up] * s.reshape(-1, 1)
    out[down] = out[down] / s.reshape(1, -1)
    return out


def permute_mlp(sd: StateDict, layer: int, perm: torch.Tensor) -> StateDict:
    """Hidden unit ``perm[j]`` becomes unit ``j``: Gate/Up rows and Down columns reindexed by ``perm``.

    Returns:
        The new state dict.
    """
    out = _copy(sd)
    for name in MLP_INPUTS:
        out[layer_key(layer, name)] = out[layer_key(layer, name)][perm]
    down = layer_key(layer, "down_proj")
    out[down] = out[down][:, perm]
    return out


def permute_heads(sd: StateDict, shape: GaugeShape, layer: int, kv_perm: torch.Tensor,
                  q_perms: torch.Tensor) -> StateDict:
    """Reorder the heads of ``layer``: KV head ``kv_perm[i]`` becomes KV head ``i`` (its K and V rows, and its
    query group's Q rows and O columns move with it), and within each new group ``i`` query head
    ``q_perms[i, j]`` (an index inside the group) becomes its ``j``-th.

    Args:
        sd: a Llama state dict; shape: its :class:`GaugeShape`; layer: the layer.
        kv_perm: ``(n_kv_heads,)`` permutation; q_perms: ``(n_kv_heads, group)`` permutations.

    Returns:
        The new state dict.

    Example:
        >>> shape = GaugeShape(1, 2, 1, 2)
        >>> sd = {layer_key(0, n): torch.arange(2.0).reshape(2, 1) for n in ("k_proj", "v_proj")}
        >>> sd[layer_key(0, "q_proj")], sd[layer_key(0, "o_proj")] = torch.arange(4.0).reshape(4, 1), torch.eye(4)
        >>> moved = permute_heads(sd, shape, 0, torch.tensor([0]), torch.tensor([[1, 0]]))
        >>> moved[layer_key(0, "q_proj")].flatten().tolist(), moved[layer_key(0, "k_proj")].flatten().tolist()
        ([2.0, 3.0, 0.0, 1.0], [0.0, 1.0])
    """
    out = _copy(sd)
    kv_rows = torch.cat([shape.head_rows(int(h)) for h in kv_perm])
    q_heads = [int(kv_perm[i]) * shape.group + int(q_perms[i, j])
               for i in range(shape.n_kv_heads) for j in range(shape.group)]
    q_rows = torch.cat([shape.head_rows(h) for h in q_heads])
    for name, rows in (("k_proj", kv_rows), ("v_proj", kv_rows), ("q_proj", q_rows)):
        out[layer_key(layer, name)] = out[layer_key(layer, name)][rows]
    out[layer_key(layer, "o_proj")] = out[layer_key(layer, "o_proj")][:, q_rows]
    return out


def random_orthogonal(n: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A Haar-random ``(n, n)`` orthogonal matrix (QR of a Gaussian, signs fixed).

    Example:
        >>> q = random_orthogonal(4, torch.Generator().manual_seed(0))
        >>> bool(torch.allclose(q @ q.T, torch.eye(4, dtype=q.dtype)))
        True
    """
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r)).reshape(1, -1)).to(dtype)


def random_conditioned(n: int, condition: float, generator: torch.Generator) -> torch.Tensor:
    """A random invertible ``(n, n)`` float64 matrix with condition number exactly ``condition``
    (``U diag(s) V^T``, singular values log-spaced from 1 to ``condition``, U and V Haar-random).

    Example:
        >>> b = random_conditioned(5, 30.0, torch.Generator().manual_seed(0))
        >>> round(float(torch.linalg.cond(b)), 6)
        30.0
    """
    singular = torch.logspace(0.0, math.log10(condition), n, dtype=torch.float64) if n > 1 else torch.ones(1, dtype=torch.float64)
    return random_orthogonal(n, generator) @ torch.diag(singular) @ random_orthogonal(n, generator).T


GENERATORS: tuple[str, ...] = ("fold", "rotate", "vo", "qk", "mlp_scale", "mlp_permute", "head_permute")


def random_gauge(sd: StateDict, shape: GaugeShape, generator: torch.Generator, *, condition: float = 100.0,
                 sigma: float = 1.0, generators: tuple[str, ...] | frozenset[str] = GENERATORS) -> StateDict:
    """The chosen generators (default: all of :data:`GENERATORS`) at once, drawn from ``generator``.

    ``fold``: :func:`fold_gains`; ``rotate``: a Haar-random residual rotation (folds the gains first
    whether or not ``fold`` is chosen: it needs them); ``vo``: per KV head a ``B`` of condition number
    ``condition`` (log-spaced singular values, Haar-random singular vectors); ``qk``: per KV head and
    RoPE pair ``r R(phi)`` with ``log r ~ N(0, sigma^2)`` and ``phi`` uniform on ``[0, 2 pi)``;
    ``mlp_scale``: per hidden unit ``s = +-exp(N(0, sigma^2))``, each sign uniform (Up enters the gated product
    linearly, so a negative ``s`` is exact too); ``mlp_permute``: a uniform hidden-unit
    permutation per layer; ``head_permute``: uniform permutations of the KV heads and of the query
    heads within each group, per layer (:func:`permute_heads`).

    Args:
        sd: a Llama state dict (HF names; tied or untied head).
        shape: its :class:`GaugeShape`.
        generator: the randomness (the draws happen in a fixed order: the same seed gives the same map).
        condition: V/O's condition number (1: an orthogonal ``B``).
        sigma: the log-scale spread of Q/K and Up/Down.
        generators: which generators to apply.

    Returns:
        A new state dict computing the same function (gains 1 and ``lm_head`` untied if folded).

    Raises:
        GeodriftError: an unknown generator name.

    Example:
        >>> shape = GaugeShape(1, 2, 2, 4)
        >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=5, generator=torch.Generator())
        >>> moved = random_gauge(sd, shape, torch.Generator().manual_seed(1), generators=("vo",))
        >>> [k for k in sd if not torch.equal(sd[k], moved[k])]
        ['model.layers.0.self_attn.v_proj.weight', 'model.layers.0.self_attn.o_proj.weight']
    """
    unknown = set(generators) - set(GENERATORS)
    if unknown:
        raise GeodriftError(f"unknown gauge generator(s) {sorted(unknown)}; choose from {', '.join(GENERATORS)}")
    out = fold_gains(sd, shape) if {"fold", "rotate"} & set(generators) else dict(sd)
    dtype = out[EMBED].dtype
    if "rotate" in generators:
        out = rotate_residual(out, shape, random_orthogonal(out[EMBED].shape[1], generator, dtype))
    for layer in range(shape.n_layers):
        for kv in range(shape.n_kv_heads):
            if "vo" in generators:
                out = transform_vo(out, shape, layer, kv, random_conditioned(shape.head_dim, condition, generator))
            if "qk" in generators:
                logr = torch.randn(shape.pairs, generator=generator, dtype=torch.float64) * sigma
                phis = torch.rand(shape.pairs, generator=generator, dtype=torch.float64) * 2 * math.pi
                out = transform_qk_all(out, shape, layer, kv, logr.exp(), phis)
        d_ff = out[layer_key(layer, "up_proj")].shape[0]
        if "mlp_scale" in generators:
            magnitude = (torch.randn(d_ff, generator=generator, dtype=torch.float64) * sigma).exp()
            sign = torch.randint(0, 2, (d_ff,), generator=generator).to(torch.float64) * 2 - 1
            out = scale_mlp(out, layer, magnitude * sign)
        if "mlp_permute" in generators:
            out = permute_mlp(out, layer, torch.randperm(d_ff, generator=generator))
        if "head_permute" in generators:
            kv_perm = torch.randperm(shape.n_kv_heads, generator=generator)
            q_perms = torch.stack([torch.randperm(shape.group, generator=generator) for _ in range(shape.n_kv_heads)])
            out = permute_heads(out, shape, layer, kv_perm, q_perms)
    return out


def transform_qk_all(sd: StateDict, shape: GaugeShape, layer: int, kv: int, r: torch.Tensor,
                     phi: torch.Tensor) -> StateDict:
    """:func:`transform_qk` for every pair of KV group ``kv`` at once (``r``, ``phi``: ``(head_dim / 2,)``).

    Returns:
        The new state dict.
    """
    out = _copy(sd)
    q_key, k_key = layer_key(layer, "q_proj"), layer_key(layer, "k_proj")
    out[q_key], out[k_key] = out[q_key].clone(), out[k_key].clone()
    dtype = out[q_key].dtype
    c, s = phi.cos().to(dtype), phi.sin().to(dtype)
    r = r.to(dtype)

    def apply(weight: torch.Tensor, head: int, scale: torch.Tensor) -> None:
        lo = slice(head * shape.head_dim, head * shape.head_dim + shape.pairs)
        hi = slice(head * shape.head_dim + shape.pairs, (head + 1) * shape.head_dim)
        a, b = weight[lo].clone(), weight[hi].clone()
        weight[lo] = scale.reshape(-1, 1) * (c.reshape(-1, 1) * a - s.reshape(-1, 1) * b)
        weight[hi] = scale.reshape(-1, 1) * (s.reshape(-1, 1) * a + c.reshape(-1, 1) * b)

    apply(out[k_key], kv, 1.0 / r)
    for q in range(kv * shape.group, (kv + 1) * shape.group):
        apply(out[q_key], q, r)
    return out


def toy_state_dict(shape: GaugeShape, d_model: int, d_ff: int, vocab: int, generator: torch.Generator,
                   dtype: torch.dtype = torch.float64) -> StateDict:
    """A random Llama state dict of the given shape (gains drawn around 1, untied head), for examples and tests.

    Example:
        >>> sd = toy_state_dict(GaugeShape(1, 2, 1, 4), d_model=8, d_ff=6, vocab=5, generator=torch.Generator())
        >>> tuple(sd[layer_key(0, "k_proj")].shape)
        (4, 8)
    """
    def draw(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=generator, dtype=dtype) / math.sqrt(size[-1])

    sd = {EMBED: draw(vocab, d_model), LM_HEAD: draw(vocab, d_model), FINAL_NORM: 1 + 0.3 * draw(d_model)}
    width_q, width_kv = shape.n_heads * shape.head_dim, shape.n_kv_heads * shape.head_dim
    for layer in range(shape.n_layers):
        sd[layer_key(layer, "q_proj")] = draw(width_q, d_model)
        sd[layer_key(layer, "k_proj")] = draw(width_kv, d_model)
        sd[layer_key(layer, "v_proj")] = draw(width_kv, d_model)
        sd[layer_key(layer, "o_proj")] = draw(d_model, width_q)
        sd[layer_key(layer, "gate_proj")] = draw(d_ff, d_model)
        sd[layer_key(layer, "up_proj")] = draw(d_ff, d_model)
        sd[layer_key(layer, "down_proj")] = draw(d_model, d_ff)
        sd[layer_key(layer, "input_layernorm")] = 1 + 0.3 * draw(d_model)
        sd[layer_key(layer, "post_attention_layernorm")] = 1 + 0.3 * draw(d_model)
    return sd
