"""Any ``transformers`` causal LM behind the small interface layer pruning needs.

``geodrift.compress`` prunes by running a list of decoder-layer indices (no copy of the model):
:class:`HFCausalLM` gives a Hugging Face model the same four doors geodrift's own
:class:`~geodrift.lm.llama.LlamaLM` has - ``embed(ids)``, ``run_layers(h, layers, record=...)``,
``logits(h)`` (final norm + head) and ``n_layers`` - using the model's own ``transformers`` modules:

- decoder stacks under ``model.model.layers`` (Llama, Qwen2/3, Mistral, Phi-3, Gemma 3, ...): token
  embedding; each layer called with the model's rotary ``position_embeddings`` (Gemma 3: its global and
  local ones) and ``position_ids``;
- GPT-2 style stacks under ``model.transformer.h``: token plus learned position embedding.

The attention masks come from ``transformers.masking_utils`` (the model's own builders: a layer whose
``attention_type`` is ``sliding_attention`` gets the sliding-window mask). Gemma's and Gemma 2's
embedding scale (:data:`SCALED_EMBEDDING`) and a final logit soft-cap (``final_logit_softcapping``) are
applied as their forwards do. A model whose forward does more than this is caught by
:meth:`HFCausalLM.check`, which compares the adapter's logits with the model's own forward and refuses
a mismatch.

``transformers`` is an optional extra (``pip install 'geodrift[hf]'``), imported only here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from geodrift.errors import GeodriftError
from geodrift.weights import WeightSet

INSTALL_HINT = "pip install 'geodrift[hf]'"
# Model types whose model's forward multiplies the token embedding by sqrt(hidden size) (Gemma 3's embedding module
# does it itself).
SCALED_EMBEDDING = ("gemma", "gemma2")


def import_transformers() -> Any:
    """The ``transformers`` module, or a one-line GeodriftError naming the extra to install."""
    try:
        import transformers
        from transformers import masking_utils  # noqa: F401  (>= 4.53: the mask builders used here)
    except ImportError as exc:
        raise GeodriftError(f"running a non-Llama Hugging Face model needs transformers >= 4.53 ({exc}); "
                            f"{INSTALL_HINT}") from None
    return transformers


class HFCausalLM(nn.Module):
    """A ``transformers`` causal LM run layer by layer.

    Args:
        hf: a loaded ``PreTrainedModel`` with a causal-LM head (eval mode is set here).
        weights: the projections as a WeightSet (what the geometry scores measure; the checkpoint's own
            tensors, read by the scanner).
        label: the model's name in messages.

    Raises:
        GeodriftError: a model with neither ``model.layers`` nor ``transformer.h``.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50))
        >>> lm = HFCausalLM(hf, WeightSet({}), "tiny gpt2")
        >>> ids = torch.zeros(1, 5, dtype=torch.long)
        >>> lm.n_layers, lm.logits(lm.run_layers(lm.embed(ids), [0, 1])).shape
        (2, torch.Size([1, 5, 50]))
    """

    def __init__(self, hf: Any, weights: WeightSet, label: str) -> None:
        super().__init__()
        self.hf: Any = hf.eval()
        self.weights, self.label = weights, label
        self.inner: Any
        inner = getattr(hf, "model", None)
        if inner is not None and isinstance(getattr(inner, "layers", None), nn.ModuleList):
            self.kind, self.inner, self.layers = "decoder", inner, inner.layers
            self.norm: nn.Module = inner.norm
        elif isinstance(getattr(getattr(hf, "transformer", None), "h", None), nn.ModuleList):
            self.kind, self.inner = "gpt2", hf.transformer
            self.layers, self.norm = hf.transformer.h, hf.transformer.ln_f
        else:
            raise GeodriftError(f"MODEL {label}: {type(hf).__name__} has neither model.layers nor transformer.h; "
                                "compress prune runs decoder stacks of these two layouts")
        self.head: Any = hf.get_output_embeddings()

    @property
    def n_layers(self) -> int:
        """Decoder layers."""
        return len(self.layers)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Residual-stream input ``(B, T, d)`` for token ids ``(B, T)`` (GPT-2: plus position embeddings)."""
        if self.kind == "gpt2":
            pos = torch.arange(ids.shape[1], device=ids.device)
            return self.inner.drop(self.inner.wte(ids) + self.inner.wpe(pos)[None])
        h = self.inner.embed_tokens(ids)
        if self.hf.config.model_type in SCALED_EMBEDDING:  # their model's forward scales the embedding, not the module
            h = h * torch.tensor(self.hf.config.hidden_size ** 0.5, dtype=h.dtype)
        return h

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, vocab)`` from final hidden states ``(B, T, d)``: final norm, then the head."""
        logits = self.head(self.norm(h))
        cap = getattr(self.hf.config, "final_logit_softcapping", None)
        if cap:  # Gemma 2: the output logits soft-capped, as its own forward does
            logits = torch.tanh(logits / cap) * cap
        return logits

    def run_layers(self, h: torch.Tensor, layers: Iterable[int],
                   record: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
        """Run the decoder layers ``layers`` (indices, in the order given) on states ``h (B, T, d)``.

        ``record(i, h_in)`` is called with each layer's input before layer ``i`` runs; the result is
        the states after the last listed layer (before the final norm), as ``LlamaLM.run_layers``.
        """
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        T = h.shape[1]
        position = torch.arange(T, device=h.device)
        config = self.hf.config
        args: dict[str, Any] = {"config": config, "input_embeds": h, "attention_mask": None, "cache_position": position,
                "past_key_values": None, "position_ids": position[None]}
        masks: dict[str, Any] = {}
        kwargs: dict[str, Any] = {}
        if self.kind == "decoder":
            kwargs["position_ids"] = position[None]
            rotary = getattr(self.inner, "rotary_emb", None)
            local = getattr(self.inner, "rotary_emb_local", None)
            if rotary is not None and local is not None:  # Gemma 3: global and sliding-window layers, two bases
                kwargs["position_embeddings_global"] = rotary(h, position[None])
                kwargs["position_embeddings_local"] = local(h, position[None])
            elif rotary is not None:
                kwargs["position_embeddings"] = rotary(h, position[None])
        for i in layers:
            if record is not None:
                record(i, h)
            layer = self.layers[i]
            kind = getattr(layer, "attention_type", "full_attention")
            if kind not in masks:
                build = create_sliding_window_causal_mask if kind == "sliding_attention" else create_causal_mask
                masks[kind] = build(**args)
            out = layer(h, attention_mask=masks[kind], **kwargs)
            h = out[0] if isinstance(out, tuple) else out
        return h

    def weightset(self, origin: str = "compress") -> WeightSet:
        """The projections (the checkpoint's tensors, as ``geodrift scan`` reads them)."""
        return self.weights

    def save_pruned(self, folder: str | Path, layers: list[int]) -> Path:
        """Write the model with only ``layers`` (renumbered ``0..n-1``) as a Hugging Face folder
        (``save_pretrained``: ``config.json``, ``model.safetensors``); the model itself is left as it was.

        Raises:
            GeodriftError: a layer index out of range or repeated.
        """
        if any(not 0 <= i < self.n_layers for i in layers) or len(set(layers)) != len(layers):
            raise GeodriftError(f"layers {layers}: each must be a distinct index in 0..{self.n_layers - 1}")
        config, owner = self.hf.config, self.inner
        name = "layers" if self.kind == "decoder" else "h"
        before = (getattr(owner, name), config.num_hidden_layers, getattr(config, "layer_types", None))
        try:
            setattr(owner, name, nn.ModuleList(self.layers[i] for i in layers))
            config.num_hidden_layers = len(layers)
            if before[2] is not None:
                config.layer_types = [before[2][i] for i in layers]
            self.hf.save_pretrained(str(folder), safe_serialization=True)
        finally:
            setattr(owner, name, before[0])
            config.num_hidden_layers = before[1]
            if before[2] is not None:
                config.layer_types = before[2]
        return Path(folder)

    @torch.no_grad()
    def check(self, ids: torch.Tensor) -> float:
        """Compare the layer-by-layer logits with the model's own forward on ``ids (B, T)``.

        Returns:
            The largest absolute logit difference.

        Raises:
            GeodriftError: when it exceeds ``1e-4`` times the largest logit (the model's forward does
                something this adapter does not), naming the architecture.
        """
        mine = self.logits(self.run_layers(self.embed(ids), range(self.n_layers))).float()
        theirs = self.hf(ids).logits.float()
        gap = float((mine - theirs).abs().max())
        if not gap <= 1e-4 * max(1.0, float(theirs.abs().max())):
            raise GeodriftError(f"MODEL {self.label}: running {type(self.hf).__name__} layer by layer gives logits "
                                f"{gap:.3g} away from its own forward; geodrift cannot prune this architecture "
                                "(its forward does more than embed, layers, norm and head)")
        return gap


def load_hf_causal(folder: str | Path, weights: WeightSet, label: str) -> HFCausalLM:
    """Load a Hugging Face folder with ``AutoModelForCausalLM`` (float32, CPU) as an :class:`HFCausalLM`.

    Args:
        folder: the model folder (``config.json`` and weights).
        weights: the projections (see :class:`HFCausalLM`).
        label: the model's name in messages.

    Raises:
        GeodriftError: transformers missing (names the extra), a folder it cannot load, or weights the
            folder lacks (transformers would fill them with random values).
    """
    transformers = import_transformers()
    logger = transformers.utils.logging
    before = logger.get_verbosity()
    logger.set_verbosity_error()
    try:
        hf, info = transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), torch_dtype=torch.float32, output_loading_info=True)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GeodriftError(f"MODEL {label}: transformers cannot load it as a causal LM: {first}") from None
    finally:
        logger.set_verbosity(before)
    missing = sorted(info.get("missing_keys", [])) + sorted(str(k[0]) for k in info.get("mismatched_keys", []))
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise GeodriftError(f"MODEL {label}: {len(missing)} weight(s) its config needs are missing or mis-shaped "
                            f"({shown}); transformers would draw them at random - fix the folder or its config.json")
    return HFCausalLM(hf, weights, label)
