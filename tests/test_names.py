"""Name tables: every architecture's names map to canonical keys; fused and Conv1D tensors split right."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _checkpoints import hf_config, llama_state, write_gguf, write_hf_folder
from safetensors.torch import save_file

from geodrift.errors import GeodriftError
from geodrift.scan.names import (
    GGUF_TABLE,
    HF_TABLES,
    guess_hf_architecture,
    load_name_mapping,
    match_name,
)
from geodrift.scan.readers import canonical_keys, load_canonical, open_checkpoint, weightset


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3", "gemma", "phi3"])
def test_llama_family_hf_names_map_to_roles(arch: str) -> None:
    rules = HF_TABLES[arch]
    assert match_name("model.layers.12.self_attn.q_proj.weight", rules) == (("attn_q", 12), False)
    assert match_name("model.layers.0.mlp.down_proj.weight", rules) == (("mlp_down", 0), False)
    assert match_name("model.layers.3.post_attention_layernorm.weight", rules) == (("norm_mlp", 3), False)
    assert match_name("model.embed_tokens.weight", rules) == (("embed", None), False)
    assert match_name("lm_head.weight", rules) == (("lm_head", None), False)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_gemma2_post_attention_layernorm_is_an_output_norm(arch: str) -> None:
    rules = HF_TABLES[arch]
    assert match_name("model.layers.1.post_attention_layernorm.weight", rules) == (("norm_attn_post", 1), False)
    assert match_name("model.layers.1.pre_feedforward_layernorm.weight", rules) == (("norm_mlp", 1), False)
    assert match_name("model.layers.1.post_feedforward_layernorm.weight", rules) == (("norm_mlp_post", 1), False)
    assert match_name("language_model.model.layers.4.self_attn.k_norm.weight", rules) == (("norm_k", 4), False)


def test_gguf_names_map_to_roles() -> None:
    expected = {"attn_q": "attn_q", "attn_k": "attn_k", "attn_v": "attn_v", "attn_output": "attn_o",
                "ffn_gate": "mlp_gate", "ffn_up": "mlp_up", "ffn_down": "mlp_down",
                "attn_norm": "norm_attn", "ffn_norm": "norm_mlp"}
    for gguf_name, kind in expected.items():
        assert match_name(f"blk.17.{gguf_name}.weight", GGUF_TABLE) == ((kind, 17), False)
    assert match_name("output_norm.weight", GGUF_TABLE) == (("norm_final", None), False)
    assert match_name("token_embd.weight", GGUF_TABLE) == (("embed", None), False)
    assert match_name("output.weight", GGUF_TABLE) == (("lm_head", None), False)


def test_architecture_is_guessed_from_names() -> None:
    assert guess_hf_architecture(["h.0.attn.c_attn.weight"]) == "gpt2"
    assert guess_hf_architecture(["model.layers.0.self_attn.qkv_proj.weight"]) == "phi3"
    assert guess_hf_architecture(["model.layers.0.pre_feedforward_layernorm.weight"]) == "gemma2"
    assert guess_hf_architecture(["model.layers.0.self_attn.q_proj.bias"]) == "qwen2"
    assert guess_hf_architecture(["model.layers.0.self_attn.q_proj.weight"]) == "llama"


def _phi3_state(n_layers: int, d: int, n_heads: int, n_kv: int, d_ff: int) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(3)
    hd = d // n_heads
    parts: dict[str, torch.Tensor] = {}
    state: dict[str, torch.Tensor] = {"model.embed_tokens.weight": torch.randn(40, d, generator=g),
                                      "model.norm.weight": torch.randn(d, generator=g)}
    for i in range(n_layers):
        q, k, v = (torch.randn(n * hd, d, generator=g) for n in (n_heads, n_kv, n_kv))
        gate, up = torch.randn(d_ff, d, generator=g), torch.randn(d_ff, d, generator=g)
        parts.update({("attn_q", i): q, ("attn_k", i): k, ("attn_v", i): v, ("mlp_gate", i): gate, ("mlp_up", i): up})
        p = f"model.layers.{i}."
        state[p + "self_attn.qkv_proj.weight"] = torch.cat([q, k, v])
        state[p + "self_attn.o_proj.weight"] = torch.randn(d, d, generator=g)
        state[p + "mlp.gate_up_proj.weight"] = torch.cat([gate, up])
        state[p + "mlp.down_proj.weight"] = torch.randn(d, d_ff, generator=g)
        state[p + "input_layernorm.weight"] = torch.randn(d, generator=g)
        state[p + "post_attention_layernorm.weight"] = torch.randn(d, generator=g)
    return state, parts


def test_phi3_fused_qkv_and_gate_up_split_by_head_counts(tmp_path) -> None:
    state, parts = _phi3_state(2, 32, 4, 2, 48)
    write_hf_folder(tmp_path, state, hf_config("phi3", n_layers=2, n_kv=2), dtype=torch.float32)
    ckpt = open_checkpoint(tmp_path)
    assert ckpt.architecture == "phi3"
    ws = weightset(ckpt)
    assert ws.shape("attn_q") == (32, 32) and ws.shape("attn_k") == (16, 32) and ws.shape("mlp_gate") == (48, 32)
    for key, ref in parts.items():
        assert torch.equal(ws[key], ref), key


def test_phi3_gguf_fused_tensors_split(tmp_path) -> None:
    state, parts = _phi3_state(2, 32, 4, 4, 48)
    tensors = {}
    for i in range(2):
        p = f"model.layers.{i}."
        tensors[f"blk.{i}.attn_qkv.weight"] = state[p + "self_attn.qkv_proj.weight"].numpy()
        tensors[f"blk.{i}.attn_output.weight"] = state[p + "self_attn.o_proj.weight"].numpy()
        tensors[f"blk.{i}.ffn_up.weight"] = state[p + "mlp.gate_up_proj.weight"].numpy()
        tensors[f"blk.{i}.ffn_down.weight"] = state[p + "mlp.down_proj.weight"].numpy()
    meta = {"block_count": 2, "embedding_length": 32, "attention.head_count": 4, "attention.head_count_kv": 4}
    ckpt = open_checkpoint(write_gguf(tmp_path / "phi.gguf", "phi3", tensors, meta))
    for key, ref in parts.items():
        assert torch.equal(load_canonical(ckpt, key), ref), key


def test_gpt2_conv1d_is_transposed_and_c_attn_split(tmp_path) -> None:
    g = torch.Generator().manual_seed(5)
    d, n_layers = 24, 2
    state = {"wte.weight": torch.randn(50, d, generator=g), "wpe.weight": torch.randn(16, d, generator=g),
             "ln_f.weight": torch.randn(d, generator=g), "ln_f.bias": torch.randn(d, generator=g)}
    linear = {}
    for i in range(n_layers):
        q, k, v = (torch.randn(d, d, generator=g) for _ in range(3))
        o, fc, proj = torch.randn(d, d, generator=g), torch.randn(4 * d, d, generator=g), torch.randn(d, 4 * d, generator=g)
        linear.update({("attn_q", i): q, ("attn_k", i): k, ("attn_v", i): v, ("attn_o", i): o,
                       ("mlp_up", i): fc, ("mlp_down", i): proj})
        p = f"h.{i}."
        state[p + "attn.c_attn.weight"] = torch.cat([q, k, v]).T.contiguous()  # Conv1D: (in, out)
        state[p + "attn.c_attn.bias"] = torch.randn(3 * d, generator=g)
        state[p + "attn.c_proj.weight"] = o.T.contiguous()
        state[p + "mlp.c_fc.weight"] = fc.T.contiguous()
        state[p + "mlp.c_proj.weight"] = proj.T.contiguous()
        state[p + "ln_1.weight"] = torch.randn(d, generator=g)
        state[p + "ln_2.weight"] = torch.randn(d, generator=g)
        state[p + "attn.bias"] = torch.ones(1, 1, 16, 16)  # a causal-mask buffer, ignored
    save_file(state, str(tmp_path / "gpt2.safetensors"))
    ckpt = open_checkpoint(tmp_path / "gpt2.safetensors")
    assert ckpt.architecture == "gpt2"
    ws = weightset(ckpt)
    assert ws.roles() == ["attn_q", "attn_k", "attn_v", "attn_o", "mlp_up", "mlp_down"]  # no gate
    for key, ref in linear.items():
        assert torch.equal(ws[key], ref), key
    bias = load_canonical(ckpt, ("attn_k_bias", 1))
    assert torch.equal(bias, state["h.1.attn.c_attn.bias"][d:2 * d])
    assert ("pos_embed", None) in canonical_keys(ckpt)


def test_unknown_names_error_lists_a_sample_and_the_names_option(tmp_path) -> None:
    save_file({f"encoder.block.{i}.weird.weight": torch.ones(4, 4) for i in range(9)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(GeodriftError) as info:
        open_checkpoint(tmp_path / "x.safetensors")
    message = str(info.value)
    assert "x.safetensors" in message and "encoder.block.0.weird.weight" in message
    assert "--names" in message and "(9 in all)" in message and "\n" not in message


def test_name_mapping_rejects_unknown_roles_and_bad_regex(tmp_path) -> None:
    bad_role = tmp_path / "a.json"
    bad_role.write_text(json.dumps({r"l\.(\d+)\.q": "attn_query"}))
    with pytest.raises(GeodriftError, match="unknown role 'attn_query'"):
        load_name_mapping(bad_role)
    bad_regex = tmp_path / "b.json"
    bad_regex.write_text(json.dumps({r"l\.(\d+\.q": "attn_q"}))
    with pytest.raises(GeodriftError, match="does not compile"):
        load_name_mapping(bad_regex)
    with pytest.raises(GeodriftError, match="not found"):
        load_name_mapping(tmp_path / "missing.json")


def test_name_mapping_can_ignore_tensors_and_transpose(tmp_path) -> None:
    state = llama_state(2, 16, 2, 2, 24)
    state["model.layers.0.extra.scale"] = torch.ones(3)
    state["model.layers.1.extra.scale"] = torch.ones(3)
    write_hf_folder(tmp_path, state, hf_config(n_layers=2, d=16, n_heads=2, n_kv=2, d_ff=24), dtype=torch.float32)
    mapping = tmp_path / "names.json"
    mapping.write_text(json.dumps({r"model\.layers\.\d+\.extra\.scale": "ignore",
                                   r"model\.layers\.(\d+)\.mlp\.down_proj\.weight": {"kind": "mlp_down", "transpose": True}}))
    ckpt = open_checkpoint(tmp_path, names=mapping)
    got = load_canonical(ckpt, ("mlp_down", 1))
    np.testing.assert_array_equal(got.numpy(), state["model.layers.1.mlp.down_proj.weight"].T.numpy())
