"""The effective-weight ("folded") view: normalisation gains folded into the projections.

A pre-norm block computes ``W (g * x / rms(x))``: the gain ``g`` of the block's input norm acts
on the *input side* of every projection that reads the residual stream, so its effective weight
is ``W diag(g)``:

- Q, K, V with the attention input norm (``norm_attn``; llama ``input_layernorm``, GGUF
  ``attn_norm``),
- Gate, Up with the MLP input norm (``norm_mlp``; llama ``post_attention_layernorm``, gemma2/3
  ``pre_feedforward_layernorm``, GGUF ``ffn_norm``).

Gemma2/Gemma3 also normalise a block's output before adding it to the stream
(``post_attention_layernorm`` / ``post_feedforward_layernorm``, GGUF ``post_attention_norm`` /
``post_ffw_norm``): what reaches the stream is ``g * normalise(W h)``, so those gains go on the
*output side*: ``diag(g) W`` for O and Down. (The normalisation's per-token scalar is not a fixed
linear map and is not folded; only the gain is.) Gemma's gains are ``1 + w``
(:func:`geodrift.scanner.readers.norm_gain`). gpt2's LayerNorm gains fold the same way (its biases
are not part of a weight matrix and are left out). qwen3/gemma3 per-head q/k norms act inside
the attention score, not on the stream, and are not folded.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from geodrift.errors import GeodriftError
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.weights import base_role

# role -> (norm key kind, side): "in" multiplies columns (W diag g), "out" multiplies rows (diag g W).
# A mixture-of-experts block reads the MLP's input norm in its router and every expert; expert roles
# ("expert_gate.3") fold as their family.
INPUT_SIDE: dict[str, str] = {
    "attn_q": "norm_attn", "attn_k": "norm_attn", "attn_v": "norm_attn",
    "mlp_gate": "norm_mlp", "mlp_up": "norm_mlp", "router": "norm_mlp", "shared_gate": "norm_mlp",
    "shared_up": "norm_mlp", "expert_gate": "norm_mlp", "expert_up": "norm_mlp",
}
OUTPUT_SIDE: dict[str, str] = {
    "attn_o": "norm_attn_post", "mlp_down": "norm_mlp_post", "shared_down": "norm_mlp_post",
    "expert_down": "norm_mlp_post",
}


def fold_plan(ckpt: Checkpoint, role: str, layer: int) -> list[tuple[str, str]]:
    """The gains folded into ``(role, layer)``: a list of ``(norm kind, "in" | "out")``.

    Only norms the checkpoint actually has are listed (O and Down fold nothing outside gemma2/3).
    """
    plan = []
    role = base_role(role)
    if role in INPUT_SIDE and (INPUT_SIDE[role], layer) in ckpt.plan:
        plan.append((INPUT_SIDE[role], "in"))
    if role in OUTPUT_SIDE and (OUTPUT_SIDE[role], layer) in ckpt.plan:
        plan.append((OUTPUT_SIDE[role], "out"))
    return plan


def fold_weight(weight: torch.Tensor, gain: torch.Tensor, side: str) -> torch.Tensor:
    """Fold one gain vector into a weight.

    Args:
        weight: ``(d_out, d_in)``.
        gain: ``(d_in,)`` for side ``"in"`` (returns ``W diag(g)``) or ``(d_out,)`` for ``"out"``
            (returns ``diag(g) W``).
        side: ``"in"`` or ``"out"``.

    Returns:
        ``(d_out, d_in)``.

    Example:
        >>> fold_weight(torch.ones(2, 3), torch.tensor([1.0, 2.0, 3.0]), "in")[0].tolist()
        [1.0, 2.0, 3.0]
    """
    if side == "in":
        return weight * gain.reshape(1, -1)
    if side == "out":
        return weight * gain.reshape(-1, 1)
    raise ValueError(f"side must be 'in' or 'out', got {side!r}")


def folded_loader(ckpt: Checkpoint, role: str, layer: int, load_weight: Callable[[], torch.Tensor],
                  load_gain: Callable[[str], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """A loader returning the folded ``(role, layer)`` weight.

    Args:
        ckpt: the checkpoint (its plan says which norms exist).
        role, layer: the projection.
        load_weight: reads the raw weight (a fresh tensor: it is scaled in place).
        load_gain: reads a norm's effective gain of this layer by norm kind.
    """
    plan = fold_plan(ckpt, role, layer)

    def load() -> torch.Tensor:
        weight = load_weight()
        for kind, side in plan:
            gain = load_gain(kind)
            expected = weight.shape[1] if side == "in" else weight.shape[0]
            if gain.numel() != expected:
                raise GeodriftError(
                    f"{ckpt.label}: {kind} of layer {layer} has {gain.numel()} entries but {role} needs "
                    f"{expected}; the norm/weight names are mismatched - check the name mapping"
                )
            # in place: load_canonical returned a fresh tensor, so no second full-size copy is made
            weight.mul_(gain.reshape(1, -1) if side == "in" else gain.reshape(-1, 1))
        return weight

    return load
