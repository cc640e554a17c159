"""A small family of real Llamas for the merge tests: a base trained on text, two fine-tunes, gauged copies.

The base is geodrift's own Llama (2 layers, width 32, 4 query / 2 key-value heads, byte tokens) trained on the
offline corpus (the standard library's documentation); the fine-tunes continue it for a few steps on two
different texts (more documentation, and Python source code from the standard library). Each is written as a
Hugging Face folder (``save_hf``), as a user's checkpoints would be.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from geodrift.gauge.orbit import GaugeShape, StateDict
from geodrift.lm.hf import save_hf
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import encode_ids, eval_windows, lm_loss, load_corpus, sample_batch
from geodrift.lm.tokenizer import byte_tokenizer

SHAPE = GaugeShape(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8)
SEQ = 32


def new_model(seed: int = 0, tie: bool = False) -> LlamaLM:
    return LlamaLM(256, 32, SHAPE.n_layers, SHAPE.n_heads, 64, n_kv_heads=SHAPE.n_kv_heads, init_std=0.05,
                   tie_embeddings=tie, generator=torch.Generator().manual_seed(seed))


@functools.lru_cache(maxsize=1)
def texts() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Byte ids of the corpus's training split, of some standard-library source code, and of the held-out split."""
    corpus = load_corpus(None, max_chars=400_000)
    code = (Path(json.__file__).parent / "decoder.py").read_text(encoding="utf-8") * 4
    tok = byte_tokenizer()
    return encode_ids(tok, corpus.train), encode_ids(tok, code), encode_ids(tok, corpus.valid)


def heldout(count: int = 24) -> torch.Tensor:
    return eval_windows(texts()[2], SEQ, count)


def train(model: LlamaLM, ids: torch.Tensor, steps: int, lr: float, seed: int) -> LlamaLM:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        loss, _ = lm_loss(model, sample_batch(ids, 8, SEQ, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@functools.lru_cache(maxsize=4)
def trained_state(seed: int, steps: int = 200) -> dict[str, torch.Tensor]:
    """A base trained ``steps`` steps from init ``seed`` (float32 state dict, untied)."""
    return {k: v.detach().clone() for k, v in train(new_model(seed), texts()[0], steps, 3e-3, seed).state_dict().items()}


@functools.lru_cache(maxsize=2)
def fine_tunes() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Two fine-tunes of ``trained_state(0)``: 25 steps on documentation, 25 on source code (lr 3e-4)."""
    out = []
    for which, seed in ((0, 11), (1, 12)):
        model = new_model()
        model.load_state_dict(trained_state(0))
        out.append({k: v.detach().clone() for k, v in train(model, texts()[which], 25, 3e-4, seed).state_dict().items()})
    return out[0], out[1]


def write(sd: StateDict, folder: Path) -> Path:
    """A state dict (any dtype, tied or untied, gains folded or not) as a Hugging Face folder."""
    model = new_model(tie="lm_head.weight" not in sd)
    state = {k: v.to(torch.float32) for k, v in sd.items()}
    state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    model.load_state_dict(state)
    return save_hf(model, folder)
