"""A Hugging Face state dict read into geodrift's canonical keys and written back: the space the gauge maps act in.

:func:`role_state` reads every tensor of a state dict through the scanner's name tables
(:mod:`geodrift.scanner.names`, i.e. ``gguf.TensorNameMap``) into ``{(kind, layer): tensor}``: fused tensors
split (phi3 ``qkv_proj``/``gate_up_proj``, gpt2 ``c_attn``), Conv1D weights transposed to ``(d_out, d_in)``,
each expert under its own key (``expert_up.3``), and Gemma's gains stored as the effective gain ``1 + w``.
Its :class:`RoleState` writes such a dict back to the original names (:meth:`RoleState.to_hf`), so a
gauge map written once in canonical keys (:mod:`geodrift.gauge.generators`) acts on every architecture.
Both directions are plain indexing and concatenation: differentiable, dtype kept (float64 for the
Jacobians of ``geodrift prove``).

Example:
    >>> import torch
    >>> sd = {"model.layers.0.self_attn.q_proj.weight": torch.ones(2, 2), "model.layers.1.self_attn.q_proj.weight":
    ...       torch.zeros(2, 2), "model.embed_tokens.weight": torch.ones(3, 2)}
    >>> rs = role_state(sd, "llama", {"num_attention_heads": 1})
    >>> sorted(k for k in rs.state if k[0] == "attn_q"), sorted(rs.to_hf(rs.state)) == sorted(sd)
    ([('attn_q', 0), ('attn_q', 1)], True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from geodrift.scanner.checkpoint import Part
from geodrift.scanner.names import GEMMA_FAMILY, CanonicalKey
from geodrift.scanner.safetensors_reader import StateDictCheckpoint

State = dict[CanonicalKey, torch.Tensor]


@dataclass
class RoleState:
    """A state dict in canonical keys (:attr:`state`) and the way back to its names (:meth:`to_hf`)."""

    state: State
    parts: dict[CanonicalKey, Part]
    shapes: dict[str, tuple[int, ...]]
    gemma: bool

    def to_hf(self, state: State) -> dict[str, torch.Tensor]:
        """``state`` (same keys as :attr:`state`) written back under the original tensor names."""
        pieces: dict[str, list[tuple[int, CanonicalKey]]] = {}
        for key, part in self.parts.items():
            pieces.setdefault(part.name, []).append((part.rows[0] if part.rows else 0, key))
        out = {}
        for name, keys in pieces.items():
            tensors = []
            for _, key in sorted(keys):
                value = state[key]
                if self.gemma and key[0].startswith("norm_") and not key[0].endswith("_bias"):
                    value = value - 1.0
                tensors.append(value)
            joined = torch.cat(tensors) if len(tensors) > 1 else tensors[0]
            part = self.parts[keys[0][1]]
            out[name] = (joined.T if part.transpose else joined).reshape(self.shapes[name])
        return out


def role_state(sd: dict[str, torch.Tensor], architecture: str, config: dict[str, Any] | None = None) -> RoleState:
    """Read a Hugging Face-named state dict into canonical keys.

    Args:
        sd: name -> tensor (any dtype; kept, not copied beyond slicing).
        architecture: the scanner's architecture name (``geodrift.architectures``).
        config: config.json-style fields (head counts split a fused qkv).

    Returns:
        The :class:`RoleState`.

    Raises:
        GeodriftError: names the tables do not know (as the scanner's).
    """
    ckpt = StateDictCheckpoint(sd, "state dict", config or {}, architecture=architecture)
    gemma = architecture in GEMMA_FAMILY
    state: State = {}
    for key, part in ckpt.plan.items():
        if part.expert is not None:
            raise NotImplementedError("stacked (n_experts, d_out, d_in) tensors are not written back")
        tensor = sd[part.name]
        if part.transpose:
            tensor = tensor.T
        if part.rows is not None:
            tensor = tensor[part.rows[0]:part.rows[1]]
        if gemma and key[0].startswith("norm_") and not key[0].endswith("_bias"):
            tensor = tensor + 1.0
        state[key] = tensor
    return RoleState(state, dict(ckpt.plan), {name: tuple(t.shape) for name, t in sd.items()}, gemma)
