"""The model a fine-tuning run trains: loaded through :mod:`geodrift.pretrained`, saved as a Hugging Face folder.

- llama/mistral checkpoints (the embedded SmolLM2-135M GGUF, dequantised to float32, included) run in
  geodrift's own Llama (:class:`~geodrift.lm.llama.LlamaLM`, whose logits match ``transformers``'
  ``LlamaForCausalLM``) and are saved with :func:`geodrift.lm.hf.save_hf`;
- any other local ``transformers`` causal-LM folder is loaded with ``AutoModelForCausalLM`` (float32)
  and saved with ``save_pretrained``.

Either way the folder gets the model's tokenizer (:func:`geodrift.pretrained.keep_tokenizer`), so
``geodrift drift``, ``geodrift compare`` and ``transformers`` read it alone. Dropout stays off (eval mode)
during training: a run is a deterministic function of its spec.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from geodrift.errors import GeodriftError
from geodrift.finetune.inputs import check_model
from geodrift.lm.hf import save_hf
from geodrift.lm.llama import LlamaLM
from geodrift.lm.tokenizer import Tokenizer
from geodrift.pretrained import (
    keep_tokenizer,
    model_from_checkpoint,
    open_model,
    runs_in_geodrift,
    tokenizer_for,
)

_LAYER = re.compile(r"(?:^|\.)(?:layers|h)\.(\d+)\.")


def layer_of(name: str) -> int | None:
    """The decoder-layer index a parameter belongs to (``model.layers.3.mlp...`` -> 3), None outside the layers.

    Example:
        >>> layer_of("model.layers.12.self_attn.q_proj.weight"), layer_of("model.norm.weight")
        (12, None)
    """
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


@dataclass
class TrainableLM:
    """A causal LM being fine-tuned: the module, how to get its logits and how to save it."""

    module: nn.Module  # LlamaLM, or the transformers PreTrainedModel
    runner: Any  # LlamaLM or HFCausalLM: embed(ids), run_layers(h, layers, record), logits(h), n_layers
    source: str | None  # the checkpoint it was loaded from (None: the embedded model)
    label: str
    architecture: str
    tokenizer: Tokenizer

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, T) -> (B, T, vocab)``."""
        if isinstance(self.module, LlamaLM):
            return self.module(ids)
        return self.module(ids).logits

    @property
    def n_layers(self) -> int:
        """Decoder layers."""
        return int(self.runner.n_layers)

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """The module's parameters under their checkpoint names."""
        return self.module.named_parameters()

    def save(self, folder: Path, step: int) -> None:
        """Write the weights (float32 safetensors), ``config.json`` and the tokenizer into ``folder``."""
        if isinstance(self.module, LlamaLM):
            save_hf(self.module, folder, step=step)
        else:
            hf: Any = self.module
            hf.save_pretrained(str(folder), safe_serialization=True)
        keep_tokenizer(self.source, folder)


def load_trainable(model: str | None, device: torch.device) -> TrainableLM:
    """Open ``model`` (None: the embedded SmolLM2-135M) for fine-tuning, float32 on ``device``.

    Raises:
        GeodriftError: an unreadable checkpoint; another architecture outside a Hugging Face folder (a GGUF or
            bare safetensors file of a non-Llama model); a mixture of experts; a folder ``transformers`` cannot
            load as a causal LM; no tokenizer beside it.
    """
    check_model(model)
    ckpt = open_model(model)
    tokenizer = tokenizer_for(model)
    runner = model_from_checkpoint(ckpt)
    module = runner if isinstance(runner, LlamaLM) else runner.hf
    if not runs_in_geodrift(ckpt) and not hasattr(module, "save_pretrained"):  # pragma: no cover - transformers always has it
        raise GeodriftError(f"MODEL {ckpt.label}: cannot be saved as a Hugging Face folder")
    module.to(device=device, dtype=torch.float32).eval()
    for parameter in module.parameters():
        parameter.requires_grad_(True)
    embedding: Any = module.model.embed_tokens if isinstance(module, LlamaLM) else module.get_input_embeddings()
    rows = int(embedding.weight.shape[0])
    if rows < tokenizer.vocab_size:
        raise GeodriftError(f"MODEL {ckpt.label}: its tokenizer has {tokenizer.vocab_size} tokens but the embedding "
                            f"{rows} rows; the tokenizer beside it is not its own")
    return TrainableLM(module, runner, model, ckpt.label, ckpt.architecture, tokenizer)


def all_finite(module: nn.Module) -> bool:
    """Whether every parameter of ``module`` is finite."""
    return all(bool(torch.isfinite(p).all()) for p in module.parameters())


def state_copy(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every parameter (the base a run's changes are measured from)."""
    return {name: p.detach().clone() for name, p in module.named_parameters()}
