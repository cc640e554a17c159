"""Exact reparametrisations that quantisation methods apply before quantising: SmoothQuant's scales and QuaRot's
Hadamard rotation (AWQ's are :mod:`geodrift.compress.awq_fold`). The test inputs of the gauge diagnosis
(:mod:`geodrift.gauge.diagnose`): each keeps the function and moves the checkpoint along one gauge orbit.

- **SmoothQuant** (Xiao et al. 2023): per input channel ``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)``, ``X``
  that channel's activation on calibration text, ``W`` the stacked projections that read it; the norm gain
  ``g -> g / s``, the readers' columns ``W[:, j] -> W[:, j] * s_j``. Both block inputs: Q/K/V and Gate/Up.
- **QuaRot** (Ashkboos et al. 2024): every norm gain folded into its readers, then the residual stream
  rotated by a randomised Hadamard matrix ``H diag(+-1) / sqrt(d)`` (no activations needed).

Example:
    >>> h = hadamard(12)
    >>> bool(torch.equal(h @ h.T, 12 * torch.eye(12, dtype=torch.float64)))
    True
"""

from __future__ import annotations

from typing import Any

import torch

from geodrift.gauge.orbit import GaugeShape, StateDict, fold_gains, layer_key, rotate_residual
from geodrift.lm.llama import LlamaLM

_BLOCKS = (("input_layernorm", ("q_proj", "k_proj", "v_proj"), "attn_q"),
           ("post_attention_layernorm", ("gate_proj", "up_proj"), "mlp_gate"))


@torch.no_grad()
def input_maxima(model: LlamaLM, windows: torch.Tensor) -> dict[tuple[int, str], torch.Tensor]:
    """Per layer and block input (``input_layernorm``, ``post_attention_layernorm``) the max ``|x|`` per channel
    over calibration windows ``(W, T + 1)`` (the last token of each not fed)."""
    maxima: dict[tuple[int, str], torch.Tensor] = {}

    def hook(key: tuple[int, str]) -> Any:
        def record(_: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            x = inputs[0].detach().double().abs().reshape(-1, inputs[0].shape[-1]).amax(0)
            maxima[key] = torch.maximum(maxima[key], x) if key in maxima else x
        return record

    handles = [model.projection(role, layer).register_forward_pre_hook(hook((layer, norm)))
               for layer in range(model.n_layers) for norm, _, role in _BLOCKS]
    try:
        model.eval()
        for i in range(0, windows.shape[0], 8):
            model(windows[i:i + 8, :-1])
    finally:
        for h in handles:
            h.remove()
    return maxima


def fold_smoothquant(sd: StateDict, shape: GaugeShape, maxima: dict[tuple[int, str], torch.Tensor],
                     alpha: float = 0.5) -> StateDict:
    """SmoothQuant's scales folded between each block's input norm and its readers (the function is unchanged).

    Args:
        sd: a Hugging Face-named Llama state dict (gains not folded).
        shape: its :class:`~geodrift.gauge.orbit.GaugeShape`.
        maxima: :func:`input_maxima` of the same model.
        alpha: SmoothQuant's migration strength.

    Returns:
        A new state dict: per block ``g / s``, the readers' columns ``* s``.
    """
    out = dict(sd)
    for layer in range(shape.n_layers):
        for norm, readers, _ in _BLOCKS:
            weights = torch.cat([out[layer_key(layer, r)].double() for r in readers]).abs().amax(0)
            s = maxima[(layer, norm)].clamp_min(1e-5).pow(alpha) / weights.clamp_min(1e-5).pow(1 - alpha)
            key = layer_key(layer, norm)
            out[key] = out[key] / s.to(out[key].dtype)
            for r in readers:
                out[layer_key(layer, r)] = out[layer_key(layer, r)] * s.to(out[key].dtype).reshape(1, -1)
    return out


def _paley(q: int) -> torch.Tensor:
    # Paley's construction I: a Hadamard matrix of order q + 1 for a prime q = 3 mod 4
    residues = {(i * i) % q for i in range(1, q)}
    chi = [0] + [1 if i in residues else -1 for i in range(1, q)]
    jac = torch.tensor([[chi[(j - i) % q] for j in range(q)] for i in range(q)], dtype=torch.float64)
    s = torch.zeros(q + 1, q + 1, dtype=torch.float64)
    s[0, 1:], s[1:, 0], s[1:, 1:] = 1.0, -1.0, jac
    return s + torch.eye(q + 1, dtype=torch.float64)


def hadamard(n: int) -> torch.Tensor:
    """A Hadamard matrix of order ``n`` (entries +-1, ``H H^T = n I``): Kronecker products of Sylvester's order 2
    and Paley's orders 12 and 20 (as QuaRot builds its non-power-of-two sizes).

    Raises:
        ValueError: an order this construction does not reach.
    """
    if n == 1:
        return torch.ones(1, 1, dtype=torch.float64)
    for base, block in ((12, lambda: _paley(11)), (20, lambda: _paley(19)), (2, lambda: torch.tensor(
            [[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64))):
        if n % base == 0:
            try:
                return torch.kron(block(), hadamard(n // base))
            except ValueError:
                continue
    raise ValueError(f"no Hadamard matrix of order {n} from Sylvester's and Paley's (12, 20) constructions")


def quarot(sd: StateDict, shape: GaugeShape, generator: torch.Generator) -> StateDict:
    """QuaRot's rotation: gains folded, then the residual stream rotated by ``H diag(+-1) / sqrt(d)`` (exact)."""
    out = fold_gains(sd, shape)
    d = out["model.embed_tokens.weight"].shape[1]
    signs = torch.where(torch.rand(d, generator=generator) < 0.5, -1.0, 1.0).double()
    rotation = hadamard(d) * signs.reshape(1, -1) / d ** 0.5
    return rotate_residual(out, shape, rotation)
