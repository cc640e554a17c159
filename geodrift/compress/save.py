"""``--save DIR``: the compressed model as a Hugging Face folder (``model.safetensors`` + ``config.json``).

``transformers.LlamaForCausalLM.from_pretrained(DIR)`` loads it (a test checks the perplexity
matches geodrift's). A pruned model keeps its remaining layers renumbered 0..L-n-1; a shared-basis
model is written with its projections multiplied out (``C_l B^T`` or ``B C_l``: dense tensors, so
any Llama loader reads it; the file is not smaller than the original).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

from geodrift.atomic import write_json, write_with
from geodrift.compress.model import Setup, kept_layers


def hf_config(setup: Setup, n_layers: int) -> dict[str, object]:
    """A ``LlamaConfig`` dict for the loaded model with ``n_layers`` decoder layers."""
    m, cfg = setup.model, setup.config
    n_heads = int(cfg["n_heads"])
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": m.model.embed_tokens.weight.shape[1],
        "intermediate_size": m.projection("mlp_gate", 0).weight.shape[0],
        "num_attention_heads": n_heads, "num_key_value_heads": int(cfg.get("n_kv_heads") or n_heads),
        "head_dim": m.head_dim, "num_hidden_layers": n_layers, "vocab_size": m.model.embed_tokens.weight.shape[0],
        "rope_theta": m.rope_theta, "rms_norm_eps": float(cfg.get("norm_eps") or 1e-5),
        "tie_word_embeddings": bool(m.tie_embeddings), "hidden_act": "silu", "attention_bias": False,
        "mlp_bias": False, "max_position_embeddings": int(cfg.get("context_length") or 8192),
        "torch_dtype": "float32",
    }


def save_hf(setup: Setup, folder: str | Path, removed: Iterable[int] = ()) -> Path:
    """Write the model as it is now (weights in place), without the ``removed`` layers, to ``folder``.

    Returns:
        The folder (created if needed; both files written atomically).
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    keep = kept_layers(setup.n_layers, removed)
    renumber = {old: new for new, old in enumerate(keep)}
    state: dict[str, torch.Tensor] = {}
    for name, tensor in setup.model.state_dict().items():
        if name == "lm_head.weight" and setup.model.tie_embeddings:
            continue
        if name.startswith("model.layers."):
            index = int(name.split(".")[2])
            if index not in renumber:
                continue
            name = f"model.layers.{renumber[index]}." + name.split(".", 3)[3]
        state[name] = tensor.detach().contiguous().clone()
    write_with(folder / "model.safetensors", lambda tmp: save_file(state, str(tmp), metadata={"format": "pt"}))
    write_json(folder / "config.json", hf_config(setup, len(keep)))
    return folder
