"""``--align`` for ``geodrift compare`` and ``drift``: checkpoints read into state dicts and aligned in memory.

Each checkpoint (any format the scanner reads) is loaded whole into a Hugging Face-named float64
state dict, B is brought into A's gauge by :func:`geodrift.gauge.align.align` (gains folded, residual
rotation, hidden permutations and scalings, V/O and Q/K maps), and both are handed to the series
scan as in-memory checkpoints labelled with their origin. Only the families whose gauge group
:mod:`geodrift.gauge.align` handles are accepted: llama/mistral (RMSNorm pre-norms, SwiGLU, RoPE,
no biases, no per-head q/k norms, no post-norms, no experts).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from geodrift.architectures import ARCHITECTURES as REGISTRY
from geodrift.errors import GeodriftError
from geodrift.gauge.align import (
    DEFAULT_HEAD_MAPS,
    AlignmentReport,
    align_folded,
    check_same_shape,
    fold_float64,
    shape_of,
)
from geodrift.gauge.orbit import GaugeShape, StateDict
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.open import open_model
from geodrift.scanner.readers import canonical_keys, load_canonical
from geodrift.scanner.safetensors_reader import StateDictCheckpoint
from geodrift.scanner.scan import heads_of
from geodrift.weights import HF_LLAMA_PROJECTIONS, TRANSFORMER_ROLES

ALIGNABLE_ARCHITECTURES = tuple(name for name, row in REGISTRY.items() if row.alignable)  # the table's rows
_GLOBAL_NAMES = {"embed": "model.embed_tokens.weight", "lm_head": "lm_head.weight", "norm_final": "model.norm.weight"}
_NORM_NAMES = {"norm_attn": "input_layernorm.weight", "norm_mlp": "post_attention_layernorm.weight"}


def check_alignable(ckpt: Checkpoint, option: str = "--align") -> tuple[int, int]:
    """Refuse a checkpoint outside the families :func:`geodrift.gauge.align.align` handles.

    Returns:
        ``(n_heads, n_kv_heads)`` from its config.

    Raises:
        GeodriftError: one line naming the model, the option and what is not handled.

    Example:
        >>> from geodrift.scanner.readers import open_checkpoint
        >>> check_alignable(open_checkpoint(None))
        (9, 3)
    """
    if ckpt.architecture not in ALIGNABLE_ARCHITECTURES:
        raise GeodriftError(f"{option}: {ckpt.label} is a {ckpt.architecture!r} model; alignment is derived for "
                            f"{'/'.join(ALIGNABLE_ARCHITECTURES)} only (RMSNorm pre-norms, SwiGLU, RoPE, no biases)")
    allowed = set(TRANSFORMER_ROLES) | set(_GLOBAL_NAMES) | set(_NORM_NAMES)
    extra = sorted({kind for kind, _ in ckpt.plan if kind not in allowed})
    if extra:
        raise GeodriftError(f"{option}: {ckpt.label} has {', '.join(extra)}, which the llama gauge group does not "
                            "cover (biases, q/k or post norms, experts); compare it without --align")
    heads = heads_of(ckpt)
    if heads is None:
        raise GeodriftError(f"{option}: {ckpt.label} states no head counts (config.json num_attention_heads); "
                            "alignment needs them - put the config.json beside the weights")
    return heads


def checkpoint_state_dict(ckpt: Checkpoint) -> StateDict:
    """Every tensor of a llama-family checkpoint, Hugging Face-named, float32 (tied heads left out).

    Example:
        >>> from geodrift.scanner.readers import open_checkpoint
        >>> sd = checkpoint_state_dict(open_checkpoint(None))  # doctest: +SKIP
        >>> sd["model.layers.0.self_attn.k_proj.weight"].shape  # doctest: +SKIP
        torch.Size([192, 576])
    """
    sd = {}
    tied = ("lm_head", None) not in ckpt.plan
    for kind, layer in canonical_keys(ckpt):
        if layer is None:
            if kind in _GLOBAL_NAMES and not (kind == "lm_head" and tied):
                sd[_GLOBAL_NAMES[kind]] = load_canonical(ckpt, (kind, layer))
        elif kind in _NORM_NAMES:
            sd[f"model.layers.{layer}.{_NORM_NAMES[kind]}"] = load_canonical(ckpt, (kind, layer))
        elif kind in HF_LLAMA_PROJECTIONS:
            sd[f"model.layers.{layer}.{HF_LLAMA_PROJECTIONS[kind]}.weight"] = load_canonical(ckpt, (kind, layer))
    return sd


def _config(shape: GaugeShape, architecture: str) -> dict[str, Any]:
    return {"model_type": architecture, "hidden_size": shape.n_heads * shape.head_dim,
            "num_hidden_layers": shape.n_layers, "num_attention_heads": shape.n_heads,
            "num_key_value_heads": shape.n_kv_heads}


# Model-sized float64 copies alive at once while a pair is aligned: A and B folded (each read in float32 and
# converted tensor by tensor, the float32 copy emptied as it goes; B rotated in place; the outputs converted to
# float32 tensor by tensor) and the scan's float32 pair. Peak RSS of `geodrift compare SMOLLM2 SMOLLM2 --align
# --roles up --layers 0-3` (/usr/bin/time -v): 5.32 GB when every step held its own copy, 3.58 GB now.
COPIES = 3


def aligned_series(models: list[Any], names: str | Path | None = None, option: str = "--align",
                   head_maps: str = DEFAULT_HEAD_MAPS, max_memory: int | None = None
                   ) -> tuple[list[StateDictCheckpoint], list[AlignmentReport]]:
    """Read every model, fold its gains and bring each one after the first into the first one's gauge.

    Args:
        models: paths (or anything :func:`geodrift.scanner.open.open_model` takes), at least 2.
        names: a ``--names`` mapping for unknown tensor names.
        option: the option named in errors (``--align``).
        head_maps: as :func:`geodrift.gauge.align.align`'s (default: ``orthogonal``,
            :data:`geodrift.gauge.align.DEFAULT_HEAD_MAPS` says why).
        max_memory: refuse (before reading any tensor) when the float64 copies alignment holds would
            exceed this many bytes (the CLI's ``--max-memory``).

    Returns:
        ``(checkpoints, reports)``: in-memory checkpoints (the first folded, the others aligned to it,
        each labelled with its origin) and one :class:`AlignmentReport` per model after the first.

    Raises:
        GeodriftError: a model outside the alignable families, two models of different families or
            shapes (one line naming both models and the option), or more memory than ``max_memory``.
    """
    ckpts = [open_model(m, names) for m in models]
    heads = [check_alignable(c, option) for c in ckpts]
    first = ckpts[0]
    for ckpt, h in zip(ckpts[1:], heads[1:], strict=True):
        if ckpt.architecture != first.architecture or h != heads[0]:
            raise GeodriftError(f"{option}: {first.label} is {first.architecture} with {heads[0][0]}/{heads[0][1]} "
                                f"heads but {ckpt.label} is {ckpt.architecture} with {h[0]}/{h[1]}; {option} needs "
                                "two models of one architecture and shape")
    if max_memory is not None:
        params = sum(math.prod(first.shape(name)) for name in first.tensor_names())
        need = COPIES * 8 * params
        if need > max_memory:
            raise GeodriftError(f"{option}: aligning {first.label} holds about {need / 2**30:.1f} GiB of float64 "
                                f"copies, above --max-memory {max_memory / 2**30:.1f} GiB; raise --max-memory or "
                                "compare without --align")
    sd_first = checkpoint_state_dict(first)
    shape = shape_of(sd_first, *heads[0])
    folded = fold_float64(sd_first, shape)  # sd_first emptied: the float32 copy goes as the float64 one grows
    aligned: list[StateDictCheckpoint] = []
    reports: list[AlignmentReport] = []
    for ckpt in ckpts[1:]:
        sd = checkpoint_state_dict(ckpt)
        check_same_shape(folded, sd, shape, first.label, ckpt.label)
        b, report = align_folded(folded, fold_float64(sd, shape), shape, head_maps=head_maps)
        aligned.append(_in_memory(b, f"{ckpt.label} (aligned to {first.label})", shape, first.architecture))
        reports.append(report)
    return [_in_memory(folded, f"{first.label} (gains folded)", shape, first.architecture), *aligned], reports


def _in_memory(sd: StateDict, label: str, shape: GaugeShape, architecture: str) -> StateDictCheckpoint:
    # float32, emptying ``sd`` as it goes (each float64 tensor freed once converted)
    return StateDictCheckpoint({k: sd.pop(k).to(torch.float32) for k in list(sd)}, label, _config(shape, architecture))
