"""The folder ``geodrift merge --out DIR`` writes: a Hugging Face Llama folder that ``transformers`` loads.

- ``model.safetensors`` (float32) and ``config.json``, through geodrift's one Hugging Face writer
  (:func:`geodrift.lm.hf.save_hf`): the shape, RoPE base, norm epsilon and tie of the merged model, plus the
  reference model's other ``config.json`` keys (``bos_token_id`` ...; from a GGUF: its token ids);
- the tokenizer files of the first model that has them (:func:`geodrift.pretrained.keep_tokenizer`: a Hugging
  Face folder's files copied byte for byte, a GGUF's tokenizer written as ``tokenizer.json``), and
  ``generation_config.json`` where that model's folder has one;
- ``geodrift_merge.json``: what was merged, how, and what the pre-merge check found.

The folder is written whole into a temporary sibling and renamed into place
(:func:`geodrift.io.outdir.replace_folder`): a failure leaves nothing half-written, and a folder holding a
file geodrift did not write is refused before any work (:func:`check_out`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from geodrift.io.atomic import document, write_json, write_with
from geodrift.io.outdir import check_replace_folder, replace_folder
from geodrift.lm.hf import save_hf
from geodrift.merging.inputs import Model
from geodrift.pretrained import keep_tokenizer, llama_shell

StateDict = dict[str, torch.Tensor]
# config.json keys the writer sets from the merged model itself (never copied from a source's config).
_SHAPE_KEYS = frozenset({"architectures", "model_type", "hidden_size", "intermediate_size", "num_attention_heads",
                         "num_key_value_heads", "head_dim", "num_hidden_layers", "vocab_size", "rope_theta",
                         "rms_norm_eps", "tie_word_embeddings", "hidden_act", "torch_dtype", "dtype",
                         "max_position_embeddings"})
_GGUF_TOKEN_IDS = {"bos_token_id": "tokenizer.ggml.bos_token_id", "eos_token_id": "tokenizer.ggml.eos_token_id",
                   "pad_token_id": "tokenizer.ggml.padding_token_id"}
RECORD = "geodrift_merge.json"


def check_out(out: str | Path, force: bool, inputs: Iterable[str | Path | None]) -> None:
    """Refuse ``--out`` before any work: an input (or inside one), a file, a folder holding a file geodrift did not
    write, or geodrift's earlier output without ``--force`` (:func:`geodrift.io.outdir.check_replace_folder`)."""
    check_replace_folder(out, force=force, inputs=inputs, option="--out")


def config_extra(model: Model) -> dict[str, Any]:
    """The reference's ``config.json`` keys that do not describe the shape (token ids and the like).

    Example:
        >>> from geodrift.pretrained import open_checkpoint
        >>> config_extra(Model(None, "smollm2", open_checkpoint(None), (9, 3)))
        {'bos_token_id': 1, 'eos_token_id': 2, 'pad_token_id': 2}
    """
    raw = model.ckpt.config.get("raw") or {}
    if model.ckpt.format == "gguf":
        return {key: int(raw[name]) for key, name in _GGUF_TOKEN_IDS.items() if isinstance(raw.get(name), int)}
    return {key: value for key, value in raw.items() if key not in _SHAPE_KEYS and not key.startswith("_")}


def write_merged(merged: StateDict, like: Model, tokenizer_from: Model | None, out: str | Path, *, force: bool,
                 inputs: Iterable[str | Path | None], record: dict[str, Any]) -> list[str]:
    """Write the merged model as a Hugging Face folder at ``out`` (atomically; see the module docstring).

    Args:
        merged: the merged tensors (HF names; no ``lm_head.weight``: a tied head).
        like: the model whose config the folder takes (the reference).
        tokenizer_from: the model whose tokenizer files are copied (None: none has one).
        out: the folder; force: replace geodrift's earlier output there; inputs: the paths read (never written).
        record: what ``geodrift_merge.json`` holds.

    Returns:
        The names of the files written, sorted.
    """
    tie = "lm_head.weight" not in merged
    model = llama_shell(like.ckpt, tie)
    state = {k: v.to(torch.float32) for k, v in merged.items()}
    if tie:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    del state

    def write(folder: Path) -> None:
        save_hf(model, folder, context_length=like.ckpt.config.get("context_length"), config_extra=config_extra(like))
        if tokenizer_from is not None:
            keep_tokenizer(tokenizer_from.path, folder)
            source = tokenizer_from.source if tokenizer_from.source.is_dir() else tokenizer_from.source.parent
            generation = source / "generation_config.json"
            if tokenizer_from.path is not None and generation.is_file():
                write_with(folder / generation.name, partial(shutil.copyfile, generation))
        write_json(folder / RECORD, document("merge_report", record))

    folder = replace_folder(out, write, force=force, inputs=inputs, option="--out")
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
