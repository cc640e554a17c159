"""Bad input: real broken files in tmp_path; each gives one GeodriftError line naming the file/tensor and the fix."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from _checkpoints import (
    hf_config,
    hf_to_gguf_tensors,
    llama_metadata,
    llama_state,
    write_gguf,
    write_hf_folder,
)
from safetensors.torch import save_file

from geodrift.errors import GeodriftError
from geodrift.scan.readers import open_checkpoint, validate_for_continuity, weightset


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
