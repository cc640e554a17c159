"""Numeric twins on the Llama family through :mod:`geodrift.gauge.orbit`: the embedded SmolLM2 (real
weights, geodrift's own forward), a small simulator Llama, and a Qwen2 (transformers; q/k/v biases).

Exact maps come from ``orbit`` (fold, rotate, V/O, Q/K per RoPE pair, Up/Down, permutations); the
non-symmetries are built here from the same pieces: a rotation of one plane with the gains kept, a V/O map undone
on only one query head of its group, a generic ``A`` / ``A^-T`` on Q/K that ignores RoPE, Gate rows
scaled through SiLU.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import torch

from geodrift.gauge import orbit
from geodrift.gauge.orbit import GaugeShape, layer_key
from geodrift.lm.llama import LlamaLM
from geodrift.prove.twins import StateDict, conditioned


@functools.lru_cache(maxsize=1)
def smollm2() -> LlamaLM:
    """The embedded SmolLM2-135M in geodrift's Llama (float32; loaded once per process)."""
    from geodrift.pretrained import llama_from_checkpoint, open_llama

    return llama_from_checkpoint(open_llama(None)).eval()


def untied(model: LlamaLM) -> LlamaLM:
    """A copy of ``model`` with its own ``lm_head`` (folding the final gain unties a tied head)."""
    out = copy.deepcopy(model)
    if out.tie_embeddings:
        out.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
        out.tie_embeddings = False
    return out


def full_state(model: torch.nn.Module) -> StateDict:
    """The state dict with ``lm_head.weight`` present (a tied head's values copied)."""
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    sd.setdefault(orbit.LM_HEAD, sd[orbit.EMBED])
    return sd


def rotate_plane_keeping_gains(sd: StateDict, shape: GaugeShape, plane: tuple[int, int]) -> StateDict:
    """The residual map of ``orbit.rotate_residual`` for the 3-4-5 rotation of one coordinate plane, while
    the RMSNorm gains stay (not a symmetry where the two gains differ). Only the plane's two columns of
    the readers, embedding and head and two rows of the writers change, so it is cheap on a real model."""
    g = torch.tensor([[0.6, -0.8], [0.8, 0.6]], dtype=sd[orbit.EMBED].dtype)
    idx = torch.tensor(plane)
    out = dict(sd)

    def columns(key: str) -> None:
        w = sd[key].clone()
        w[:, idx] = sd[key][:, idx] @ g.T
        out[key] = w

    for key in (orbit.EMBED, orbit.LM_HEAD):
        columns(key)
    for layer in range(shape.n_layers):
        for name in orbit.ATTN_INPUTS + orbit.MLP_INPUTS:
            columns(layer_key(layer, name))
        for name in ("o_proj", "down_proj"):
            key = layer_key(layer, name)
            w = sd[key].clone()
            w[idx] = g @ sd[key][idx]
            out[key] = w
    return out


def vo_one_query_head(sd: StateDict, shape: GaugeShape, layer: int, matrix: torch.Tensor) -> StateDict:
    """``orbit.transform_vo`` on KV head 0, then query head 0's O columns put back (not a symmetry
    when the group has another head: V is shared, so one ``B`` serves the whole group)."""
    out = orbit.transform_vo(sd, shape, layer, 0, matrix)
    o_key = layer_key(layer, "o_proj")
    cols = shape.head_rows(0)
    out[o_key] = out[o_key].clone()
    out[o_key][:, cols] = sd[o_key][:, cols]
    return out


def qk_ignoring_rope(sd: StateDict, shape: GaugeShape, layer: int, matrix: torch.Tensor) -> StateDict:
    """A generic ``A`` on the Q rows of KV group 0 and ``A^-T`` on K's (exact without RoPE, not with it)."""
    out = dict(sd)
    q_key, k_key = layer_key(layer, "q_proj"), layer_key(layer, "k_proj")
    out[q_key], out[k_key] = sd[q_key].clone(), sd[k_key].clone()
    a = matrix.to(sd[q_key].dtype)
    rows = shape.head_rows(0)
    out[k_key][rows] = torch.linalg.inv(a).T @ sd[k_key][rows]
    for q in range(shape.group):
        out[q_key][shape.head_rows(q)] = a @ sd[q_key][shape.head_rows(q)]
    return out


def scale_gate(sd: StateDict, layer: int, scales: torch.Tensor) -> StateDict:
    """Gate row ``j`` times ``scales[j]``, Down column ``j`` divided by it (exact only for a positively
    homogeneous activation with positive scales: ReLU)."""
    out = dict(sd)
    gate, down = layer_key(layer, "gate_proj"), layer_key(layer, "down_proj")
    s = scales.to(sd[gate].dtype)
    out[gate], out[down] = sd[gate] * s[:, None], sd[down] / s[None, :]
    return out


def with_biases(sd: StateDict, moved_weights: StateDict, layer: int, names: tuple[str, ...],
                apply: Callable[[StateDict], StateDict]) -> StateDict:
    """Carry a Q/K/V map over to the biases (Qwen2): ``apply`` (a state-dict map) run on the biases as
    one-column weights, then written back as ``<name>.bias``."""
    out = dict(moved_weights)
    as_cols = dict(sd)
    for name in names:
        bias_key = layer_key(layer, name).replace(".weight", ".bias")
        as_cols[layer_key(layer, name)] = sd[bias_key][:, None]
    mapped = apply(as_cols)
    for name in names:
        bias_key = layer_key(layer, name).replace(".weight", ".bias")
        out[bias_key] = mapped[layer_key(layer, name)][:, 0]
    return out


Thunks = dict[str, tuple[str, Callable[[], StateDict]]]


def llama_maps(sd: StateDict, shape: GaugeShape, generator: torch.Generator) -> Thunks:
    """Every map tested on a Llama-named state dict: name -> (``"exact"`` | ``"broken"``, a function
    building the moved dict). The random draws happen here, in a fixed order; the dicts when called."""
    dtype = sd[orbit.EMBED].dtype
    d = sd[orbit.EMBED].shape[1]
    rot = orbit.random_orthogonal(d, generator, dtype)
    first, second = (int(i) for i in torch.randperm(d, generator=generator)[:2])
    plane = (first, second)
    last = shape.n_layers - 1
    b = conditioned(shape.head_dim, 100.0, generator, torch.float64)
    a = conditioned(shape.head_dim, 10.0, generator, torch.float64)
    r = (torch.randn(shape.pairs, generator=generator, dtype=torch.float64) * 0.75).exp()
    phi = torch.rand(shape.pairs, generator=generator, dtype=torch.float64) * 6.283185307179586
    d_ff = sd[layer_key(0, "up_proj")].shape[0]
    s = torch.randn(d_ff, generator=generator, dtype=torch.float64).exp()
    signed = s * torch.where(torch.arange(d_ff) % 2 == 0, 1.0, -1.0).double()
    kv_perm = torch.randperm(shape.n_kv_heads, generator=generator)
    q_perms = torch.stack([torch.randperm(shape.group, generator=generator) for _ in range(shape.n_kv_heads)])
    unit_perm = torch.randperm(d_ff, generator=generator)
    return {
        "residual.rotation_folded": ("exact", lambda: orbit.rotate_residual(orbit.fold_gains(sd, shape), shape, rot)),
        "residual.rotation_keeping_gains": ("broken", lambda: rotate_plane_keeping_gains(sd, shape, plane)),
        "attention.vo_per_kv_head": ("exact", lambda: orbit.transform_vo(sd, shape, last, 0, b)),
        "attention.vo_one_query_head": ("broken", lambda: vo_one_query_head(sd, shape, last, b)),
        "attention.qk_rope_commutant": ("exact", lambda: orbit.transform_qk_all(sd, shape, last, 0, r, phi)),
        "attention.qk_ignoring_rope": ("broken", lambda: qk_ignoring_rope(sd, shape, last, a)),
        "attention.head_permutation": ("exact", lambda: orbit.permute_heads(sd, shape, last, kv_perm, q_perms)),
        "mlp.up_down_scaling": ("exact", lambda: orbit.scale_mlp(sd, last, signed)),
        "mlp.permutation": ("exact", lambda: orbit.permute_mlp(sd, last, unit_perm)),
        "mlp.silu.gate_scaling": ("broken", lambda: scale_gate(sd, last, s)),
    }


def qwen2_maps(model: Any, generator: torch.Generator) -> Thunks:
    """Qwen2: the Llama maps with the q/k/v biases carried along (V/O: ``b_v -> B b_v``; Q/K per pair)."""
    config = model.config
    shape = GaugeShape(config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
                       config.hidden_size // config.num_attention_heads)
    sd = full_state(model)
    maps = llama_maps(sd, shape, generator)
    last = shape.n_layers - 1
    b = conditioned(shape.head_dim, 100.0, generator, torch.float64)
    r = (torch.randn(shape.pairs, generator=generator, dtype=torch.float64) * 0.75).exp()
    phi = torch.rand(shape.pairs, generator=generator, dtype=torch.float64) * 6.283185307179586
    vo = orbit.transform_vo(sd, shape, last, 0, b)
    maps["attention.vo_per_kv_head"] = ("exact", lambda: with_biases(
        sd, vo, last, ("v_proj",), lambda m: orbit.transform_vo(m, shape, last, 0, b)))
    maps["attention.qk_rope_commutant"] = ("exact", lambda: with_biases(
        sd, orbit.transform_qk_all(sd, shape, last, 0, r, phi), last, ("q_proj", "k_proj"),
        lambda m: orbit.transform_qk_all(m, shape, last, 0, r, phi)))
    maps["attention.vo_weights_not_bias"] = ("broken", lambda: vo)
    maps.pop("attention.vo_one_query_head")
    maps.pop("attention.head_permutation")  # orbit.permute_heads moves weights only, not Qwen2's biases
    return maps
