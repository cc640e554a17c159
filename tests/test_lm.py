"""geodrift.lm's public faces: the one activation registry, ``LlamaLM.run_layers`` and the one Hugging Face writer.

The writer's folders are read back by geodrift's own checkpoint reader and by transformers (real
safetensors files on disk); the compress and simulator paths that use it are covered end to end in
test_compress_cli.py and test_series.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from geodrift.errors import GeodriftError
from geodrift.lm.activations import LLAMA_MLP_ACTIVATIONS, LLAMA_V_ACTIVATIONS, NAMED, get_activation
from geodrift.lm.hf import hf_config, save_hf
from geodrift.lm.llama import LlamaLM
from geodrift.pretrained import llama_from_checkpoint
from geodrift.scanner.readers import open_checkpoint


def _llama(**kw) -> LlamaLM:  # type: ignore[no-untyped-def]
    return LlamaLM(vocab_size=61, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=24, init_std=0.2,
                   generator=torch.Generator().manual_seed(3), **kw)


def test_the_llama_accepts_exactly_the_registry_names_and_the_simulators_share_them() -> None:
    assert set(LLAMA_MLP_ACTIVATIONS) <= set(NAMED) and set(LLAMA_V_ACTIVATIONS) <= set(NAMED)
    for name in LLAMA_MLP_ACTIVATIONS:
        assert _llama(activation=name).model.layers[0].mlp.act is get_activation(name)
    with pytest.raises(GeodriftError, match="^activation: unknown value 'elu'; choose one of silu"):
        _llama(activation="elu")  # element-wise, fine for the MLP simulator, not a Llama switch
    with pytest.raises(GeodriftError, match="^v_activation: unknown value 'softplus'"):
        _llama(v_activation="softplus")
    assert get_activation("elu") is torch.nn.functional.elu  # the MLP simulator's open lookup


def test_the_registry_and_the_run_specs_import_without_torch() -> None:
    code = "import sys, geodrift.lm.activations, geodrift.sim.config; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_run_layers_over_all_layers_is_the_forward_and_a_subset_skips_layers() -> None:
    model = _llama().eval()
    ids = torch.randint(0, 61, (2, 7), generator=torch.Generator().manual_seed(4))
    h0 = model.model.embed_tokens(ids)
    seen: list[int] = []
    with torch.no_grad():
        full = model.run_layers(h0, range(3), record=lambda i, h: seen.append(i))
        assert torch.equal(model.lm_head(model.model.norm(full)), model(ids)) and seen == [0, 1, 2]
        cos, sin = model._rope_tables(7, h0.device)
        by_hand = model.model.layers[2](model.model.layers[0](h0, cos, sin), cos, sin)
        assert torch.equal(model.run_layers(h0, [0, 2]), by_hand)


def test_a_pruned_folder_renumbers_the_kept_layers_and_reads_back_with_the_same_logits(tmp_path: Path) -> None:
    model = _llama(rope_theta=500.0, norm_eps=1e-6).eval()
    folder = save_hf(model, tmp_path / "pruned", layers=[0, 2], context_length=256)
    state = load_file(folder / "model.safetensors")
    assert torch.equal(state["model.layers.1.mlp.up_proj.weight"], model.projection("mlp_up", 2).weight)
    assert not any(k.startswith("model.layers.2.") for k in state)
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_hidden_layers"], config["max_position_embeddings"], config["rope_theta"],
            config["rms_norm_eps"], config["num_key_value_heads"]) == (2, 256, 500.0, 1e-6, 2)
    back = llama_from_checkpoint(open_checkpoint(folder))
    ids = torch.randint(0, 61, (1, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = model.lm_head(model.model.norm(model.run_layers(model.model.embed_tokens(ids), [0, 2])))
        assert torch.allclose(back(ids), expected, atol=1e-6)


def test_replacement_weights_are_written_without_touching_the_model(tmp_path: Path) -> None:
    model = _llama()
    before = model.projection("attn_o", 1).weight.detach().clone()
    new = torch.full_like(before, 0.5)
    state = load_file(save_hf(model, tmp_path / "m", weights={("attn_o", 1): new}) / "model.safetensors")
    assert torch.equal(state["model.layers.1.self_attn.o_proj.weight"], new)
    assert torch.equal(model.projection("attn_o", 1).weight, before)
    for bad in ({("attn_o", 1): new[:, :3]}, {("attn_o", 7): new}, {("banana", 0): new}):
        with pytest.raises(GeodriftError, match="replaces no projection"):
            save_hf(model, tmp_path / "bad", weights=bad)
    with pytest.raises(GeodriftError, match="distinct index in 0..2"):
        save_hf(model, tmp_path / "bad", layers=[0, 0])
    assert not (tmp_path / "bad").exists()


def test_the_config_names_ablations_only_when_a_switch_is_off_the_llama_default() -> None:
    assert "geodrift_model" not in hf_config(_llama())
    ablated = hf_config(_llama(activation="radial", residual=False, v_activation="tanh"))
    assert ablated["geodrift_model"] == {"activation": "radial", "residual": False, "norm": "pre",
                                         "attention": "softmax", "v_activation": "tanh"}
    assert ablated["hidden_act"] == "radial"


def test_transformers_loads_a_written_folder_with_the_same_logits(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    model = _llama(tie_embeddings=True).eval()
    folder = save_hf(model, tmp_path / "hf", step=12)
    assert json.loads((folder / "config.json").read_text())["geodrift_step"] == 12
    hf = transformers.LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    ids = torch.randint(0, 61, (2, 11), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert torch.allclose(hf(ids).logits, model(ids), atol=1e-5, rtol=1e-4)
