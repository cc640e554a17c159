"""A :class:`~geodrift.lm.llama.LlamaLM` as a Hugging Face folder (``model.safetensors`` + ``config.json``).

One writer for every folder geodrift makes: the simulator's ``--save-hf-every`` series
(``<run folder>/hf/step-<step>/``, :func:`hf_step_dir`), and ``geodrift compress prune|share --save``
(a pruned model keeps its remaining layers renumbered ``0..n-1``; a shared-basis model is written
with its projections multiplied out, ``C_l B^T`` or ``B C_l``: dense tensors, so any Llama loader
reads it, and the file is not smaller than the original).

``transformers.LlamaForCausalLM.from_pretrained(folder)`` loads what :func:`save_hf` writes (tests
check the perplexity matches geodrift's). The parameter names already are Hugging Face Llama names
(``geodrift.weights.HF_LLAMA_PROJECTIONS``). Ablations a Llama config cannot express (activation,
residual, norm, attention, V activation) are kept under ``geodrift_model`` when any is off the
Llama default, so the folder says what it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.io.atomic import write_json, write_with
from geodrift.lm.llama import LlamaLM
from geodrift.weights import HF_LLAMA_PROJECTIONS

HF_DIR = "hf"
# The switches of a plain Llama: a model with all of them writes no ``geodrift_model``.
LLAMA_SWITCHES: dict[str, Any] = {"activation": "silu", "residual": True, "norm": "pre", "attention": "softmax",
                                  "v_activation": "none"}


def hf_step_dir(run_folder: str | Path, step: int) -> Path:
    """``<run folder>/hf/step-000120``: where the simulator writes its weights after ``step`` optimiser steps.

    Example:
        >>> hf_step_dir("runs/tiny/seed42", 120).as_posix()
        'runs/tiny/seed42/hf/step-000120'
    """
    return Path(run_folder) / HF_DIR / f"step-{step:06d}"


def hf_config(model: LlamaLM, *, n_layers: int | None = None, context_length: int | None = None) -> dict[str, Any]:
    """A transformers ``LlamaConfig`` dict (what ``config.json`` holds) for ``model``.

    Args:
        model: the Llama; its shape, ``rope_theta``, ``norm_eps``, tied embeddings and switches are read.
        n_layers: decoder layers written (a pruned model's count; None: all of the model's).
        context_length: ``max_position_embeddings`` (the checkpoint's context length; None: 8192).

    Returns:
        The config dict; ``geodrift_model`` holds the ablation switches when any is off Llama's default.

    Example:
        >>> m = LlamaLM(vocab_size=50, d_model=16, n_layers=2, n_heads=2, d_ff=32)
        >>> cfg = hf_config(m)
        >>> cfg["num_hidden_layers"], cfg["head_dim"], cfg["hidden_act"], "geodrift_model" in cfg
        (2, 8, 'silu', False)
    """
    embed = model.model.embed_tokens.weight
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": embed.shape[1], "intermediate_size": model.projection("mlp_gate", 0).weight.shape[0],
        "num_attention_heads": model.n_heads, "num_key_value_heads": model.n_kv_heads,
        "head_dim": model.head_dim, "num_hidden_layers": len(model.model.layers) if n_layers is None else n_layers,
        "vocab_size": embed.shape[0], "rope_theta": model.rope_theta, "rms_norm_eps": model.norm_eps,
        "tie_word_embeddings": bool(model.tie_embeddings), "hidden_act": model.switches["activation"],
        "attention_bias": False, "mlp_bias": False, "max_position_embeddings": int(context_length or 8192),
        "torch_dtype": "float32",
    }
    if model.switches != LLAMA_SWITCHES:
        config["geodrift_model"] = dict(model.switches)
    return config


def save_hf(model: LlamaLM, folder: str | Path, *, layers: Sequence[int] | None = None,
            weights: Mapping[tuple[str, int], torch.Tensor] | None = None, context_length: int | None = None,
            step: int | None = None, config_extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``model`` as a Hugging Face folder: float32 ``model.safetensors`` and ``config.json``, each atomically.

    Args:
        model: the Llama (any device; tensors are copied to the CPU as float32; the model is not changed).
        folder: the target folder (created if needed).
        layers: the decoder-layer indices to keep, in order, renumbered ``0..len(layers)-1`` in the
            file (pruning; None: all).
        weights: ``{(role, layer): (d_out, d_in)}`` dense projection weights written instead of the
            model's (e.g. a shared basis multiplied out); ``layer`` is the model's own index.
        context_length: ``max_position_embeddings`` (see :func:`hf_config`).
        step: optimiser steps taken (the simulator's series): recorded as ``geodrift_step`` in the
            config and the safetensors metadata.
        config_extra: further ``config.json`` keys (e.g. a source model's ``bos_token_id``); keys the shape
            and switches set (:func:`hf_config`) are never replaced.

    Returns:
        ``folder``.

    Raises:
        GeodriftError: for a layer index out of range or a replacement weight of the wrong shape.

    Example:
        >>> import tempfile
        >>> m = LlamaLM(vocab_size=50, d_model=16, n_layers=3, n_heads=2, d_ff=32)
        >>> out = save_hf(m, Path(tempfile.mkdtemp()) / "pruned", layers=[0, 2])
        >>> sorted(p.name for p in out.iterdir())
        ['config.json', 'model.safetensors']
    """
    from safetensors.torch import save_file

    n_layers = len(model.model.layers)
    keep = list(range(n_layers)) if layers is None else list(layers)
    if any(not 0 <= i < n_layers for i in keep) or len(set(keep)) != len(keep):
        raise GeodriftError(f"layers {keep}: each must be a distinct index in 0..{n_layers - 1}")
    replaced = {}
    for (role, layer), tensor in (weights or {}).items():
        if (role not in HF_LLAMA_PROJECTIONS or not 0 <= layer < n_layers
                or tuple(tensor.shape) != tuple(model.projection(role, layer).weight.shape)):
            raise GeodriftError(f"weights[{role!r}, {layer}]: shape {tuple(tensor.shape)} replaces no projection of "
                                f"this {n_layers}-layer model; pass a projection role, a layer index and its shape")
        replaced[f"model.layers.{layer}.{HF_LLAMA_PROJECTIONS[role]}.weight"] = tensor
    renumber = {old: new for new, old in enumerate(keep)}
    state: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and model.tie_embeddings:
            continue
        tensor = replaced.get(name, tensor)
        if name.startswith("model.layers."):
            index = int(name.split(".")[2])
            if index not in renumber:
                continue
            name = f"model.layers.{renumber[index]}." + name.split(".", 3)[3]
        state[name] = tensor.detach().to("cpu", torch.float32, copy=True).contiguous()
    metadata = {"format": "pt"} if step is None else {"format": "pt", "geodrift_step": str(step)}
    config = hf_config(model, n_layers=len(keep), context_length=context_length)
    if step is not None:
        config["geodrift_step"] = step
    for key, value in (config_extra or {}).items():
        config.setdefault(key, value)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    write_with(out / "model.safetensors", lambda tmp: save_file(state, str(tmp), metadata=metadata))
    write_json(out / "config.json", config)
    return out
