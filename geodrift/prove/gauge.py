"""Numeric twins of the gauge and Noether claims, on the simulator's own models (torch, float64).

- The toy MLP (``geodrift.sim.mlp.ResidualMLP``: ``h0 = E x``, ``h <- h + act(W_l h)``, logits
  ``H h``) under the conjugation gauge ``E -> R E``, ``W_l -> R W_l R^T``, ``H -> H R^T`` with one
  orthogonal ``R`` for all layers: the output is unchanged iff the activation is equivariant
  (linear, radial) - the symbolic claim for ``h + act(W h)``.
- The Llama (``geodrift.lm.llama.LlamaLM``) under a per-head rotation of V's output and the inverse
  on O's input (``W_V[h] -> R_h W_V[h]``, ``W_O[:, h] -> W_O[:, h] R_h^T``, one ``R_h`` per key-value
  head shared by its query heads): attention mixes tokens linearly, so the output is unchanged iff
  the nonlinearity on V (``v_activation``) is equivariant - the claim for ``h + W2 act(W1 h)``, and
  the reason the paper gives for V being continuous in neither space.
- Noether: gradient descent on the MLP with a linear activation conserves
  ``Q = E E^T + sum(W W^T - W^T W) - H^T H`` (to O(lr)) and has zero orbit momentum; Adam does not.
"""

from __future__ import annotations

from typing import Any

import torch

from geodrift.lm.activations import EQUIVARIANT, LLAMA_V_ACTIVATIONS
from geodrift.lm.llama import LlamaAttention, LlamaLM
from geodrift.prove.symmetry import ELEMENTWISE, NumericResult, orthogonal_qr
from geodrift.sim.mlp import ResidualMLP

# The simulators' activation names (``geodrift.lm.activations``): equivariant ones, then element-wise ones.
MLP_EQUIVARIANT = EQUIVARIANT
MLP_ELEMENTWISE = tuple(ELEMENTWISE)
V_EQUIVARIANT = EQUIVARIANT
V_ELEMENTWISE = tuple(name for name in LLAMA_V_ACTIVATIONS if name not in EQUIVARIANT)


def toy_mlp(activation: str, generator: torch.Generator, d: int = 8, layers: int = 4, n_in: int = 5,
            n_out: int = 3) -> ResidualMLP:
    """The simulator's MLP (one member, no norm) in float64, seeded from ``generator``."""
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    return ResidualMLP(n_in, n_out, d_model=d, n_layers=layers, activation=activation, seeds=[seed]).double()


@torch.no_grad()
def conjugate_mlp_(model: ResidualMLP, r: torch.Tensor) -> None:
    """In place: ``E -> R E``, ``W_l -> R W_l R^T``, ``H -> H R^T`` (member 0)."""
    model.embed[0].copy_(r @ model.embed[0])
    model.blocks[0].copy_(r @ model.blocks[0] @ r.T)
    model.head[0].copy_(model.head[0] @ r.T)


def toy_llama(v_activation: str, generator: torch.Generator) -> LlamaLM:
    """The simulator's Llama, small (GQA 4 query / 2 key-value heads), float64, seeded from ``generator``."""
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    return LlamaLM(40, 16, 2, 4, 24, n_kv_heads=2, v_activation=v_activation, init_std=0.3,
                   generator=torch.Generator().manual_seed(seed)).double()


@torch.no_grad()
def rotate_value_heads_(model: LlamaLM, rotations: torch.Tensor) -> None:
    """In place: ``W_V[j] -> R_lj W_V[j]``, ``W_O[:, h] -> W_O[:, h] R_lj^T`` for query heads ``h`` of group ``j``.

    Args:
        model: the Llama.
        rotations: ``(n_layers, n_kv_heads, head_dim, head_dim)`` orthogonal matrices.
    """
    for index, decoder in enumerate(model.model.layers):
        attn = decoder.self_attn
        assert isinstance(attn, LlamaAttention)
        hd, group = attn.head_dim, attn.n_heads // attn.n_kv_heads
        for j in range(attn.n_kv_heads):
            r = rotations[index, j].to(attn.v_proj.weight.dtype)
            rows = slice(j * hd, (j + 1) * hd)
            attn.v_proj.weight[rows] = r @ attn.v_proj.weight[rows]
            for h in range(j * group, (j + 1) * group):
                cols = slice(h * hd, (h + 1) * hd)
                attn.o_proj.weight[:, cols] = attn.o_proj.weight[:, cols] @ r.T


def value_head_rotations(model: LlamaLM, generator: torch.Generator) -> torch.Tensor:
    """Haar-random rotations for :func:`rotate_value_heads_`: ``(n_layers, n_kv_heads, head_dim, head_dim)``."""
    attn = model.model.layers[0].self_attn
    assert isinstance(attn, LlamaAttention)
    return torch.stack([torch.stack([orthogonal_qr(attn.head_dim, generator) for _ in range(attn.n_kv_heads)])
                        for _ in model.model.layers])


def _relative_change(before: torch.Tensor, after: torch.Tensor) -> float:
    return float((after - before).abs().max() / before.abs().max())


@torch.no_grad()
def check_gauge(facts: dict[str, Any], generator: torch.Generator) -> NumericResult:
    """Output change under the gauge: ~0 for equivariant activations, large for element-wise ones."""
    change: dict[str, float] = {}
    x = torch.randn(1, 64, 5, generator=generator, dtype=torch.float64)
    for name in MLP_EQUIVARIANT + MLP_ELEMENTWISE:
        model = toy_mlp(name, generator)
        y = model(x)
        conjugate_mlp_(model, orthogonal_qr(8, generator))
        change[f"mlp:{name}"] = _relative_change(y, model(x))
    ids = torch.randint(0, 40, (2, 12), generator=generator)
    for name in V_EQUIVARIANT + V_ELEMENTWISE:
        llama = toy_llama(name, generator)
        y = llama(ids)
        rotate_value_heads_(llama, value_head_rotations(llama, generator))
        change[f"llama_vo:{name}"] = _relative_change(y, llama(ids))
    keeps = {f"mlp:{n}" for n in MLP_EQUIVARIANT} | {f"llama_vo:{n}" for n in V_EQUIVARIANT}
    ok = all((v < 1e-10) == (k in keeps) for k, v in change.items())
    worst_eq = max(v for k, v in change.items() if k in keeps)
    least_el = min(v for k, v in change.items() if k not in keeps)
    return NumericResult(ok, f"simulator MLP and Llama V/O: relative output change equivariant <= {worst_eq:.1e}, "
                             f"element-wise >= {least_el:.1e}", change)


def charges(model: ResidualMLP) -> torch.Tensor:
    """``Q = E E^T + sum_l (W_l W_l^T - W_l^T W_l) - H^T H`` of member 0: ``(d, d)``."""
    E, H = model.embed[0], model.head[0]
    W = model.blocks[0]
    return (E @ E.T - H.T @ H + (W @ W.mT - W.mT @ W).sum(0)).detach()


def orbit_momentum(params: list[torch.Tensor], deltas: list[torch.Tensor]) -> torch.Tensor:
    """Skew part of ``P = E dE^T + sum (W dW^T - dW^T W) - dH^T H`` for an update ``(dE, dW.., dH)``: ``(d, d)``."""
    e, *ws, h = params
    de, *dws, dh = deltas
    p = e @ de.T - dh.T @ h
    for w, dw in zip(ws, dws, strict=True):
        p = p + w @ dw.T - dw.T @ w
    return (p - p.T) / 2


def _matrices(model: ResidualMLP) -> list[torch.Tensor]:
    # [E, W_0, ..., W_{L-1}, H] of member 0, detached copies
    return [model.embed[0].detach().clone(), *model.blocks[0].detach().clone().unbind(0),
            model.head[0].detach().clone()]


def train_trace(act: str, optimizer: str, lr: float, steps: int, seed: int) -> dict[str, float]:
    """Train the simulator's MLP (d 6, 3 layers) on a fixed random regression; report Q drift and orbit momentum.

    Returns:
        ``q_drift``: ``|Q_T - Q_0|_F / |Q_0|_F``; ``momentum``: max over steps of
        ``|skew P|_F / (|theta|_F |dtheta|_F)``.
    """
    gen = torch.Generator().manual_seed(seed)
    net = toy_mlp(act, gen, d=6, layers=3, n_in=4, n_out=3)
    x = torch.randn(1, 64, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(1, 64, 3, generator=gen, dtype=torch.float64)
    q0 = charges(net)
    params = [net.embed, net.blocks, net.head]
    opt = torch.optim.SGD(params, lr=lr) if optimizer == "gd" else torch.optim.Adam(params, lr=lr)
    mom = 0.0
    for _ in range(steps):
        before = _matrices(net)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        deltas = [a - b for a, b in zip(_matrices(net), before, strict=True)]
        norm = torch.stack([(b**2).sum() for b in before]).sum().sqrt() * torch.stack(
            [(d**2).sum() for d in deltas]).sum().sqrt()
        mom = max(mom, float(torch.linalg.matrix_norm(orbit_momentum(before, deltas)) / norm))
    return {"q_drift": float(torch.linalg.matrix_norm(charges(net) - q0) / torch.linalg.matrix_norm(q0)),
            "momentum": mom}


def check_noether(facts: dict[str, Any], generator: torch.Generator) -> NumericResult:
    """GD (small step) keeps Q (linear net) and has zero orbit momentum; Adam breaks both.

    Also checks the GD drift of Q halves when the step halves at fixed training time (O(lr) error
    of the Euler discretisation of a conserved flow), and reports the radial net for contrast.
    """
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    gd = train_trace("none", "gd", 2e-3, 200, seed)
    gd_half = train_trace("none", "gd", 1e-3, 400, seed)
    adam = train_trace("none", "adam", 2e-3, 200, seed)
    gd_rad = train_trace("radial", "gd", 2e-3, 200, seed)
    adam_rad = train_trace("radial", "adam", 2e-3, 200, seed)
    ratio = gd["q_drift"] / max(gd_half["q_drift"], 1e-300)
    ok = (gd["momentum"] < 1e-12 and gd_rad["momentum"] < 1e-12 and adam["momentum"] > 1e-6
          and adam_rad["momentum"] > 1e-6 and adam["q_drift"] > 10 * gd["q_drift"] and 1.6 < ratio < 2.5)
    summary = (f"simulator MLP, linear: Q drift GD {gd['q_drift']:.1e} (halved step {gd_half['q_drift']:.1e}) vs "
               f"Adam {adam['q_drift']:.1e}; orbit momentum GD {gd['momentum']:.0e}/{gd_rad['momentum']:.0e} "
               f"(lin/rad) vs Adam {adam['momentum']:.1e}/{adam_rad['momentum']:.1e}")
    return NumericResult(ok, summary, {"gd": gd, "gd_half_step": gd_half, "adam": adam, "gd_radial": gd_rad,
                                       "adam_radial": adam_rad, "drift_ratio": ratio})
