"""Held-out NLL of a model folder (or file), by geodrift's own Llama and by ``transformers``, on the same windows.

The windows default to the held-out split of geodrift's offline corpus (the Python standard library's
documentation, :func:`geodrift.lm.text.load_corpus`), tokenized with the model's own tokenizer
(:func:`geodrift.pretrained.tokenizer_for`). The two evaluations read the same folder: geodrift's through its
readers into :class:`~geodrift.lm.llama.LlamaLM`, transformers' through ``AutoModelForCausalLM``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from geodrift.lm.hf_causal import import_transformers
from geodrift.lm.text import encode_ids, eval_windows, load_corpus, perplexity
from geodrift.pretrained import llama_from_checkpoint, open_checkpoint, tokenizer_for


def heldout_windows(model: str | Path | None, seq_len: int = 128, count: int = 16, text: str | None = None
                    ) -> torch.Tensor:
    """``(count, seq_len + 1)`` consecutive windows of ``text`` (default: the offline corpus's held-out split),
    tokenized with ``model``'s tokenizer.

    Raises:
        GeodriftError: the model has no tokenizer, or the text is shorter than one window.
    """
    tokenizer = tokenizer_for(model)
    ids = encode_ids(tokenizer, load_corpus(None).valid if text is None else text)
    return eval_windows(ids, seq_len, count)


def geodrift_nll(model: str | Path | None, windows: torch.Tensor) -> float:
    """Mean NLL (nats per predicted token) of the checkpoint at ``model``, run by geodrift's Llama."""
    return perplexity(llama_from_checkpoint(open_checkpoint(model)), windows, batch=8)["nll"]


class _Logits(nn.Module):
    # A transformers causal LM as a module whose forward returns the logits tensor (what perplexity reads).
    def __init__(self, hf: nn.Module) -> None:
        super().__init__()
        self.hf = hf

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.hf(ids).logits


def transformers_nll(folder: str | Path, windows: torch.Tensor) -> float:
    """Mean NLL of the Hugging Face folder loaded by ``transformers.AutoModelForCausalLM`` (float32, CPU)."""
    transformers = import_transformers()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.float32)
    return perplexity(_Logits(hf.eval()), windows, batch=8)["nll"]
