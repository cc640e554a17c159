"""The Python API: geodrift.scan on paths, nn.Modules and (wrapped) state dicts; Report.to_frame; the README example."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import geodrift
from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from tests._checkpoints import hf_config, write_hf_folder

README = Path(__file__).resolve().parent.parent / "README.md"


def _model(seed: int = 0) -> LlamaLM:
    return LlamaLM(vocab_size=40, d_model=32, n_layers=4, n_heads=4, d_ff=48, generator=torch.Generator().manual_seed(seed))


def _numbers(report: geodrift.ScanReport) -> list[tuple[str, str, float, float, float]]:
    return [(r.role, s.space, s.vectors[0].mean, s.vectors[0].null_mean, s.vectors[0].z)
            for r in report.roles for s in r.spaces.values()]


def test_an_nn_module_scans_like_the_same_weights_written_as_a_safetensors_folder(tmp_path: Path):
    model = _model()
    folder = write_hf_folder(tmp_path / "hf", {k: v.detach() for k, v in model.state_dict().items()},
                             hf_config(n_layers=4, d=32, n_heads=4, n_kv=4, d_ff=48, vocab=40), dtype=torch.float32)
    in_memory = geodrift.scan(model, null_draws=10, k=2, ov=False)
    on_disk = geodrift.scan(folder, null_draws=10, k=2, ov=False)
    assert in_memory.origin == "LlamaLM (in memory)"
    for a, b in zip(_numbers(in_memory), _numbers(on_disk), strict=True):
        assert a[:2] == b[:2] and a[2:] == pytest.approx(b[2:], abs=1e-5)
    assert len(in_memory.trajectory) == 2 * len(in_memory.roles)


@pytest.mark.parametrize("wrap", [
    lambda sd: {"model": sd, "optimizer": {"state": {}, "param_groups": []}, "epoch": 3},
    lambda sd: {"state_dict": sd, "global_step": 10},
    lambda sd: {"module." + k: v for k, v in sd.items()},
], ids=["model-key", "state_dict-key", "ddp-prefix"])
def test_wrapped_training_checkpoints_are_unwrapped_in_memory_and_from_a_pickle(tmp_path: Path, wrap):
    sd = {k: v.detach().clone() for k, v in _model(1).state_dict().items()}
    bare = _numbers(geodrift.scan(sd, null_draws=8, k=1))
    path = tmp_path / "ckpt.pt"
    torch.save(wrap(sd), path)
    for source in (wrap(sd), path):
        got = _numbers(geodrift.scan(source, null_draws=8, k=1))
        for a, b in zip(got, bare, strict=True):
            assert a[:2] == b[:2] and a[2:] == pytest.approx(b[2:], abs=1e-6)


def test_a_state_dict_without_tensors_and_a_wrong_object_are_one_line_errors(tmp_path: Path):
    with pytest.raises(GeodriftError, match="holds no tensors .*top-level keys: epoch, optimizer"):
        geodrift.scan({"epoch": 3, "optimizer": {"lr": 1.0, "momentum": 0.9}})
    with pytest.raises(GeodriftError, match="cannot scan a int"):
        geodrift.scan(3)
    with pytest.raises(GeodriftError, match="^k=0: must be at least 1"):
        geodrift.scan(_model(), k=0)
    with pytest.raises(GeodriftError, match="unknown projection 'qq'"):
        geodrift.scan(_model(), roles=["q", "qq"])
    report = geodrift.scan(_model(), roles=["q", "attn_k"], layers=[0, 1, 2], null_draws=4, k=1)
    assert [r.role for r in report.roles] == ["attn_q", "attn_k"] and report.roles[0].layers == [0, 1, 2]


def test_a_hugging_face_module_brings_its_config_so_the_ov_composite_is_scanned():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    report = geodrift.scan(transformers.LlamaForCausalLM(config), null_draws=8, k=2)
    assert report.role("attn_ov") is not None and report.role("attn_k").shape == (16, 32)


def test_to_frame_is_one_tidy_row_per_projection_space_k_and_pair():
    report = geodrift.scan(_model(), null_draws=8, k=2, ov=False)
    frame = report.to_frame()
    assert len(frame) == 7 * 2 * 2 * 3  # roles x spaces x k x adjacent pairs
    assert {"abs_cos", "null_mean", "null_std", "z", "random_floor", "projection", "space", "k", "layer"} <= set(frame)
    q_v1 = frame[(frame.role == "attn_q") & (frame.space == "v") & (frame.k == 1)]
    assert q_v1.abs_cos.mean() == pytest.approx(report.role("attn_q").spaces["v"].vectors[0].mean, abs=1e-6)


def test_import_geodrift_stays_light_and_to_frame_without_pandas_is_a_one_line_error():
    code = ("import sys, geodrift; light = 'torch' not in sys.modules; sys.modules['pandas'] = None\n"
            "from geodrift.continuity import Report\n"
            "try:\n    Report('x', 'raw', 1, 2, 0, []).to_frame()\nexcept Exception as e:\n"
            "    print(light, type(e).__name__, e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("True GeodriftError") and "pip install 'geodrift[frame]'" in out


def test_the_readme_notebook_example_runs_as_written():
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- api-example -->\n```python\n(.*?)```", text, re.S)
    assert block is not None, "README: the Python API example (after <!-- api-example -->) is missing"
    lines = block.group(1).strip().splitlines()
    assert len(lines) == 5
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    frame = namespace["frame"]
    assert len(frame) > 0 and {"abs_cos", "null_mean", "random_floor"} <= set(frame.columns)  # type: ignore[attr-defined]
