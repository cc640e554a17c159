"""The generators that act inside a block: attention heads, MLP units, experts, LayerNorm's biases and ``1``.

Maps of :mod:`geodrift.gauge.generators`' states (see there); :data:`ACTIONS` is every generator of
:data:`geodrift.architectures.GENERATORS` that acts on a state dict (the simulators' residual MLP's are
measured on the model itself, :mod:`geodrift.prove.jacobian_sim`).

Example:
    >>> from geodrift.architectures import GENERATORS
    >>> sorted(set(GENERATORS) - set(ACTIONS))
    ['stream_orthogonal', 'stream_permute', 'stream_positive_scale', 'stream_sign']
"""

from __future__ import annotations

from typing import Any

import torch

from geodrift.gauge.generators import (
    RESIDUAL_ACTIONS,
    Action,
    Key,
    Layout,
    State,
    log_normal,
    map_cols,
    map_rows,
    ones_complement,
    random_conditioned,
    signs,
    with_bias,
)


def _heads(layout: Layout) -> list[tuple[int, int]]:
    # (layer, KV head) in order
    return [(layer, j) for layer in range(layout.sizes["L"]) for j in range(layout.sizes["Hkv"])]


def _vo(state: State, layout: Layout, maps: list[torch.Tensor]) -> State:
    out = dict(state)
    for (layer, j), b in zip(_heads(layout), maps, strict=True):
        map_rows(state, out, ("attn_v", layer), layout.head_rows(j), b)
        inverse = torch.linalg.inv(b)
        for h in range(j * layout.group, (j + 1) * layout.group):
            map_cols(state, out, ("attn_o", layer), layout.head_rows(h), inverse)
    return out


def _square_maps(layout: Layout, theta: torch.Tensor, count: int) -> list[torch.Tensor]:
    hd = layout.sizes["hd"]
    return list(torch.linalg.matrix_exp(theta.reshape(count, hd, hd)).unbind(0))


def _rope(state: State, layout: Layout, params: tuple[torch.Tensor, torch.Tensor]) -> State:
    # per (layer, KV head, pair): r R(phi) on Q's pair rows of the group, R(phi)/r on K's
    out = dict(state)
    log_r, phi = params
    half = layout.sizes["hd"] // 2
    i = 0
    for layer, j in _heads(layout):
        for p in range(half):
            c, s = phi[i].cos(), phi[i].sin()
            rot = torch.stack([torch.stack([c, -s]), torch.stack([s, c])])
            for h in range(j * layout.group, (j + 1) * layout.group):
                map_rows(state, out, ("attn_q", layer), layout.pair_rows(h, p), rot * log_r[i].exp())
            map_rows(state, out, ("attn_k", layer), layout.pair_rows(j, p), rot * (-log_r[i]).exp())
            i += 1
    return out


def _rope_element(layout: Layout, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = theta.reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def _rope_random(state: State, layout: Layout, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    n = layout.sizes["L"] * layout.sizes["Hkv"] * layout.sizes["hd"] // 2
    return (torch.randn(n, generator=generator, dtype=torch.float64) * 1.5,
            torch.rand(n, generator=generator, dtype=torch.float64) * 6.283185307179586)


def _qk_gl(state: State, layout: Layout, maps: list[torch.Tensor]) -> State:
    out = dict(state)
    per_layer = [(layer, h) for layer in range(layout.sizes["L"]) for h in range(layout.sizes["H"])]
    for (layer, h), a in zip(per_layer, maps, strict=True):
        map_rows(state, out, ("attn_q", layer), layout.head_rows(h), a)
        map_rows(state, out, ("attn_k", layer), layout.head_rows(h), torch.linalg.inv(a).T)
    return out


def _head_scale(state: State, layout: Layout, scales: torch.Tensor) -> State:
    # per layer: one scale per query head on Q's rows, one per KV head on K's
    out = dict(state)
    heads, kv, hd = layout.sizes["H"], layout.sizes["Hkv"], layout.sizes["hd"]
    for layer, row in enumerate(scales.reshape(layout.sizes["L"], heads + kv)):
        for kind, values in (("attn_q", row[:heads]), ("attn_k", row[heads:])):
            for k in with_bias(state, (kind, layer)):
                out[k] = state[k] * values.repeat_interleave(hd).reshape((-1,) + (1,) * (state[k].ndim - 1))
    return out


def _qk_scale(state: State, layout: Layout, scales: torch.Tensor) -> State:
    out = dict(state)
    for layer, (cq, ck) in enumerate(scales.reshape(layout.sizes["L"], 2)):
        for kind, c in (("attn_q", cq), ("attn_k", ck)):
            for k in with_bias(state, (kind, layer)):
                out[k] = state[k] * c
    return out


def _gain_pairs(state: State, layout: Layout, rho: torch.Tensor) -> State:
    # a scale per RoPE pair moved between the q-norm and k-norm gains: shared by the heads (gains of head_dim), or
    # per KV head and its query heads (gains over all heads)
    out = dict(state)
    hd, half = layout.sizes["hd"], layout.sizes["hd"] // 2
    rows = rho.reshape(layout.sizes["L"], -1, half)  # (L, 1 or Hkv, half)
    for layer in range(layout.sizes["L"]):
        gq, gk = state[("norm_q", layer)], state[("norm_k", layer)]
        pair = torch.cat([rows[layer], rows[layer]], dim=1)  # (1 or Hkv, hd): both coordinates of each pair
        if gq.numel() == hd:
            out[("norm_q", layer)], out[("norm_k", layer)] = gq * pair[0], gk / pair[0]
        else:
            out[("norm_q", layer)] = gq * pair.repeat_interleave(layout.group, 0).reshape(-1)
            out[("norm_k", layer)] = gk / pair.reshape(-1)
    return out


def _pair_sign(state: State, layout: Layout, flips: torch.Tensor) -> State:
    out = dict(state)
    half = layout.sizes["hd"] // 2
    i = 0
    for layer, j in _heads(layout):
        for p in range(half):
            m = torch.eye(2, dtype=torch.float64) * flips[i]
            for h in range(j * layout.group, (j + 1) * layout.group):
                map_rows(state, out, ("attn_q", layer), layout.pair_rows(h, p), m)
            map_rows(state, out, ("attn_k", layer), layout.pair_rows(j, p), m)
            i += 1
    return out


def _head_permute(state: State, layout: Layout, perms: list[tuple[torch.Tensor, torch.Tensor]]) -> State:
    out = dict(state)
    hd, group = layout.sizes["hd"], layout.group
    within = torch.arange(hd)
    for layer, (kv_perm, q_perms) in enumerate(perms):
        q_heads = (kv_perm.reshape(-1, 1) * group + q_perms).reshape(-1)
        kv_rows = (kv_perm.reshape(-1, 1) * hd + within).reshape(-1)
        q_rows = (q_heads.reshape(-1, 1) * hd + within).reshape(-1)
        for kind, rows in (("attn_q", q_rows), ("attn_k", kv_rows), ("attn_v", kv_rows)):
            for k in with_bias(state, (kind, layer)):
                out[k] = state[k][rows]
        out[("attn_o", layer)] = state[("attn_o", layer)][:, q_rows]
        for norm, rows in (("norm_q", q_rows), ("norm_k", kv_rows)):
            if (norm, layer) in state and state[(norm, layer)].numel() > hd:  # gains over all heads move with them
                out[(norm, layer)] = state[(norm, layer)][rows]
    return out


def _head_perms(state: State, layout: Layout, generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    kv, group = layout.sizes["Hkv"], layout.group
    return [(torch.randperm(kv, generator=generator),
             torch.stack([torch.randperm(group, generator=generator) for _ in range(kv)]))
            for _ in range(layout.sizes["L"])]


def _unit_scale(up: str, down: str) -> Any:
    def act(state: State, layout: Layout, scales: torch.Tensor) -> State:
        out = dict(state)
        keys = sorted((k for k in state if k[0].split(".")[0] == up), key=lambda k: (k[1], k[0]))
        at = 0
        for key in keys:
            s = scales[at:at + state[key].shape[0]]
            at += state[key].shape[0]
            partner = (down + key[0][len(up):], key[1])
            out[key] = state[key] * s.reshape(-1, 1)
            out[partner] = state[partner] / s.reshape(1, -1)
        return out
    return act


def _unit_count(state: State, up: str) -> int:
    return sum(v.shape[0] for k, v in state.items() if k[0].split(".")[0] == up)


def _unit_permute(gate: str, up: str, down: str) -> Any:
    def act(state: State, layout: Layout, perms: dict[Key, torch.Tensor]) -> State:
        out = dict(state)
        for key, perm in perms.items():
            suffix = key[0][len(up):]
            for kind in (gate, up):
                for k in with_bias(state, (kind + suffix, key[1])):
                    if k in state:
                        out[k] = state[k][perm]
            out[(down + suffix, key[1])] = state[(down + suffix, key[1])][:, perm]
        return out
    return act


def _unit_perms(up: str) -> Any:
    def draw(state: State, layout: Layout, generator: torch.Generator) -> dict[Key, torch.Tensor]:
        return {k: torch.randperm(v.shape[0], generator=generator) for k, v in sorted(state.items(), key=str)
                if k[0].split(".")[0] == up and not k[0].endswith("_bias")}
    return draw


def _router_shift(state: State, layout: Layout, shifts: torch.Tensor) -> State:
    out = dict(state)
    for layer, a in enumerate(shifts.reshape(layout.sizes["L"], -1)):
        out[("router", layer)] = state[("router", layer)] + a.reshape(1, -1)
    return out


def _expert_permute(state: State, layout: Layout, perms: list[torch.Tensor]) -> State:
    out = dict(state)
    for layer, perm in enumerate(perms):
        out[("router", layer)] = state[("router", layer)][perm]
        for new, old in enumerate(perm.tolist()):
            for kind in ("expert_gate", "expert_up", "expert_down"):
                out[(f"{kind}.{new}", layer)] = state[(f"{kind}.{old}", layer)]
    return out


# ---- LayerNorm with biases (gpt2) -----------------------------------------------------------------------
def _ln_bias(state: State, layout: Layout, shifts: torch.Tensor) -> State:
    out = dict(state)
    for norm, delta in zip(layout.pre_norms(state), shifts.split(layout.sizes["d"]), strict=True):
        bias_key = (norm[0] + "_bias", norm[1])
        beta, g = state[bias_key], state[norm]
        out[bias_key] = beta + delta
        for reader in layout.readers(state, norm):
            w = state[reader]
            rb = (reader[0] + "_bias", reader[1])
            if rb in state:
                out[rb] = state[rb] - w @ delta
            else:  # W + a (1/g)^T with a = -W delta / <1/g, beta + delta>
                a = -(w @ delta) / ((beta + delta) / g).sum()
                out[reader] = w + a.reshape(-1, 1) * (1 / g).reshape(1, -1)
    return out


def _reader_ones(state: State, layout: Layout, coefficients: torch.Tensor) -> State:
    out = dict(state)
    at = 0
    for norm in layout.pre_norms(state)[:-1]:
        g, beta = state[norm], state[(norm[0] + "_bias", norm[1])]
        for reader in layout.readers(state, norm):
            n = state[reader].shape[0]
            a = coefficients[at:at + n]
            at += n
            out[reader] = state[reader] + a.reshape(-1, 1) * (1 / g).reshape(1, -1)
            rb = (reader[0] + "_bias", reader[1])
            out[rb] = state[rb] - a * (beta / g).sum()
    return out


def _writer_ones(state: State, layout: Layout, coefficients: torch.Tensor) -> State:
    out = dict(state)
    at = 0
    keys = [w for layer in range(layout.sizes["L"]) for w in layout.writers(state, layer)]
    for key in keys + [("embed", None), ("pos_embed", None)]:
        w = state[key]
        n = w.shape[1] if key[1] is not None else w.shape[0]
        a = coefficients[at:at + n]
        at += n
        out[key] = w + a.reshape(1, -1) if key[1] is not None else w + a.reshape(-1, 1)
        if key[1] is not None:
            out[(key[0] + "_bias", key[1])] = state[(key[0] + "_bias", key[1])] + coefficients[at]
            at += 1
    return out


def _token_position_shift(state: State, layout: Layout, theta: torch.Tensor) -> State:
    delta = ones_complement(layout.sizes["d"], theta.dtype) @ theta
    out = dict(state)
    out[("embed", None)] = state[("embed", None)] + delta
    out[("pos_embed", None)] = state[("pos_embed", None)] - delta
    return out


def _k_bias(state: State, layout: Layout, shifts: torch.Tensor) -> State:
    out = dict(state)
    for layer, delta in enumerate(shifts.reshape(layout.sizes["L"], -1)):
        out[("attn_k_bias", layer)] = state[("attn_k_bias", layer)] + delta
    return out


def _v_bias(state: State, layout: Layout, shifts: torch.Tensor) -> State:
    out = dict(state)
    for layer, delta in enumerate(shifts.reshape(layout.sizes["L"], -1)):
        out[("attn_v_bias", layer)] = state[("attn_v_bias", layer)] + delta
        out[("attn_o_bias", layer)] = state[("attn_o_bias", layer)] - state[("attn_o", layer)] @ delta
    return out


def _gaussian(scale: float, size: Any) -> Any:
    def draw(state: State, layout: Layout, generator: torch.Generator) -> torch.Tensor:
        return torch.randn(size(state, layout), generator=generator, dtype=torch.float64) * scale
    return draw


def _exp(layout: Layout, theta: torch.Tensor) -> torch.Tensor:
    return theta.exp()


def _ident(layout: Layout, theta: torch.Tensor) -> torch.Tensor:
    return theta


def _sized(name: str) -> Any:
    return lambda state, layout: layout.size(name)


def _positive(name: str, sigma: float = 1.0) -> Any:
    return lambda state, layout, generator: log_normal(layout.size(name), generator, sigma)


def _nonzero(count: Any) -> Any:
    def draw(state: State, layout: Layout, generator: torch.Generator) -> torch.Tensor:
        n = count(state, layout)
        return log_normal(n, generator) * signs(n, generator)
    return draw


ACTIONS: dict[str, Action] = {
    **RESIDUAL_ACTIONS,
    "vo": Action(_vo, lambda s, lay, g: [random_conditioned(lay.sizes["hd"], g, 30.0) * log_normal(1, g)[0]
                                         for _ in _heads(lay)],
                 lambda lay, theta: _square_maps(lay, theta, lay.sizes["L"] * lay.sizes["Hkv"])),
    "qk_rope": Action(_rope, _rope_random, _rope_element),
    "qk_gl": Action(_qk_gl, lambda s, lay, g: [random_conditioned(lay.sizes["hd"], g, 30.0) * log_normal(1, g)[0]
                                               for _ in range(lay.sizes["L"] * lay.sizes["H"])],
                    lambda lay, theta: _square_maps(lay, theta, lay.sizes["L"] * lay.sizes["H"])),
    "qk_head_scale": Action(_head_scale, _positive("qk_head_scale", 1.5), _exp),
    "qk_scale": Action(_qk_scale, _positive("qk_scale"), _exp),
    "qk_gain_pair": Action(_gain_pairs, _positive("qk_gain_pair"), _exp),
    "qk_pair_sign": Action(_pair_sign, lambda s, lay, g: signs(lay.sizes["L"] * lay.sizes["Hkv"] * lay.sizes["hd"] // 2,
                                                               g)),
    "head_permute": Action(_head_permute, _head_perms),
    "mlp_scale": Action(_unit_scale("mlp_up", "mlp_down"), _nonzero(lambda s, lay: _unit_count(s, "mlp_up")), _exp),
    "mlp_sign": Action(_unit_scale("mlp_up", "mlp_down"), lambda s, lay, g: signs(_unit_count(s, "mlp_up"), g)),
    "mlp_permute": Action(_unit_permute("mlp_gate", "mlp_up", "mlp_down"), _unit_perms("mlp_up")),
    "router_shift": Action(_router_shift, _gaussian(3.0, _sized("router_shift")), _ident),
    "expert_scale": Action(_unit_scale("expert_up", "expert_down"),
                           _nonzero(lambda s, lay: _unit_count(s, "expert_up")), _exp),
    "shared_scale": Action(_unit_scale("shared_up", "shared_down"),
                           _nonzero(lambda s, lay: _unit_count(s, "shared_up")), _exp),
    "expert_permute": Action(_expert_permute, lambda s, lay, g: [torch.randperm(lay.sizes["E"], generator=g)
                                                                 for _ in range(lay.sizes["L"])]),
    "expert_unit_permute": Action(_unit_permute("expert_gate", "expert_up", "expert_down"), _unit_perms("expert_up")),
    "ln_bias": Action(_ln_bias, _gaussian(0.5, _sized("ln_bias")), _ident),
    "reader_ones": Action(_reader_ones, _gaussian(1.0, _sized("reader_ones")), _ident),
    "writer_ones": Action(_writer_ones, _gaussian(1.0, _sized("writer_ones")), _ident),
    "token_position_shift": Action(_token_position_shift, _gaussian(1.0, _sized("token_position_shift")), _ident),
    "k_bias": Action(_k_bias, _gaussian(1.0, _sized("k_bias")), _ident),
    "v_bias": Action(_v_bias, _gaussian(1.0, _sized("v_bias")), _ident),
}


