"""Names: every architecture's names map to canonical keys through gguf.TensorNameMap exactly as the hand
tables did before it (a golden of every name they knew), geodrift's own rows each say why the library falls
short, and fused and Conv1D tensors split right."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _checkpoints import hf_config, llama_state, write_gguf, write_hf_folder
from safetensors.torch import save_file

from geodrift.errors import GeodriftError
from geodrift.scanner.mapping import load_name_mapping, match_name
from geodrift.scanner.names import (
    ARCHITECTURES,
    GEODRIFT_ROWS,
    GGUF_IGNORED,
    HF_IGNORED,
    gguf_table,
    guess_hf_architecture,
    hf_table,
)
from geodrift.scanner.readers import canonical_keys, load_canonical, open_checkpoint, weightset


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3", "gemma", "phi3"])
def test_llama_family_hf_names_map_to_roles(arch: str) -> None:
    table = hf_table(arch)
    assert table.match("model.layers.12.self_attn.q_proj.weight") == (("attn_q", 12), False)
    assert table.match("model.layers.0.mlp.down_proj.weight") == (("mlp_down", 0), False)
    assert table.match("model.layers.3.post_attention_layernorm.weight") == (("norm_mlp", 3), False)
    assert table.match("model.embed_tokens.weight") == (("embed", None), False)
    assert table.match("lm_head.weight") == (("lm_head", None), False)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_gemma2_post_attention_layernorm_is_an_output_norm(arch: str) -> None:
    table = hf_table(arch)
    assert table.match("model.layers.1.post_attention_layernorm.weight") == (("norm_attn_post", 1), False)
    assert table.match("model.layers.1.pre_feedforward_layernorm.weight") == (("norm_mlp", 1), False)
    assert table.match("model.layers.1.post_feedforward_layernorm.weight") == (("norm_mlp_post", 1), False)
    assert table.match("language_model.model.layers.4.self_attn.k_norm.weight") == (("norm_k", 4), False)


def test_gguf_names_map_to_roles() -> None:
    expected = {"attn_q": "attn_q", "attn_k": "attn_k", "attn_v": "attn_v", "attn_output": "attn_o",
                "ffn_gate": "mlp_gate", "ffn_up": "mlp_up", "ffn_down": "mlp_down",
                "attn_norm": "norm_attn", "ffn_norm": "norm_mlp"}
    table = gguf_table("llama")
    for gguf_name, kind in expected.items():
        assert table.match(f"blk.17.{gguf_name}.weight") == ((kind, 17), False)
    assert table.match("output_norm.weight") == (("norm_final", None), False)
    assert table.match("token_embd.weight") == (("embed", None), False)
    assert table.match("output.weight") == (("lm_head", None), False)


# ---- the library replaces the hand tables: the same answer for every name they knew ----

GOLDEN = json.loads((Path(__file__).parent / "golden" / "names_before_library.json").read_text())
OLD_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "gpt2")
# Every name the old tables were asked about in the golden, plus neighbours they refused.
HF_PREFIXES = ["model.layers.", "layers.", "model.language_model.layers.", "language_model.model.layers.",
               "model.model.layers."]
HF_SUFFIXES = [
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "self_attn.q_proj.bias",
    "self_attn.k_proj.bias", "self_attn.v_proj.bias", "self_attn.o_proj.bias", "mlp.gate_proj.bias",
    "mlp.up_proj.bias", "mlp.down_proj.bias", "input_layernorm.weight", "post_attention_layernorm.weight",
    "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight", "self_attn.q_norm.weight",
    "self_attn.k_norm.weight", "self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight", "self_attn.rotary_emb.inv_freq",
    "block_sparse_moe.gate.weight", "block_sparse_moe.experts.3.w1.weight", "block_sparse_moe.experts.3.w2.weight",
    "block_sparse_moe.experts.3.w3.weight", "mlp.gate.weight", "mlp.experts.3.gate_proj.weight",
    "mlp.experts.3.up_proj.weight", "mlp.experts.3.down_proj.weight", "mlp.shared_expert.gate_proj.weight",
    "mlp.shared_expert.up_proj.weight", "mlp.shared_expert.down_proj.weight", "mlp.shared_expert_gate.weight",
    "self_attn.weird.weight", "input_layernorm.bias",
]
GPT2_SUFFIXES = ["attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight",
                 "attn.c_attn.bias", "attn.c_proj.bias", "mlp.c_fc.bias", "mlp.c_proj.bias", "ln_1.weight",
                 "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.bias", "attn.masked_bias"]
HF_GLOBALS = [
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "embed_tokens.weight", "norm.weight",
    "model.language_model.embed_tokens.weight", "model.language_model.norm.weight",
    "language_model.model.embed_tokens.weight", "language_model.model.norm.weight", "language_model.lm_head.weight",
    "wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "transformer.wte.weight", "transformer.wpe.weight",
    "transformer.ln_f.weight", "transformer.ln_f.bias", "vision_tower.encoder.layers.0.mlp.fc1.weight",
    "multi_modal_projector.linear.weight", "model.vision_tower.x.weight", "model.multi_modal_projector.y.weight",
    "model.rotary_emb.inv_freq",
]
GGUF_LAYER = ["attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "ffn_gate", "ffn_up", "ffn_down",
              "attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm", "attn_q_norm", "attn_k_norm",
              "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp",
              "ffn_down_shexp", "ffn_gate_inp_shexp", "attn_weird"]
GGUF_GLOBALS = ["token_embd.weight", "position_embd.weight", "output_norm.weight", "output_norm.bias",
                "output.weight", "rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight",
                "token_embd_norm.weight"]
UNIVERSE = {
    "hf": ([p + "7." + s for p in HF_PREFIXES for s in HF_SUFFIXES]
           + [p + "7." + s for p in ("h.", "transformer.h.") for s in GPT2_SUFFIXES]
           + ["model.layers.12." + s for s in HF_SUFFIXES[:7]] + HF_GLOBALS),
    "gguf": [f"blk.{i}.{n}.{w}" for i in (7, 12) for n in GGUF_LAYER for w in ("weight", "bias")] + GGUF_GLOBALS,
}
# What the tables may newly read: the mixture-of-experts kinds, and biases (never scanned).
NEW_KINDS = ("router", "expert_", "shared_")


def _outcome(fmt: str, arch: str, name: str) -> str | None:
    table = hf_table(arch) if fmt == "hf" else gguf_table(arch)
    hit = table.match(name)
    if hit is not None:
        (kind, layer), transpose = hit
        return f"{kind} {layer}" + (" T" if transpose else "")
    return "ignored" if (HF_IGNORED if fmt == "hf" else GGUF_IGNORED).fullmatch(name) else None


def _before(fmt: str, arch: str, name: str) -> str | None:
    outcomes = GOLDEN[fmt].get(name, {})
    return next((o for o, archs in outcomes.items() if archs == "all" or arch in archs), None)


@pytest.mark.parametrize("fmt", ["hf", "gguf"])
@pytest.mark.parametrize("arch", OLD_ARCHITECTURES)
def test_the_library_reads_every_name_as_the_hand_tables_did(fmt: str, arch: str) -> None:
    changed = []
    for name in UNIVERSE[fmt]:
        before, now = _before(fmt, arch, name), _outcome(fmt, arch, name)
        if before is not None and now != before:
            changed.append(f"{name}: {before} -> {now}")
        if before is None and now is not None and not (now.startswith(NEW_KINDS) or "_bias " in now):
            changed.append(f"{name}: refused -> {now}")
    assert not changed, changed
    assert set(GOLDEN[fmt]) <= set(UNIVERSE[fmt])  # the golden's names are all asked about


def test_each_geodrift_row_is_needed_because_the_library_falls_short() -> None:
    import gguf

    llama, gemma, phi3 = (gguf.get_tensor_name_map(gguf.MODEL_ARCH[a], 8) for a in ("LLAMA", "GEMMA", "PHI3"))
    gpt2, qwen2 = (gguf.get_tensor_name_map(gguf.MODEL_ARCH[a], 8) for a in ("GPT2", "QWEN2"))
    # prefixes: the library does not know Gemma-3's multimodal prefix; geodrift reads it as model.
    assert llama.get_type("model.language_model.layers.2.self_attn.q_proj") is None
    assert hf_table("gemma3").match("model.language_model.layers.2.self_attn.q_proj.weight") == (("attn_q", 2), False)
    # own_names: qwen2's map also reads gpt2's Conv1D name (in the wrong orientation for qwen2); geodrift refuses it
    assert qwen2.get_type("h.2.mlp.c_fc") is not None and hf_table("qwen2").match("h.2.mlp.c_fc.weight") is None
    assert llama.get_type("layers.2.attention.wq") is not None  # llama-pth rows are in rotary-interleaved order
    assert hf_table("llama").match("layers.2.attention.wq.weight") is None
    # lm_head: llama.cpp ties Gemma's head, so the library's gemma map has no output tensor
    assert gemma.get_type("lm_head") is None and hf_table("gemma").match("lm_head.weight") == (("lm_head", None), False)
    # fused: the library calls phi3's [gate; up] ffn_up, and maps persimmon's interleaved query_key_value
    assert phi3.get_type("model.layers.2.mlp.gate_up_proj").name == "FFN_UP"
    assert hf_table("phi3").match("model.layers.2.mlp.gate_up_proj.weight") == (("mlp_gate_up", 2), False)
    assert gguf_table("phi3").match("blk.2.ffn_up.weight") == (("mlp_gate_up", 2), False)
    assert phi3.get_type("model.layers.2.self_attn.query_key_value").name == "ATTN_QKV"
    assert hf_table("phi3").match("model.layers.2.self_attn.query_key_value.weight") is None
    assert hf_table("llama").match("model.layers.2.mlp.gate_up_proj.weight") is None
    # conv1d: a name map says nothing about orientation; gpt2's Conv1D weights are transposed
    assert gpt2.get_type("h.2.mlp.c_fc") is not None and hf_table("gpt2").match("h.2.mlp.c_fc.weight") == (("mlp_up", 2), True)
    assert hf_table("gpt2").match("h.2.mlp.c_fc.bias") == (("mlp_up_bias", 2), False)
    # llama_layout: the library's llama and phi3 maps lack q/k norms and phi3's unfused gate_proj
    assert llama.get_type("model.layers.2.self_attn.q_norm") is None and phi3.get_type("model.layers.2.mlp.gate_proj") is None
    assert hf_table("llama").match("model.layers.2.self_attn.q_norm.weight") == (("norm_q", 2), False)
    assert hf_table("phi3").match("model.layers.2.mlp.gate_proj.weight") == (("mlp_gate", 2), False)
    # experts: the library knows the stacked name only; geodrift takes the index out and keeps it
    assert llama.get_type("model.layers.2.block_sparse_moe.experts.5.w1") is None
    assert llama.get_type("model.layers.2.block_sparse_moe.experts.w1").name == "FFN_GATE_EXP"
    assert hf_table("mixtral").match("model.layers.2.block_sparse_moe.experts.5.w1.weight") == (("expert_gate.5", 2), False)
    assert set(GEODRIFT_ROWS) == {"prefixes", "own_names", "lm_head", "fused", "conv1d", "llama_layout", "experts"}


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe"])
def test_mixture_of_experts_names_map_to_router_and_expert_roles(arch: str) -> None:
    table = hf_table(arch)
    if arch == "mixtral":
        names = {"block_sparse_moe.gate.weight": "router", "block_sparse_moe.experts.7.w1.weight": "expert_gate.7",
                 "block_sparse_moe.experts.7.w3.weight": "expert_up.7", "block_sparse_moe.experts.7.w2.weight": "expert_down.7"}
    else:
        names = {"mlp.gate.weight": "router", "mlp.experts.11.gate_proj.weight": "expert_gate.11",
                 "mlp.experts.11.up_proj.weight": "expert_up.11", "mlp.experts.11.down_proj.weight": "expert_down.11"}
    if arch == "qwen2_moe":
        names.update({"mlp.shared_expert.gate_proj.weight": "shared_gate", "mlp.shared_expert.down_proj.weight":
                      "shared_down", "mlp.shared_expert_gate.weight": "shared_router"})
    for suffix, kind in names.items():
        assert table.match(f"model.layers.4.{suffix}") == ((kind, 4), False), suffix
    gguf = gguf_table(arch)
    for short, kind in (("ffn_gate_inp", "router"), ("ffn_gate_exps", "expert_gate"), ("ffn_up_exps", "expert_up"),
                        ("ffn_down_exps", "expert_down"), ("ffn_up_shexp", "shared_up")):
        assert gguf.match(f"blk.4.{short}.weight") == ((kind, 4), False)
    assert arch in ARCHITECTURES

def test_architecture_is_guessed_from_names() -> None:
    assert guess_hf_architecture(["h.0.attn.c_attn.weight"]) == "gpt2"
    assert guess_hf_architecture(["model.layers.0.block_sparse_moe.gate.weight"]) == "mixtral"
    assert guess_hf_architecture(["model.layers.0.mlp.experts.0.up_proj.weight"]) == "qwen2_moe"
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


def test_a_names_mapping_takes_the_roles_vocabulary_and_the_old_spelling(tmp_path) -> None:
    mapping = tmp_path / "names.json"
    mapping.write_text(json.dumps({r"blocks\.(\d+)\.wq": "q", r"blocks\.(\d+)\.wk": "attn_k",
                                   r"blocks\.(\d+)\.ff\.w1": "Gate", r"blocks\.(\d+)\.moe\.gate": "router",
                                   r"blocks\.(\d+)\.moe\.(\d+)\.w2": "expert_down",
                                   r"blocks\.(\d+)\.moe\.stacked_w1": {"role": "expert_gate", "transpose": True}}))
    rules = load_name_mapping(mapping)
    assert match_name("blocks.4.wq", rules) == (("attn_q", 4), False)
    assert match_name("blocks.4.wk", rules) == (("attn_k", 4), False)  # the old spelling, kept as an alias
    assert match_name("blocks.4.ff.w1", rules) == (("mlp_gate", 4), False)
    assert match_name("blocks.4.moe.gate", rules) == (("router", 4), False)
    assert match_name("blocks.4.moe.6.w2", rules) == (("expert_down.6", 4), False)  # second group: the expert
    assert match_name("blocks.4.moe.stacked_w1", rules) == (("expert_gate", 4), True)  # every expert, stacked


def test_the_simulators_llama_names_are_the_ones_the_library_reads() -> None:
    from geodrift.weights import HF_LLAMA_PROJECTIONS

    for role, path in HF_LLAMA_PROJECTIONS.items():
        assert hf_table("llama").match(f"model.layers.3.{path}.weight") == ((role, 3), False)
