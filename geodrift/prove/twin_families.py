"""Numeric twins on the families outside ``orbit``: Gemma 2/3, GPT-2, Mixtral (transformers, float64) and
the simulators' residual MLP. Each function returns ``{name: ("exact" | "broken", moved state dict)}``.
"""

from __future__ import annotations

from typing import Any

import torch

from geodrift.gauge import orbit
from geodrift.gauge.orbit import GaugeShape
from geodrift.prove import hf_maps as hm
from geodrift.prove.hf_models import HEAD_DIM, HEADS, KV_HEADS, LAYERS, WIDTH
from geodrift.prove.symmetry import orthogonal_qr
from geodrift.prove.twins import StateDict, conditioned, orthogonal_fixing_ones

Maps = dict[str, tuple[str, StateDict]]
SHAPE = GaugeShape(LAYERS, HEADS, KV_HEADS, HEAD_DIM)


def _state(model: torch.nn.Module) -> StateDict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _signed_permutation(d: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.randperm(d, generator=generator)
    signs = torch.where(torch.rand(d, generator=generator) < 0.5, -1.0, 1.0).double()
    return torch.diag(signs) @ torch.eye(d, dtype=torch.float64)[perm], perm


def gemma_residual(model: torch.nn.Module, generator: torch.Generator) -> Maps:
    """Sandwich norms: signed permutations (gains permuted) exact; a rotation after folding the pre-norm
    gains broken; the same rotation exact once the post-norm and final gains are uniform (control).
    The model's final gain must be uniform (the caller sets it) so the break is the sandwich's."""
    sd = _state(model)
    signed, perm = _signed_permutation(WIDTH, generator)
    rot = orthogonal_qr(WIDTH, generator)
    folded = hm.gemma_fold_pre_gains(sd)
    return {
        "residual.signed_permutation": ("exact", hm.gemma_residual(sd, signed, perm)),
        "residual.rotation_through_sandwich": ("broken", hm.gemma_residual(folded, rot)),
    }


def gemma_control(model: torch.nn.Module, generator: torch.Generator) -> Maps:
    """The rotation of :func:`gemma_residual` on a copy whose post-norm gains are uniform: exact."""
    sd = _state(model)
    return {"residual.rotation_uniform_post_gains": ("exact", hm.gemma_residual(
        hm.gemma_fold_pre_gains(sd), orthogonal_qr(WIDTH, generator)))}


def gemma_attention(model: torch.nn.Module, generator: torch.Generator, qk_norm: bool) -> Maps:
    """V/O per KV head and head permutations (orbit, Gemma names); with q/k norms (Gemma 3): a sign per
    pair exact, a rotation per pair broken, the gains' scale per pair exact."""
    sd = _state(model)
    last = LAYERS - 1
    maps: Maps = {"attention.vo_per_kv_head": ("exact", orbit.transform_vo(
        sd, SHAPE, last, 0, conditioned(HEAD_DIM, 100.0, generator, torch.float64)))}
    rot = torch.tensor([[0.6, -0.8], [0.8, 0.6]], dtype=torch.float64)
    flip = -torch.eye(2, dtype=torch.float64)
    if not qk_norm:
        r = (torch.randn(SHAPE.pairs, generator=generator, dtype=torch.float64) * 0.75).exp()
        phi = torch.rand(SHAPE.pairs, generator=generator, dtype=torch.float64) * 6.283185307179586
        maps["attention.qk_rope_commutant"] = ("exact", orbit.transform_qk_all(sd, SHAPE, last, 0, r, phi))
        return maps
    args = (SHAPE.n_heads, SHAPE.n_kv_heads, HEAD_DIM)
    maps["attention.qk_norm_pair_sign"] = ("exact", hm.qk_pair_map(sd, last, 0, 1, flip, flip, *args))
    maps["attention.qk_norm_pair_rotation"] = ("broken", hm.qk_pair_map(sd, last, 0, 1, rot, rot, *args))
    scaled = dict(sd)
    rho = 1.7
    for name, factor in (("q_norm", rho), ("k_norm", 1 / rho)):
        key = f"model.layers.{last}.self_attn.{name}.weight"
        w = sd[key].clone()
        rows = torch.tensor([1, 1 + HEAD_DIM // 2])
        w[rows] = (1 + w[rows]) * factor - 1
        scaled[key] = w
    maps["attention.qk_norm_gain_scale"] = ("exact", scaled)
    return maps


def gemma_qk_control(model: torch.nn.Module) -> Maps:
    """The pair rotation of :func:`gemma_attention` with uniform q/k norm gains: exact (control)."""
    sd = _state(model)
    rot = torch.tensor([[0.6, -0.8], [0.8, 0.6]], dtype=torch.float64)
    return {"attention.qk_norm_pair_rotation_uniform_gains": ("exact", hm.qk_pair_map(
        sd, LAYERS - 1, 0, 1, rot, rot, SHAPE.n_heads, SHAPE.n_kv_heads, HEAD_DIM))}


def gpt2_residual(model: torch.nn.Module, generator: torch.Generator) -> Maps:
    """LayerNorm: after folding the gains, ``R`` with ``R 1 = 1`` exact, translations along ``1`` exact,
    a Haar-random ``R`` broken."""
    folded = hm.gpt2_fold_gains(_state(model))
    return {
        "residual.layernorm_rotation_fixing_ones": ("exact", hm.gpt2_rotate(folded, orthogonal_fixing_ones(WIDTH, generator))),
        "residual.layernorm_reflection_ones_to_minus": ("exact", hm.gpt2_rotate(
            folded, -orthogonal_fixing_ones(WIDTH, generator))),
        "residual.layernorm_translation_ones": ("exact", hm.gpt2_translate(_state(model), generator)),
        "residual.layernorm_generic_rotation": ("broken", hm.gpt2_rotate(folded, orthogonal_qr(WIDTH, generator))),
    }


def gpt2_attention(model: torch.nn.Module, generator: torch.Generator) -> Maps:
    """No RoPE: any ``A`` on a head's q and ``A^-T`` on its k (with the biases) exact, ``A`` on both broken;
    ``B`` on v (and bias) with ``B^-T`` on ``c_proj``'s rows of the head exact."""
    sd = _state(model)
    a = conditioned(HEAD_DIM, 30.0, generator, torch.float64)
    b = conditioned(HEAD_DIM, 100.0, generator, torch.float64)
    inv_t = torch.linalg.inv(a).T
    return {
        "attention.qk_general_without_rope": ("exact", hm.gpt2_map_head(sd, LAYERS - 1, 1, HEAD_DIM, q=a, k=inv_t)),
        "attention.qk_same_map_on_both": ("broken", hm.gpt2_map_head(sd, LAYERS - 1, 1, HEAD_DIM, q=a, k=a)),
        "attention.vo_per_head": ("exact", hm.gpt2_map_head(sd, LAYERS - 1, 1, HEAD_DIM, v=b,
                                                            o=torch.linalg.inv(b).T)),
    }


def gpt2_mlp(model: torch.nn.Module, generator: torch.Generator, activation: str) -> Maps:
    """Plain MLP units: permutations always; positive scalings exact for ReLU only; signs for tanh only."""
    sd = _state(model)
    d_ff = sd[f"{hm.GPT2}0.mlp.c_fc.bias"].shape[0]
    positive = torch.rand(d_ff, generator=generator, dtype=torch.float64) * 3 + 0.2
    signs = torch.where(torch.rand(d_ff, generator=generator) < 0.5, -1.0, 1.0).double()
    signs[0] = -1.0
    maps: Maps = {f"mlp.{activation}.permutation": ("exact", hm.gpt2_scale_units(
        sd, LAYERS - 1, torch.ones(d_ff, dtype=torch.float64), torch.randperm(d_ff, generator=generator)))}
    maps[f"mlp.{activation}.positive_scaling"] = ("exact" if activation == "relu" else "broken",
                                                  hm.gpt2_scale_units(sd, LAYERS - 1, positive))
    maps[f"mlp.{activation}.sign_flip"] = ("exact" if activation == "tanh" else "broken",
                                           hm.gpt2_scale_units(sd, LAYERS - 1, signs))
    return maps


def mixtral_maps(model: Any, generator: torch.Generator) -> Maps:
    """Experts permuted with the router's rows, a router shift, one expert's Up/Down scaling and unit
    permutation: exact; the router scaled, an expert's Gate rows scaled: broken."""
    sd = _state(model)
    last = LAYERS - 1
    n_experts, d_ff = model.config.num_local_experts, model.config.intermediate_size
    router = f"{hm.moe_prefix(last)}gate.weight"
    shifted, scaled_router = dict(sd), dict(sd)
    shifted[router] = sd[router] + torch.randn(1, WIDTH, generator=generator, dtype=torch.float64) * 3
    scaled_router[router] = sd[router] * 2
    s = torch.randn(d_ff, generator=generator, dtype=torch.float64).exp()
    return {
        "experts.expert_permutation": ("exact", hm.mixtral_permute_experts(
            sd, last, torch.randperm(n_experts, generator=generator))),
        "experts.router_shift": ("exact", shifted),
        "experts.expert_up_down_scaling": ("exact", hm.mixtral_expert_units(
            sd, last, 1, up=-s, perm=torch.randperm(d_ff, generator=generator))),
        "experts.router_scaling": ("broken", scaled_router),
        "experts.expert_gate_scaling": ("broken", hm.mixtral_expert_units(sd, last, 1, gate=s)),
    }


def residual_mlp_maps(model: torch.nn.Module, activation: str, generator: torch.Generator) -> Maps:
    """The simulators' ``h + act(W h)``: conjugation ``E -> G E``, ``W -> G W G^-1``, ``H -> H G^-1`` by a
    positive diagonal (exact for ReLU), a permutation (exact always), a sign flip (exact for tanh)."""
    sd = _state(model)
    d = sd["embed"].shape[1]

    def conjugate(g: torch.Tensor) -> StateDict:
        g = g.to(sd["embed"].dtype)
        inv = torch.linalg.inv(g)
        return {**sd, "embed": g @ sd["embed"], "blocks": g @ sd["blocks"] @ inv, "head": sd["head"] @ inv}

    positive = torch.diag(torch.rand(d, generator=generator, dtype=torch.float64) * 3 + 0.2)
    perm = torch.eye(d, dtype=torch.float64)[torch.randperm(d, generator=generator)]
    signs = torch.diag(torch.where(torch.arange(d) % 2 == 0, -1.0, 1.0).double())
    return {
        f"sim_mlp.{activation}.positive_diagonal": ("exact" if activation == "relu" else "broken", conjugate(positive)),
        f"sim_mlp.{activation}.permutation": ("exact", conjugate(perm)),
        f"sim_mlp.{activation}.sign_flip": ("exact" if activation == "tanh" else "broken", conjugate(signs)),
    }
