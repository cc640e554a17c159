"""The transformer simulator's weights as Hugging Face folders (``model.safetensors`` + ``config.json``).

``geodrift simulate transformer --out DIR --save-hf-every N`` calls :func:`save_hf_folder` at step 0
(the init), every ``N`` steps and at the end, into ``DIR/<config>/seed<S>/hf/step-<step>/``: a series
from one training run that ``geodrift drift`` and ``geodrift compare`` (or any Hugging Face tool)
read back. The simulator's parameter names already are Hugging Face Llama names
(``geodrift.weights.HF_LLAMA_PROJECTIONS``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from geodrift.atomic import write_json, write_with
from geodrift.lm.llama import LlamaLM
from geodrift.sim.config import LlamaConfig

HF_DIR = "hf"


def hf_step_dir(run_folder: str | Path, step: int) -> Path:
    """``<run folder>/hf/step-000120``: where the weights after ``step`` optimiser steps go."""
    return Path(run_folder) / HF_DIR / f"step-{step:06d}"


def hf_config(cfg: LlamaConfig, vocab_size: int) -> dict[str, Any]:
    """A transformers ``LlamaConfig``-style config.json for the simulator's model.

    Ablations a Llama config cannot express (activation, residual, norm, attention, V activation)
    are kept under ``geodrift_model`` so the folder says what it holds.
    """
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads, "intermediate_size": cfg.d_ff,
        "vocab_size": vocab_size, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings, "hidden_act": cfg.activation, "torch_dtype": "float32",
        "geodrift_model": {"activation": cfg.activation, "residual": cfg.residual, "norm": cfg.norm,
                           "attention": cfg.attention, "v_activation": cfg.v_activation},
    }


def save_hf_folder(model: LlamaLM, config: dict[str, Any], folder: str | Path, step: int) -> Path:
    """Write the model's weights (float32 safetensors) and ``config`` into ``folder``, each file atomically.

    Args:
        model: the simulator's Llama (any device; tensors are copied to the CPU).
        config: from :func:`hf_config`; ``geodrift_step`` is added.
        folder: the target folder (created).
        step: optimiser steps taken, recorded in the config and the safetensors metadata.

    Returns:
        ``folder``.
    """
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    state = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in model.state_dict().items()
             if not (model.tie_embeddings and name == "lm_head.weight")}
    write_with(out / "model.safetensors",
               lambda tmp: save_file(state, str(tmp), metadata={"format": "pt", "geodrift_step": str(step)}))
    write_json(out / "config.json", {**config, "geodrift_step": step})
    return out
