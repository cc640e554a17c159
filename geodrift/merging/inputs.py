"""The pre-flight of ``geodrift merge``: every input opened (headers only) and compared before any tensor is read.

Refused in one line, naming both models and what differs:

- **architecture**: a model outside the families whose gauge group geodrift aligns (llama/mistral: RMSNorm
  pre-norms, SwiGLU, RoPE, no biases, no q/k or post norms, no experts), or two different architectures;
- **config**: head counts or RoPE base that differ (the same tensors would compute different functions);
- **shapes**: a tensor present in one model and not the other, or of another shape (named, both shapes);
- **tokenizer**: two tokenizers whose tokens or merges differ (the first differing token id named). A model
  without a tokenizer (a bare safetensors file, a simulator folder) is not compared, and the report says so.

Lineage needs the weights and is judged after reading (:mod:`geodrift.merging.frame`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.align import shape_of
from geodrift.gauge.orbit import GaugeShape, StateDict
from geodrift.pretrained import (
    canonical_keys,
    embedded_model_path,
    llama_heads,
    llama_state_dict,
    open_checkpoint,
    tokenizer_vocabulary,
)

OPTION = "merge"


@dataclass
class Model:
    """One input: where it is, its name in messages, its open checkpoint (headers)."""

    path: Path | None  # None: the embedded SmolLM2
    label: str
    ckpt: Any
    heads: tuple[int, int]
    has_tokenizer: bool = False

    @property
    def source(self) -> Path:
        """The file or folder read (the embedded GGUF's path for ``path=None``)."""
        return self.path if self.path is not None else embedded_model_path()


@dataclass
class Preflight:
    """Every input, checked alike: the models in order (``--base`` first when given) and what was not compared."""

    models: list[Model]
    parameters: int
    notes: list[str] = field(default_factory=list)


def open_models(paths: list[str | Path | None]) -> Preflight:
    """Open every model (headers) and refuse any pair that differs in architecture, config, shapes or tokenizer.

    Args:
        paths: the models, the reference first (``--base``, else ``A``); None: the embedded SmolLM2.

    Returns:
        The :class:`Preflight`.

    Raises:
        GeodriftError: one line naming both models and what differs (see the module docstring).
    """
    models = []
    for path in paths:
        ckpt = open_checkpoint(path)
        models.append(Model(None if path is None else Path(path), ckpt.label, ckpt, llama_heads(ckpt, OPTION)))
    first = models[0]
    for other in models[1:]:
        _same_architecture(first, other)
        _same_shapes(first, other)
    notes = _same_tokenizer(models)
    params = sum(math.prod(first.ckpt.canonical_shape(key)) for key in canonical_keys(first.ckpt)
                 if key in first.ckpt.plan)  # a tied head reads as the embedding: counted once
    return Preflight(models, params, notes)


def _same_architecture(a: Model, b: Model) -> None:
    if a.ckpt.architecture != b.ckpt.architecture:
        raise GeodriftError(f"{OPTION}: architecture differs: {a.label} is {a.ckpt.architecture!r} but {b.label} is "
                            f"{b.ckpt.architecture!r}; merge models of one architecture")
    if a.heads != b.heads:
        raise GeodriftError(f"{OPTION}: config differs: {a.label} has {a.heads[0]}/{a.heads[1]} query/key-value heads "
                            f"but {b.label} has {b.heads[0]}/{b.heads[1]}; merge models of one shape")
    ra, rb = a.ckpt.config.get("rope_theta"), b.ckpt.config.get("rope_theta")
    if ra is not None and rb is not None and float(ra) != float(rb):
        raise GeodriftError(f"{OPTION}: config differs: {a.label} has rope_theta {ra} but {b.label} has {rb}; the same "
                            "weights compute different functions - merge models of one config")


def _same_shapes(a: Model, b: Model) -> None:
    keys_a, keys_b = set(canonical_keys(a.ckpt)), set(canonical_keys(b.ckpt))
    for key in sorted(keys_a | keys_b, key=lambda k: (k[1] is not None, k[1] or 0, k[0])):
        if key == ("lm_head", None):
            continue  # a tied head reads as the embedding; ties are merged after reading
        sa = "missing" if key not in keys_a else "x".join(map(str, a.ckpt.canonical_shape(key)))
        sb = "missing" if key not in keys_b else "x".join(map(str, b.ckpt.canonical_shape(key)))
        if sa != sb:
            where = key[0] if key[1] is None else f"{key[0]} of layer {key[1]}"
            holder = a.ckpt if key in a.ckpt.plan else b.ckpt
            name = holder.plan[key].name if key in holder.plan else where
            raise GeodriftError(f"{OPTION}: shapes differ: {where} ({name}) is {sa} in {a.label} but {sb} in {b.label}; "
                                "merge models of one shape")


def _same_tokenizer(models: list[Model]) -> list[str]:
    vocabularies = [(m, tokenizer_vocabulary(m.path)) for m in models]
    for m, v in vocabularies:
        m.has_tokenizer = v is not None
    having = [(m, v) for m, v in vocabularies if v is not None]
    notes = [f"tokenizer: {m.label} has none (no tokenizer.json beside it); not compared" for m, v in vocabularies
             if v is None]
    for (m, (tokens, merges)) in having[1:]:
        ref, (ref_tokens, ref_merges) = having[0]
        if tokens != ref_tokens:
            first = next((i for i, (x, y) in enumerate(zip(ref_tokens, tokens, strict=False)) if x != y),
                         min(len(tokens), len(ref_tokens)))
            shown = (f"token {first} is {ref_tokens[first]!r} vs {tokens[first]!r}"
                     if first < min(len(tokens), len(ref_tokens)) else f"{len(ref_tokens)} vs {len(tokens)} tokens")
            raise GeodriftError(f"{OPTION}: tokenizer differs: {ref.label} and {m.label} ({shown}); the same token ids "
                                "mean different text - merge models that share a tokenizer")
        if merges != ref_merges:
            raise GeodriftError(f"{OPTION}: tokenizer differs: {ref.label} and {m.label} have the same tokens but "
                                f"different BPE merges ({len(ref_merges)} vs {len(merges)}); merge models that share "
                                "a tokenizer")
    return notes


def read_state(model: Model) -> StateDict:
    """The model's tensors (float32, HF names), each checked finite; a tied head is left out.

    Raises:
        GeodriftError: a tensor holding NaN or Inf, named with its file.
    """
    try:
        return llama_state_dict(model.ckpt)
    except GeodriftError as error:
        text = str(error)
        if "NaN or Inf" not in text:
            raise
        raise GeodriftError(f"{text.split(';')[0]}; merge needs finite weights - re-export the model or leave it "
                            "out") from None


def gauge_shape(sd: StateDict, model: Model) -> GaugeShape:
    """The gauge shape of a state dict read from ``model``."""
    return shape_of(sd, *model.heads)


def tied(sd: StateDict) -> bool:
    """Whether a state dict read by :func:`read_state` has a tied head (no ``lm_head.weight``)."""
    return "lm_head.weight" not in sd


def untie(sd: StateDict) -> StateDict:
    """``sd`` with an explicit ``lm_head.weight`` (the embedding, for a tied head)."""
    out = dict(sd)
    out.setdefault("lm_head.weight", out["model.embed_tokens.weight"])
    return out


def float32(sd: StateDict) -> StateDict:
    """Every tensor as float32, emptying ``sd`` as it goes."""
    return {k: sd.pop(k).to(torch.float32) for k in list(sd)}
