"""Bad input: real broken files in tmp_path; each gives one GeodriftError line naming the file/tensor and the fix."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from _checkpoints import (
    gguf_kv,
    gguf_string,
    hf_config,
    hf_to_gguf_tensors,
    llama_metadata,
    llama_raw_gguf,
    llama_state,
    write_gguf,
    write_hf_folder,
    write_raw_gguf,
)
from safetensors.torch import save_file

from geodrift.errors import GeodriftError
from geodrift.scanner.readers import open_checkpoint, validate_for_continuity, weightset


def _error(call, *args, **kwargs) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(GeodriftError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def _llama_gguf(path: Path, n_layers: int = 2) -> Path:
    state = llama_state(n_layers, 32, 4, 2, 64)
    return write_gguf(path, "llama", hf_to_gguf_tensors(state, "llama", 4, 2), llama_metadata(n_layers, 32, 4, 2, 64))


def test_missing_path_names_the_path(tmp_path) -> None:
    message = _error(open_checkpoint, tmp_path / "nope.gguf")
    assert "nope.gguf" in message and "no such file" in message


def test_unknown_suffix_is_refused(tmp_path) -> None:
    (tmp_path / "weights.npz").write_bytes(b"PK\x03\x04")
    assert ".safetensors" in _error(open_checkpoint, tmp_path / "weights.npz")


def test_truncated_safetensors_is_reported_as_truncated(tmp_path) -> None:
    path = write_hf_folder(tmp_path, llama_state(2), None, dtype=torch.float32) / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    message = _error(open_checkpoint, path)
    assert str(path) in message and "truncated" in message and "re-download" in message


@pytest.mark.parametrize("damage", ["garbage_json", "huge_length", "short"])
def test_corrupt_safetensors_header_is_reported(tmp_path, damage: str) -> None:
    path = write_hf_folder(tmp_path, llama_state(2), None, dtype=torch.float32) / "model.safetensors"
    data = bytearray(path.read_bytes())
    if damage == "garbage_json":
        data[8:40] = b"#" * 32
    elif damage == "huge_length":
        data[:8] = struct.pack("<Q", 1 << 60)
    else:
        data = data[:5]
    path.write_bytes(bytes(data))
    message = _error(open_checkpoint, path)
    assert str(path) in message and "corrupt" in message


def test_missing_shard_of_an_index_is_reported(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config(n_layers=2), shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    message = _error(open_checkpoint, folder)
    assert "model-00002-of-00002.safetensors" in message and "re-download" in message


@pytest.mark.parametrize("cut", ["in_header", "in_data"])
def test_truncated_gguf_is_reported(tmp_path, cut: str) -> None:
    path = _llama_gguf(tmp_path / "m.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:200] if cut == "in_header" else data[:-100])
    message = _error(open_checkpoint, path)
    assert str(path) in message and "truncated" in message


def test_corrupt_gguf_magic_is_reported(tmp_path) -> None:
    path = _llama_gguf(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    data[:4] = b"GGML"
    path.write_bytes(bytes(data))
    message = _error(open_checkpoint, path)
    assert str(path) in message and "not a GGUF file" in message


def test_corrupt_gguf_counts_are_reported(tmp_path) -> None:
    path = _llama_gguf(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    data[16:24] = struct.pack("<Q", 1 << 40)  # kv_count
    path.write_bytes(bytes(data))
    assert "corrupt" in _error(open_checkpoint, path)


def test_nan_in_a_safetensors_tensor_names_the_tensor(tmp_path) -> None:
    state = llama_state(2, 32, 4, 2, 48)
    state["model.layers.1.mlp.up_proj.weight"][3, 4] = float("nan")
    ws = weightset(open_checkpoint(write_hf_folder(tmp_path, state, hf_config(n_layers=2), dtype=torch.float32)))
    ws[("mlp_up", 0)]  # the clean layer loads
    message = _error(ws.__getitem__, ("mlp_up", 1))
    assert "model.layers.1.mlp.up_proj.weight" in message and "NaN or Inf" in message and "--roles" in message
    message = _error(ws.entries[("mlp_up", 1)].load)  # the entry's own loader checks too
    assert "model.layers.1.mlp.up_proj.weight" in message


def test_inf_in_a_gguf_tensor_names_the_tensor(tmp_path) -> None:
    state = llama_state(2, 32, 4, 2, 64)
    tensors = hf_to_gguf_tensors(state, "llama", 4, 2)
    tensors["blk.0.attn_v.weight"][0, 0] = np.inf
    ws = weightset(open_checkpoint(write_gguf(tmp_path / "m.gguf", "llama", tensors, llama_metadata(2, 32, 4, 2, 64))))
    assert "blk.0.attn_v.weight" in _error(ws.__getitem__, ("attn_v", 0))


def test_inconsistent_shapes_across_layers_are_reported(tmp_path) -> None:
    state = llama_state(3, 32, 4, 2, 48)
    state["model.layers.2.mlp.gate_proj.weight"] = torch.randn(40, 32)
    ckpt = open_checkpoint(write_hf_folder(tmp_path, state, hf_config(), dtype=torch.float32))
    message = _error(weightset, ckpt)
    assert "mlp_gate" in message and "(40, 32)" in message and "inconsistent" in message


def test_one_layer_model_is_refused_by_weightset(tmp_path) -> None:
    ckpt = open_checkpoint(_llama_gguf(tmp_path / "one.gguf", n_layers=1))
    message = _error(weightset, ckpt)
    assert "one.gguf" in message and "at least 2" in message


def test_selecting_one_layer_fails_validate_for_continuity() -> None:
    ws = weightset(open_checkpoint(None)).select(layers=[4])
    message = _error(validate_for_continuity, ws)
    assert "--layers" in message and "attn_q" in message


def test_unsupported_quantization_type_is_reported_with_the_fix(tmp_path) -> None:
    # Q8_1 is a real GGML type (llama.cpp uses it for activations) that gguf.quants cannot dequantize.
    state = llama_state(2, 32, 4, 2, 64)
    tensors = hf_to_gguf_tensors(state, "llama", 4, 2)
    writer = gguf.GGUFWriter(str(tmp_path / "q81.gguf"), "llama")
    for key, value in llama_metadata(2, 32, 4, 2, 64).items():
        (writer.add_float32 if isinstance(value, float) else writer.add_uint32)(f"llama.{key}", value)
    q81 = gguf.GGMLQuantizationType.Q8_1
    block, size = gguf.GGML_QUANT_SIZES[q81]
    for name, data in tensors.items():
        if name == "blk.1.ffn_up.weight":
            writer.add_tensor(name, np.zeros((data.shape[0], data.shape[1] // block * size), np.uint8), raw_dtype=q81)
        else:
            writer.add_tensor(name, data.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    ckpt = open_checkpoint(tmp_path / "q81.gguf")
    for call, args in ((weightset, (ckpt,)), (ckpt.load, ("blk.1.ffn_up.weight",))):
        message = _error(call, *args)
        assert "blk.1.ffn_up.weight" in message and "Q8_1" in message and "pip install -U gguf" in message


class _Payload:
    def __init__(self) -> None:
        self.weight = torch.ones(2, 2)


def test_pickle_that_weights_only_refuses_is_refused(tmp_path) -> None:
    path = tmp_path / "model.pt"
    torch.save({"model.layers.0.self_attn.q_proj.weight": torch.ones(2, 2), "extra": _Payload()}, path)
    message = _error(open_checkpoint, path)
    assert "model.pt" in message and "refused" in message and "safetensors" in message


def test_corrupt_pickle_is_reported(tmp_path) -> None:
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(b"\x80\x02not really a pickle")
    assert "pytorch_model.bin" in _error(open_checkpoint, path)


def test_bad_config_json_is_reported(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), None)
    (folder / "config.json").write_text("{not json")
    assert "config.json" in _error(open_checkpoint, folder)


def test_unknown_architecture_points_to_names(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config("mamba"))
    message = _error(open_checkpoint, folder)
    assert "'mamba'" in message and "--names" in message


def test_bad_view_is_reported() -> None:
    assert "--view" in _error(weightset, open_checkpoint(None), "whitened")


def test_index_json_that_is_not_json_is_reported(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config(n_layers=2), shards=2)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"no_weight_map": 1}))
    assert "model.safetensors.index.json" in _error(open_checkpoint, folder)


def test_tensor_data_corrupted_after_open_is_reported(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config(n_layers=2), dtype=torch.float32)
    ckpt = open_checkpoint(folder)
    save_file({"other": torch.ones(1)}, str(folder / "model.safetensors"))  # replaced under our feet
    assert "model.safetensors" in _error(ckpt.load, "model.layers.0.self_attn.q_proj.weight")


# ---- values a checkpoint states about itself, validated before any tensor is read (issue 11) ----

def _u32(key: str, value: int) -> bytes:
    return gguf_kv(key, 4, struct.pack("<I", value))


def _llama_kvs(**replace: bytes | None) -> list[bytes]:
    kvs = {"general.architecture": gguf_kv("general.architecture", 8, gguf_string("llama")),
           "llama.block_count": _u32("llama.block_count", 2), "llama.embedding_length": _u32("llama.embedding_length", 32),
           "llama.attention.head_count": _u32("llama.attention.head_count", 4),
           "llama.attention.head_count_kv": _u32("llama.attention.head_count_kv", 2)}
    for key, value in replace.items():
        kvs[key.replace("__", ".")] = value
    return [v for v in kvs.values() if v is not None]


@pytest.mark.parametrize(("heads", "found"), [(0, "found 0"), (4.5, "found 4.5"), ("four", "found 'four'")])
def test_hf_head_count_that_is_not_a_positive_integer_is_refused(tmp_path, heads: object, found: str) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config(n_layers=2, num_attention_heads=heads))
    message = _error(open_checkpoint, folder)
    assert "config.json num_attention_heads" in message and "positive integer" in message and found in message


def test_hf_kv_heads_inconsistent_with_the_k_shape_name_the_tensor(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config(n_layers=2, n_kv=4))  # K has 2 heads' rows
    message = _error(open_checkpoint, folder)
    assert "model.layers.0.self_attn.k_proj.weight" in message and "expected 32 rows" in message
    assert "num_key_value_heads" in message and "(16, 32)" in message


def test_hf_missing_kv_heads_with_gqa_shapes_says_it_is_missing(tmp_path) -> None:
    config = hf_config(n_layers=2)
    del config["num_key_value_heads"]
    message = _error(open_checkpoint, write_hf_folder(tmp_path, llama_state(2), config))
    assert "num_key_value_heads (missing" in message and "k_proj" in message


def test_hf_heads_not_a_multiple_of_kv_heads_is_refused(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config(n_layers=2, n_kv=3))
    message = _error(open_checkpoint, folder)
    assert "num_attention_heads = 4 is not a multiple of" in message and "num_key_value_heads" in message


@pytest.mark.parametrize("weight_map", [["a", "b"], "model.safetensors", None, {"x": 3}])
def test_index_json_whose_weight_map_is_not_a_mapping_of_files_is_refused(tmp_path, weight_map: object) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config(n_layers=2), shards=2)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    message = _error(open_checkpoint, folder)
    assert "model.safetensors.index.json" in message and "weight_map" in message


def test_index_json_pointing_outside_the_folder_is_refused(tmp_path) -> None:
    folder = write_hf_folder(tmp_path / "m", llama_state(2), hf_config(n_layers=2), shards=2)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../../etc/passwd"}}))
    assert "outside" in _error(open_checkpoint, folder)


def test_zero_sized_projection_is_refused_by_name(tmp_path) -> None:
    state = llama_state(2, 32, 4, 2, 48)
    for i in range(2):
        state[f"model.layers.{i}.mlp.up_proj.weight"] = torch.zeros(0, 32)
    message = _error(open_checkpoint, write_hf_folder(tmp_path, state, hf_config(n_layers=2), dtype=torch.float32))
    assert "model.layers.0.mlp.up_proj.weight" in message and "(0, 32)" in message


@pytest.mark.parametrize(("key", "value", "expect"), [
    ("llama__attention__head_count", _u32("llama.attention.head_count", 0), "llama.attention.head_count must be"),
    ("llama__attention__head_count", gguf_kv("llama.attention.head_count", 6, struct.pack("<f", 4.5)), "found 4.5"),
    ("llama__attention__head_count_kv", _u32("llama.attention.head_count_kv", 4), "blk.0.attn_k.weight: expected 32 rows"),
])
def test_gguf_head_counts_are_checked_against_the_shapes(tmp_path, key: str, value: bytes, expect: str) -> None:
    message = _error(open_checkpoint, llama_raw_gguf(tmp_path / "m.gguf", kvs=_llama_kvs(**{key: value})))
    assert "m.gguf" in message and expect in message


def test_gguf_missing_head_count_kv_with_gqa_shapes_says_it_is_missing(tmp_path) -> None:
    path = llama_raw_gguf(tmp_path / "m.gguf", kvs=_llama_kvs(llama__attention__head_count_kv=None))
    message = _error(open_checkpoint, path)
    assert "llama.attention.head_count_kv (missing" in message and "blk.0.attn_k.weight" in message


def test_gguf_qk_permutation_error_names_file_and_tensor(tmp_path) -> None:
    # 32 heads of head_dim 1: every shape agrees with the counts, but 32 rows cannot be un-permuted in pairs.
    kvs = _llama_kvs(llama__attention__head_count=_u32("llama.attention.head_count", 32),
                     llama__attention__head_count_kv=_u32("llama.attention.head_count_kv", 16))
    message = _error(open_checkpoint, llama_raw_gguf(tmp_path / "m.gguf", n_heads=4, n_kv=2, kvs=kvs))
    assert "m.gguf:blk.0.attn_q.weight" in message and "permutation" in message


def test_gguf_block_size_that_does_not_divide_the_row_is_refused(tmp_path) -> None:
    q8_0 = int(gguf.GGMLQuantizationType.Q8_0)  # block 32, 34 bytes
    path = write_raw_gguf(tmp_path / "q.gguf", _llama_kvs(), [("blk.0.attn_q.weight", (48, 2), q8_0, b"\0" * 136)])
    message = _error(open_checkpoint, path)
    assert "blk.0.attn_q.weight" in message and "48" in message and "block size 32" in message


def test_gguf_dims_whose_product_overflows_are_refused(tmp_path) -> None:
    path = write_raw_gguf(tmp_path / "o.gguf", _llama_kvs(), [("blk.0.attn_q.weight", (2**40, 2**40), 0, b"\0" * 64)])
    message = _error(open_checkpoint, path)
    assert "blk.0.attn_q.weight" in message and "past the end" in message


def test_deeply_nested_gguf_metadata_arrays_are_refused(tmp_path) -> None:
    value = struct.pack("<IQ", 4, 0)  # innermost: an empty u32 array
    for _ in range(50):
        value = struct.pack("<IQ", 9, 1) + value  # an array holding one array
    kvs = [*_llama_kvs(), gguf_kv("general.nested", 9, value)]
    message = _error(open_checkpoint, write_raw_gguf(tmp_path / "n.gguf", kvs, []))
    assert "n.gguf" in message and "nested" in message


def test_gguf_tensor_name_that_is_not_text_is_a_corrupt_header_not_a_names_problem(tmp_path) -> None:
    path = write_raw_gguf(tmp_path / "c.gguf", _llama_kvs(), [(b"blk.0.attn_q\xff\xfe", (32, 32), 0, b"\0" * 4096)])
    message = _error(open_checkpoint, path)
    assert "corrupt" in message and "--names" not in message


@pytest.mark.parametrize("where", ["hf", "gguf"])
def test_unknown_architecture_names_the_file(tmp_path, where: str) -> None:
    if where == "hf":
        path = write_hf_folder(tmp_path, llama_state(2), hf_config("mamba"))
        expected = str(path / "config.json")
    else:
        kvs = _llama_kvs(general__architecture=gguf_kv("general.architecture", 8, gguf_string("mamba")))
        path = llama_raw_gguf(tmp_path / "mamba.gguf", kvs=kvs)
        expected = str(path)
    message = _error(open_checkpoint, path)
    assert expected in message and "'mamba'" in message and "--names" in message


@pytest.mark.parametrize("suffix", [".gguf", ".safetensors", ""])
def test_a_fifo_given_as_the_model_is_refused_without_opening_it(tmp_path, suffix: str) -> None:
    fifo = tmp_path / f"model{suffix}"
    os.mkfifo(fifo)  # opening it for reading would block forever: the check must come from os.stat
    message = _error(open_checkpoint, fifo)
    assert str(fifo) in message and "FIFO" in message


def test_a_folder_where_a_shard_is_expected_is_refused(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), hf_config(n_layers=2), shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    (folder / "model-00002-of-00002.safetensors").mkdir()
    message = _error(open_checkpoint, folder)
    assert "model-00002-of-00002.safetensors" in message and "folder" in message


def test_a_fifo_config_json_is_refused_without_opening_it(tmp_path) -> None:
    folder = write_hf_folder(tmp_path, llama_state(2), None)
    os.mkfifo(folder / "config.json")
    assert "config.json" in _error(open_checkpoint, folder)


def test_names_rule_capturing_a_non_integer_layer_is_refused(tmp_path) -> None:
    mapping = tmp_path / "names.json"
    mapping.write_text(json.dumps({r"model\.layers\.(\w+)\.self_attn\.q_proj\.weight": "attn_q"}))
    state = {"model.layers.first.self_attn.q_proj.weight": torch.ones(4, 4)}
    path = tmp_path / "m.safetensors"
    save_file(state, str(path))
    message = _error(open_checkpoint, path, names=mapping)
    assert "'first'" in message and "layer" in message and "(\\d+)" in message
