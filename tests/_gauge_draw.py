"""A random exact gauge of a Llama state dict, for the alignment tests (to give way to
``geodrift.gauge.orbit.random_gauge`` once that lands): gains folded, then a residual rotation, per layer
a hidden permutation with Up/Down scaling (log-scale σ), a V/O map per key-value head (condition
number ``cond``) and a Q/K rotation-scaling per RoPE pair."""

from __future__ import annotations

import math

import torch

from geodrift.gauge.align import LlamaShape, StateDict, fold_gains


def _orthogonal(n: int, g: torch.Generator) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))[0]


def random_gauge(sd: StateDict, shape: LlamaShape, g: torch.Generator, cond: float = 10.0,
                 sigma: float = 0.5) -> tuple[StateDict, list[torch.Tensor]]:
    """The folded ``sd`` under a random exact gauge, and each layer's hidden permutation."""
    b = fold_gains(sd, shape)
    hd, group = shape.head_dim, shape.n_heads // shape.n_kv_heads
    rot = _orthogonal(shape.d_model, g)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        b[name] = b[name] @ rot.T
    perms = []
    for layer in range(shape.n_layers):
        p = f"model.layers.{layer}."
        q, k, v, o = (p + f"self_attn.{r}_proj.weight" for r in "qkvo")
        gate, up, down = (p + f"mlp.{r}_proj.weight" for r in ("gate", "up", "down"))
        for name in (q, k, v, gate, up):
            b[name] = b[name] @ rot.T
        for name in (o, down):
            b[name] = rot @ b[name]
        perm = torch.randperm(shape.d_ff, generator=g)
        perms.append(perm)
        s = torch.exp(sigma * torch.randn(shape.d_ff, generator=g, dtype=torch.float64))
        b[gate], b[up], b[down] = b[gate][perm], b[up][perm] * s[:, None], b[down][:, perm] / s[None]
        for kv in range(shape.n_kv_heads):
            spectrum = torch.logspace(0, math.log10(cond), hd, dtype=torch.float64)
            m = _orthogonal(hd, g) @ torch.diag(spectrum) @ _orthogonal(hd, g).T
            b[v][kv * hd:(kv + 1) * hd] = m @ b[v][kv * hd:(kv + 1) * hd]
            m_inv = torch.linalg.inv(m)
            heads = range(kv * group, (kv + 1) * group)
            for h in heads:
                b[o][:, h * hd:(h + 1) * hd] = b[o][:, h * hd:(h + 1) * hd] @ m_inv
            for i in range(hd // 2):
                r = math.exp(sigma * float(torch.randn(1, generator=g)))
                phi = float(torch.rand(1, generator=g)) * 2 * math.pi
                turn = torch.tensor([[math.cos(phi), -math.sin(phi)], [math.sin(phi), math.cos(phi)]],
                                    dtype=torch.float64)
                pair = [kv * hd + i, kv * hd + i + hd // 2]
                b[k][pair] = (turn / r) @ b[k][pair]
                for h in heads:
                    qpair = [h * hd + i, h * hd + i + hd // 2]
                    b[q][qpair] = (r * turn) @ b[q][qpair]
    return b, perms
