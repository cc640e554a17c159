"""A Llama-style decoder with the paper's ablation switches, named like Hugging Face's Llama.

Architecture (defaults = Llama): token embedding -> ``n_layers`` x [RMSNorm pre-norm -> causal
multi-head attention with RoPE (optional GQA) -> residual add; RMSNorm -> SwiGLU MLP
``down(act(gate x) * up x)`` -> residual add] -> final RMSNorm -> untied ``lm_head``. No biases.
Parameter names match ``transformers.LlamaForCausalLM`` one to one (``model.embed_tokens.weight``,
``model.layers.{l}.self_attn.q_proj.weight``, ``model.layers.{l}.mlp.gate_proj.weight``,
``model.layers.{l}.input_layernorm.weight``, ``model.norm.weight``, ``lm_head.weight``), so a
Hugging Face state dict loads directly and vice versa.

Ablation switches (constructor arguments; the paper's names in brackets):

- ``activation``: the MLP nonlinearity on Gate's output: ``silu`` (SwiGLU, default), ``relu``,
  ``gelu`` (exact erf form), ``none`` (bilinear ``down((gate x) * (up x))``, [Res+None+Norm]) or
  ``radial`` (``g * tanh(||g||)`` over each token's ``d_ff`` vector: rotation-equivariant) or
  ``radial_rms`` (``g * tanh(||g|| / sqrt(d_ff))``, the same on the features' root-mean-square).
- ``residual=False``: ``h <- f(norm(h))`` instead of ``h <- h + f(norm(h))`` [NoRes].
- ``norm="none"``: every RMSNorm (and the final one) replaced by the identity [NoNorm]; ``"pre"``
  (default) is Llama's RMSNorm pre-norm.
- ``attention="linear"`` (test (a): attention without the softmax). For head ``h`` and query
  position ``t`` (0-based), with RoPE applied to ``q`` and ``k`` as usual::

      out_t = 1/(t+1) * sum_{s<=t} (q_t . k_s / sqrt(d_head)) * v_s

  i.e. the softmax's ``exp`` and row normalisation are replaced by the raw scaled score and a
  fixed causal mean (division by the number of visible positions, which keeps the output's scale
  independent of ``t``). No feature map is applied to ``q`` or ``k`` (an ``elu + 1`` map as in
  Katharopoulos et al. would itself be an element-wise nonlinearity); the only nonlinearity left
  in the attention block is none: it is trilinear in (q, k, v).
- ``v_activation`` (test (b)): a nonlinearity on V's output, ``v = act(W_v x)`` (``none`` by
  default; element-wise ``silu``, ``relu``, ``gelu`` or ``tanh``; or ``radial``, ``v * tanh(||v||)``
  over the whole output vector, which per-head rotations of V leave equivariant).

Init: every Linear and the embedding ~ N(0, init_std^2) drawn from a ``torch.Generator``; norm
gains 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from geodrift.errors import GeodriftError
from geodrift.lm.activations import LLAMA_MLP_ACTIVATIONS, LLAMA_V_ACTIVATIONS, get_activation
from geodrift.weights import HF_LLAMA_PROJECTIONS, TRANSFORMER_ROLES, WeightSet

ATTENTIONS: tuple[str, ...] = ("softmax", "linear")
NORMS: tuple[str, ...] = ("pre", "none")


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight``, computed in float32 as Hugging Face does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope_cos_sin(seq_len: int, head_dim: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary tables in Hugging Face's half-split layout.

    Returns:
        ``(cos, sin)``, each ``(seq_len, head_dim)``.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    pos = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)  # (T, head_dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (B, H, T, d_head); rotate_half as in HF: (x1, x2) -> (-x2, x1).
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LlamaAttention(nn.Module):
    """Causal self-attention with RoPE and GQA; ``attention`` and ``v_activation`` are ablations."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, attention: str, v_activation: str) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.attention, self.v_activation = attention, v_activation
        self.v_act = get_activation(v_activation, LLAMA_V_ACTIVATIONS, "v_activation")
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, dh)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, dh)
        v = self.v_act(self.v_proj(x))
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.attention == "softmax":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, T)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            counts = torch.arange(1, T + 1, device=x.device, dtype=scores.dtype).unsqueeze(-1)  # (T, 1)
            y = (scores.masked_fill(~mask, 0.0) / counts) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


class LlamaMLP(nn.Module):
    """``down_proj(act(gate_proj x) * up_proj x)``."""

    def __init__(self, d_model: int, d_ff: int, activation: str) -> None:
        super().__init__()
        self.activation = activation
        self.act = get_activation(activation, LLAMA_MLP_ACTIVATIONS)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: ``h + attn(norm(h))`` then ``h + mlp(norm(h))`` (no ``h +`` when residual=False)."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, *, norm_eps: float,
                 activation: str, residual: bool, norm: bool, attention: str, v_activation: str) -> None:
        super().__init__()
        self.residual = residual
        self.self_attn = LlamaAttention(d_model, n_heads, n_kv_heads, attention, v_activation)
        self.mlp = LlamaMLP(d_model, d_ff, activation)
        self.input_layernorm: nn.Module = RMSNorm(d_model, norm_eps) if norm else nn.Identity()
        self.post_attention_layernorm: nn.Module = RMSNorm(d_model, norm_eps) if norm else nn.Identity()

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        a = self.self_attn(self.input_layernorm(h), cos, sin)
        h = h + a if self.residual else a
        m = self.mlp(self.post_attention_layernorm(h))
        return h + m if self.residual else m


class LlamaModel(nn.Module):
    """The decoder stack (``model.`` in Hugging Face names)."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, layer_kwargs: dict[str, Any],
                 norm: bool, norm_eps: float) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(LlamaDecoderLayer(d_model, **layer_kwargs) for _ in range(n_layers))
        self.norm: nn.Module = RMSNorm(d_model, norm_eps) if norm else nn.Identity()


class LlamaLM(nn.Module):
    """Llama causal LM. ``forward(ids (B, T)) -> logits (B, T, vocab)``.

    Args:
        vocab_size, d_model, n_layers, n_heads, d_ff: the shape; ``n_kv_heads`` (None = n_heads)
            enables grouped-query attention.
        rope_theta, norm_eps: as in Hugging Face's LlamaConfig.
        tie_embeddings: share ``lm_head.weight`` with ``model.embed_tokens.weight``.
        activation, residual, norm, attention, v_activation: ablation switches (module docstring).
        init_std: std of the N(0, init_std^2) init of every Linear and the embedding.
        generator: the init's randomness (None: a fresh ``torch.Generator`` seeded 0).

    Raises:
        GeodriftError: on an unknown switch value or heads that do not divide the width.

    Example:
        >>> m = LlamaLM(vocab_size=50, d_model=16, n_layers=2, n_heads=2, d_ff=32)
        >>> m(torch.zeros(1, 5, dtype=torch.long)).shape
        torch.Size([1, 5, 50])
    """

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, *,
                 n_kv_heads: int | None = None, rope_theta: float = 10000.0, norm_eps: float = 1e-5,
                 tie_embeddings: bool = False, activation: str = "silu", residual: bool = True,
                 norm: str = "pre", attention: str = "softmax", v_activation: str = "none",
                 init_std: float = 0.02, generator: torch.Generator | None = None) -> None:
        super().__init__()
        n_kv = n_heads if n_kv_heads is None else n_kv_heads
        get_activation(activation, LLAMA_MLP_ACTIVATIONS)
        get_activation(v_activation, LLAMA_V_ACTIVATIONS, "v_activation")
        _check("attention", attention, ATTENTIONS)
        _check("norm", norm, NORMS)
        if d_model % n_heads or n_heads % n_kv or (d_model // n_heads) % 2:
            raise GeodriftError(
                f"model shape: d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv} - n_heads must divide "
                "d_model into an even head size and n_kv_heads must divide n_heads"
            )
        self.rope_theta, self.head_dim = rope_theta, d_model // n_heads
        self.n_heads, self.n_kv_heads, self.norm_eps = n_heads, n_kv, norm_eps
        self.switches = {"activation": activation, "residual": residual, "norm": norm, "attention": attention,
                         "v_activation": v_activation}
        layer_kwargs = dict(n_heads=n_heads, n_kv_heads=n_kv, d_ff=d_ff, norm_eps=norm_eps, activation=activation,
                            residual=residual, norm=norm == "pre", attention=attention, v_activation=v_activation)
        self.model = LlamaModel(vocab_size, d_model, n_layers, layer_kwargs, norm == "pre", norm_eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.tie_embeddings = tie_embeddings
        self._init(init_std, generator if generator is not None else torch.Generator().manual_seed(0))
        if tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self._rope: tuple[int, torch.device, torch.Tensor, torch.Tensor] | None = None

    @torch.no_grad()
    def _init(self, std: float, generator: torch.Generator) -> None:
        # Named order (state-dict order) so that the same seed gives the same weights.
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.fill_(1.0)
            else:
                p.normal_(0.0, std, generator=generator)

    def _rope_tables(self, T: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._rope is None or self._rope[0] < T or self._rope[1] != device:
            cos, sin = rope_cos_sin(T, self.head_dim, self.rope_theta, device)
            self._rope = (T, device, cos, sin)
        return self._rope[2][:T], self._rope[3][:T]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, vocab)`` for token ids ``(B, T)``."""
        return self.logits(self.run_layers(self.embed(ids), range(self.n_layers)))

    @property
    def n_layers(self) -> int:
        """Decoder layers."""
        return len(self.model.layers)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Residual-stream input ``(B, T, d_model)`` for token ids ``(B, T)``."""
        return self.model.embed_tokens(ids)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, vocab)`` from final hidden states ``(B, T, d_model)``: final norm, then ``lm_head``."""
        return self.lm_head(self.model.norm(h))

    def run_layers(self, h: torch.Tensor, layers: Iterable[int],
                   record: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
        """Run the decoder layers ``layers`` (indices, in the order given) on hidden states ``h``.

        A full forward is ``run_layers(embed_tokens(ids), range(n_layers))``; a pruned model is the
        same call without the removed indices (no copy of the model).

        Args:
            h: residual-stream states ``(B, T, d_model)``.
            layers: decoder-layer indices, e.g. ``[0, 1, 3]``.
            record: called as ``record(i, h_in)`` with each layer's input before layer ``i`` runs.

        Returns:
            The states after the last listed layer, ``(B, T, d_model)`` (before the final norm).

        Example:
            >>> m = LlamaLM(vocab_size=50, d_model=16, n_layers=3, n_heads=2, d_ff=32)
            >>> h = m.model.embed_tokens(torch.zeros(1, 5, dtype=torch.long))
            >>> m.run_layers(h, [0, 2]).shape
            torch.Size([1, 5, 16])
        """
        cos, sin = self._rope_tables(h.shape[1], h.device)
        for i in layers:
            if record is not None:
                record(i, h)
            h = self.model.layers[i](h, cos, sin)
        return h

    def projection(self, role: str, layer: int) -> nn.Linear:
        """The ``nn.Linear`` of ``role`` (a TRANSFORMER_ROLES name) in decoder layer ``layer``."""
        return self.model.layers[layer].get_submodule(HF_LLAMA_PROJECTIONS[role])  # type: ignore[return-value]

    def weight_tensors(self) -> dict[tuple[str, int], torch.Tensor]:
        """``{(role, layer): weight (d_out, d_in)}`` for the seven projections (live, not copies)."""
        return {(role, layer): self.projection(role, layer).weight
                for role in TRANSFORMER_ROLES for layer in range(len(self.model.layers))}

    def weightset(self, origin: str = "simulator") -> WeightSet:
        """The projections' weights as a WeightSet (detached float32, on the CPU)."""
        return WeightSet.from_tensors({k: w.detach().cpu() for k, w in self.weight_tensors().items()}, origin=origin)

    def gradset(self, origin: str = "simulator gradients") -> WeightSet:
        """The projections' current gradients as a WeightSet (zeros where no gradient exists yet)."""
        return WeightSet.from_tensors(
            {k: (w.grad if w.grad is not None else torch.zeros_like(w)).detach().cpu()
             for k, w in self.weight_tensors().items()}, origin=origin)


def _check(option: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise GeodriftError(f"{option}: unknown value {value!r}; choose one of {', '.join(allowed)}")
