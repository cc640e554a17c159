"""AWQ-style activation-aware scale folding: an exact reparametrisation computed from real activations.

AWQ (Lin et al. 2024) scales each input channel of a projection by ``s = mean|x|^alpha`` (``x`` that
channel's activation on calibration text) before quantising, and folds ``1/s`` into the operation
that produced ``x``, so that the function is unchanged before quantisation. In a Llama MLP that is:

- the MLP input: the norm gain ``g -> g / s`` and the Gate/Up columns ``W[:, i] -> W[:, i] * s_i``
  (``s`` from the post-norm MLP input, shared by Gate and Up);
- the hidden units: Up rows ``/ s_j`` and Down columns ``* s_j`` (``s`` from Down's input,
  ``act(gate x) * up x``, which is linear in Up's row).

As AWQ does, ``s`` is normalised by ``sqrt(max(s) min(s))``. (AWQ also folds between V and O where
every query head has its own key-value head; with grouped-query attention, as SmolLM2 has, it skips
that pair, and so does this module.) This is the test input of the gauge diagnosis
(:mod:`geodrift.gauge.diagnose`): the folded checkpoint computes the same logits, and sits far from
its balanced point.
"""

from __future__ import annotations

from typing import Any

import torch

from geodrift.gauge.orbit import GaugeShape, StateDict, layer_key, scale_mlp
from geodrift.lm.llama import LlamaLM


@torch.no_grad()
def activation_scales(model: LlamaLM, windows: torch.Tensor, alpha: float = 0.5
                      ) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, AWQ's scales of the MLP input (``d_model``) and of Down's input (``d_ff``).

    Args:
        model: the Llama (eval mode).
        windows: ``(W, T + 1)`` calibration token windows (the last token of each is not fed).
        alpha: AWQ's exponent on ``mean|x|``.

    Returns:
        ``{layer: (s_in, s_mid)}``, float64, each normalised by ``sqrt(max * min)``.

    Example:
        >>> m = LlamaLM(20, 8, 1, 2, 12, init_std=0.2, generator=torch.Generator().manual_seed(0))
        >>> s_in, s_mid = activation_scales(m, torch.randint(0, 20, (2, 6)))[0]
        >>> tuple(s_in.shape), tuple(s_mid.shape)
        ((8,), (12,))
    """
    sums: dict[tuple[str, int], torch.Tensor] = {}
    count = [0]

    def hook(kind: str, layer: int) -> Any:
        def record(_: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            x = inputs[0].detach().double().abs().reshape(-1, inputs[0].shape[-1])
            sums[kind, layer] = sums.get((kind, layer), 0) + x.sum(dim=0)
            if kind == "in" and layer == 0:
                count[0] += x.shape[0]
        return record

    handles = []
    for layer in range(model.n_layers):
        handles.append(model.projection("mlp_gate", layer).register_forward_pre_hook(hook("in", layer)))
        handles.append(model.projection("mlp_down", layer).register_forward_pre_hook(hook("mid", layer)))
    try:
        model.eval()
        for i in range(0, windows.shape[0], 8):
            model(windows[i:i + 8, :-1])
    finally:
        for h in handles:
            h.remove()

    def normalised(total: torch.Tensor) -> torch.Tensor:
        s = (total / count[0]).clamp_min(1e-8).pow(alpha)
        return s / (s.max() * s.min()).sqrt()

    return {layer: (normalised(sums["in", layer]), normalised(sums["mid", layer])) for layer in range(model.n_layers)}


def fold_awq(sd: StateDict, shape: GaugeShape, scales: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> StateDict:
    """Fold AWQ's scales into a Hugging Face-named Llama state dict (the function is unchanged).

    Args:
        sd: the state dict (gains not folded).
        shape: its :class:`~geodrift.gauge.orbit.GaugeShape`.
        scales: from :func:`activation_scales`.

    Returns:
        A new state dict: per layer ``g / s_in``, Gate/Up columns ``* s_in``, Up rows ``/ s_mid``, Down
        columns ``* s_mid`` (the last through :func:`geodrift.gauge.orbit.scale_mlp`).

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> shape = GaugeShape(1, 2, 1, 4)
        >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=5, generator=torch.Generator())
        >>> out = fold_awq(sd, shape, {0: (2 * torch.ones(8, dtype=torch.float64), torch.ones(6, dtype=torch.float64))})
        >>> bool(torch.allclose(out[layer_key(0, "gate_proj")], 2 * sd[layer_key(0, "gate_proj")]))
        True
    """
    out = dict(sd)
    for layer, (s_in, s_mid) in scales.items():
        norm = layer_key(layer, "post_attention_layernorm")
        out[norm] = out[norm] / s_in.to(out[norm].dtype)
        for name in ("gate_proj", "up_proj"):
            key = layer_key(layer, name)
            out[key] = out[key] * s_in.to(out[key].dtype).reshape(1, -1)
        out = scale_mlp(out, layer, 1.0 / s_mid)
    return out
