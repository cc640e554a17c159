"""Writers of small, real checkpoints (HF safetensors folders, GGUF files) for the reader tests.

The GGUF writer applies llama.cpp's conversions the way ``convert_hf_to_gguf.py`` does (its
``LlamaModel.permute`` of Q/K rows, written out here independently of geodrift's code, and
gemma's ``norm + 1``), so reading back must undo them.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors.torch import save_file


def llama_state(n_layers: int = 3, d: int = 32, n_heads: int = 4, n_kv: int = 2, d_ff: int = 48,
                vocab: int = 50, seed: int = 0, gemma2: bool = False, qk_norm: bool = False) -> dict[str, torch.Tensor]:
    """A Hugging Face llama-style state dict with distinct random values everywhere."""
    g = torch.Generator().manual_seed(seed)
    hd = d // n_heads
    state: dict[str, torch.Tensor] = {"model.embed_tokens.weight": torch.randn(vocab, d, generator=g)}
    for i in range(n_layers):
        p = f"model.layers.{i}."
        state[p + "self_attn.q_proj.weight"] = torch.randn(n_heads * hd, d, generator=g)
        state[p + "self_attn.k_proj.weight"] = torch.randn(n_kv * hd, d, generator=g)
        state[p + "self_attn.v_proj.weight"] = torch.randn(n_kv * hd, d, generator=g)
        state[p + "self_attn.o_proj.weight"] = torch.randn(d, n_heads * hd, generator=g)
        state[p + "mlp.gate_proj.weight"] = torch.randn(d_ff, d, generator=g)
        state[p + "mlp.up_proj.weight"] = torch.randn(d_ff, d, generator=g)
        state[p + "mlp.down_proj.weight"] = torch.randn(d, d_ff, generator=g)
        state[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
        if gemma2:
            state[p + "post_attention_layernorm.weight"] = 0.1 * torch.randn(d, generator=g)
            state[p + "pre_feedforward_layernorm.weight"] = 0.1 * torch.randn(d, generator=g)
            state[p + "post_feedforward_layernorm.weight"] = 0.1 * torch.randn(d, generator=g)
        else:
            state[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
        if qk_norm:
            state[p + "self_attn.q_norm.weight"] = 1 + 0.1 * torch.randn(hd, generator=g)
            state[p + "self_attn.k_norm.weight"] = 1 + 0.1 * torch.randn(hd, generator=g)
    state["model.norm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
    return state


def hf_config(model_type: str = "llama", n_layers: int = 3, d: int = 32, n_heads: int = 4, n_kv: int = 2,
              d_ff: int = 48, vocab: int = 50, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "model_type": model_type, "num_hidden_layers": n_layers, "hidden_size": d,
        "num_attention_heads": n_heads, "num_key_value_heads": n_kv, "intermediate_size": d_ff,
        "vocab_size": vocab, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
    }
    config.update(extra)
    return config


def write_hf_folder(folder: Path, state: dict[str, torch.Tensor], config: dict[str, object] | None,
                    shards: int = 1, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write ``model.safetensors`` (or ``shards`` files plus the index json) and ``config.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(state)
    if shards == 1:
        save_file({n: state[n].to(dtype).contiguous() for n in names}, str(folder / "model.safetensors"))
    else:
        weight_map = {}
        for s in range(shards):
            part = names[s::shards]
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: state[n].to(dtype).contiguous() for n in part}, str(folder / fname))
            weight_map.update({n: fname for n in part})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def converter_permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute, restated."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


_HF_TO_GGUF = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
}


def hf_to_gguf_tensors(state: dict[str, torch.Tensor], arch: str, n_heads: int, n_kv: int) -> dict[str, np.ndarray]:
    """Rename (and for llama permute Q/K, for gemma add 1 to norms) like llama.cpp's converter."""
    gemma = arch.startswith("gemma")
    post = {"post_attention_layernorm.weight": "post_attention_norm.weight",
            "pre_feedforward_layernorm.weight": "ffn_norm.weight",
            "post_feedforward_layernorm.weight": "post_ffw_norm.weight"} if arch in ("gemma2", "gemma3") else {
        "post_attention_layernorm.weight": "ffn_norm.weight"}
    table = {**_HF_TO_GGUF, **post}
    out: dict[str, np.ndarray] = {}
    for name, tensor in state.items():
        data = tensor.float().numpy().copy()
        if name.endswith("norm.weight") and gemma:
            data = data + 1
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = data
        elif name == "model.norm.weight":
            out["output_norm.weight"] = data
        elif name == "lm_head.weight":
            out["output.weight"] = data
        else:
            parts = name.split(".")
            layer, suffix = int(parts[2]), ".".join(parts[3:])
            if arch == "llama" and suffix == "self_attn.q_proj.weight":
                data = converter_permute(data, n_heads, n_heads)
            if arch == "llama" and suffix == "self_attn.k_proj.weight":
                data = converter_permute(data, n_heads, n_kv)
            out[f"blk.{layer}.{table[suffix]}"] = data
    return out


def write_gguf(path: Path, arch: str, tensors: dict[str, np.ndarray], metadata: dict[str, int | float] | None = None,
               qtypes: dict[str, gguf.GGMLQuantizationType] | None = None) -> Path:
    """Write a GGUF file; ``qtypes[name]`` quantizes that tensor with gguf.quants (default F32)."""
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in (metadata or {}).items():
        if isinstance(value, float):
            writer.add_float32(f"{arch}.{key}", value)
        else:
            writer.add_uint32(f"{arch}.{key}", value)
    for name, data in tensors.items():
        qtype = (qtypes or {}).get(name, gguf.GGMLQuantizationType.F32)
        if qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, data.astype(np.float32))
        else:
            writer.add_tensor(name, gguf.quants.quantize(data.astype(np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def llama_metadata(n_layers: int, d: int, n_heads: int, n_kv: int, d_ff: int) -> dict[str, int | float]:
    return {"block_count": n_layers, "embedding_length": d, "feed_forward_length": d_ff,
            "attention.head_count": n_heads, "attention.head_count_kv": n_kv,
            "attention.layer_norm_rms_epsilon": 1e-5, "rope.freq_base": 10000.0}


def gguf_string(text: str | bytes) -> bytes:
    """A GGUF string: u64 length, then the bytes."""
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def gguf_kv(key: str, vtype: int, payload: bytes) -> bytes:
    """One GGUF metadata pair from its raw value bytes (vtype 4 = u32, 6 = f32, 8 = string, 9 = array)."""
    return gguf_string(key) + struct.pack("<I", vtype) + payload


def write_raw_gguf(path: Path, kvs: list[bytes], tensors: list[tuple[str | bytes, tuple[int, ...], int, bytes]]) -> Path:
    """A GGUF v3 file written byte by byte, so a test can forge any header field.

    Args:
        kvs: metadata pairs from :func:`gguf_kv`.
        tensors: ``(name, ggml dims fastest-first, ggml type id, data bytes)``; data is laid out
            in order, each aligned to 32 bytes.
    """
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, data, offset = b"", b"", 0
    for name, dims, gtype, blob in tensors:
        infos += gguf_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", gtype, offset)
        padded = blob + b"\0" * (-len(blob) % 32)
        data += padded
        offset += len(padded)
    head = header + infos
    path.write_bytes(head + b"\0" * (-len(head) % 32) + data)
    return path


def llama_raw_gguf(path: Path, n_layers: int = 2, d: int = 32, n_heads: int = 4, n_kv: int = 2, d_ff: int = 64,
                   kvs: list[bytes] | None = None, shapes: dict[str, tuple[int, ...]] | None = None) -> Path:
    """A small llama GGUF (F32 zeros plus a ramp) written by :func:`write_raw_gguf`; ``kvs`` replace the head counts."""
    hd = d // n_heads
    default = [gguf_kv("general.architecture", 8, gguf_string("llama")),
               gguf_kv("llama.block_count", 4, struct.pack("<I", n_layers)),
               gguf_kv("llama.embedding_length", 4, struct.pack("<I", d)),
               gguf_kv("llama.attention.head_count", 4, struct.pack("<I", n_heads)),
               gguf_kv("llama.attention.head_count_kv", 4, struct.pack("<I", n_kv))]
    tensors = []
    for i in range(n_layers):
        table = {"attn_q": (d, n_heads * hd), "attn_k": (d, n_kv * hd), "attn_v": (d, n_kv * hd),
                 "attn_output": (n_heads * hd, d), "ffn_gate": (d, d_ff), "ffn_up": (d, d_ff), "ffn_down": (d_ff, d)}
        for short, dims in table.items():
            name = f"blk.{i}.{short}.weight"
            dims = (shapes or {}).get(name, dims)
            values = np.random.default_rng(i).standard_normal(math.prod(dims)).astype(np.float32)
            tensors.append((name, dims, 0, values.tobytes()))
    return write_raw_gguf(path, default if kvs is None else kvs, tensors)


def mixtral_state(n_layers: int = 3, d: int = 32, n_heads: int = 4, n_kv: int = 2, d_ff: int = 48, n_experts: int = 4,
                  vocab: int = 50, seed: int = 0) -> dict[str, torch.Tensor]:
    """A Hugging Face Mixtral state dict (transformers' names: block_sparse_moe.gate, experts.E.w1/w2/w3)."""
    state = {k: v for k, v in llama_state(n_layers, d, n_heads, n_kv, d_ff, vocab, seed).items() if ".mlp." not in k}
    g = torch.Generator().manual_seed(seed + 1)
    for i in range(n_layers):
        p = f"model.layers.{i}.block_sparse_moe."
        state[p + "gate.weight"] = torch.randn(n_experts, d, generator=g)
        for e in range(n_experts):
            state[p + f"experts.{e}.w1.weight"] = torch.randn(d_ff, d, generator=g)
            state[p + f"experts.{e}.w2.weight"] = torch.randn(d, d_ff, generator=g)
            state[p + f"experts.{e}.w3.weight"] = torch.randn(d_ff, d, generator=g)
    return state


def mixtral_gguf_tensors(state: dict[str, torch.Tensor], n_heads: int, n_kv: int) -> dict[str, np.ndarray]:
    """A Mixtral state dict as llama.cpp's converter writes it: arch llama, Q/K permuted, experts stacked
    into ``blk.N.ffn_{gate,up,down}_exps.weight`` ``(n_experts, d_out, d_in)``, the router ``ffn_gate_inp``."""
    dense = {k: v for k, v in state.items() if ".block_sparse_moe." not in k}
    out = hf_to_gguf_tensors(dense, "llama", n_heads, n_kv)
    layers = sorted({int(k.split(".")[2]) for k in state if ".block_sparse_moe." in k})
    for i in layers:
        p = f"model.layers.{i}.block_sparse_moe."
        out[f"blk.{i}.ffn_gate_inp.weight"] = state[p + "gate.weight"].float().numpy()
        experts = sorted({int(k.split(".")[5]) for k in state if k.startswith(p + "experts.")})
        for ours, theirs in (("ffn_gate_exps", "w1"), ("ffn_down_exps", "w2"), ("ffn_up_exps", "w3")):
            out[f"blk.{i}.{ours}.weight"] = torch.stack(
                [state[p + f"experts.{e}.{theirs}.weight"] for e in experts]).float().numpy()
    return out
