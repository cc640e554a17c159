"""Folded view: pre-norm gains on the input side, gemma2/3 output-norm gains on the output side."""

from __future__ import annotations

import torch
from _checkpoints import (
    hf_config,
    hf_to_gguf_tensors,
    llama_metadata,
    llama_state,
    write_gguf,
    write_hf_folder,
)

from geodrift.scanner.fold import fold_plan, fold_weight
from geodrift.scanner.readers import open_checkpoint, weightset


def test_fold_weight_is_the_product_with_a_diagonal_gain() -> None:
    g = torch.Generator().manual_seed(0)
    w, a, b = torch.randn(5, 3, generator=g), torch.randn(3, generator=g), torch.randn(5, generator=g)
    torch.testing.assert_close(fold_weight(w, a, "in"), w @ torch.diag(a))
    torch.testing.assert_close(fold_weight(w, b, "out"), torch.diag(b) @ w)


def test_folded_llama_is_w_times_input_norm_gain_and_leaves_o_down_raw(tmp_path) -> None:
    state = llama_state(2, 32, 4, 2, 48)
    ckpt = open_checkpoint(write_hf_folder(tmp_path, state, hf_config(n_layers=2), dtype=torch.float32))
    raw, folded = weightset(ckpt, "raw"), weightset(ckpt, "folded")
    assert (raw.view, folded.view) == ("raw", "folded")
    g_attn = state["model.layers.1.input_layernorm.weight"]
    g_mlp = state["model.layers.1.post_attention_layernorm.weight"]
    torch.testing.assert_close(folded[("attn_k", 1)], raw[("attn_k", 1)] * g_attn)
    torch.testing.assert_close(folded[("mlp_up", 1)], raw[("mlp_up", 1)] * g_mlp)
    assert torch.equal(folded[("attn_o", 1)], raw[("attn_o", 1)])
    assert torch.equal(folded[("mlp_down", 1)], raw[("mlp_down", 1)])
    # folding is exact: the block computes the same thing on any normalised input
    x = torch.randn(7, 32, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close((x * g_attn) @ raw[("attn_q", 1)].T, x @ folded[("attn_q", 1)].T)


def test_folded_gemma2_uses_one_plus_w_and_folds_post_norms_into_output_side(tmp_path) -> None:
    state = llama_state(2, 32, 4, 4, 48, gemma2=True)
    ckpt = open_checkpoint(write_hf_folder(tmp_path, state, hf_config("gemma2", n_layers=2, n_kv=4), dtype=torch.float32))
    assert fold_plan(ckpt, "attn_o", 0) == [("norm_attn_post", "out")]
    assert fold_plan(ckpt, "mlp_gate", 0) == [("norm_mlp", "in")]
    raw, folded = weightset(ckpt), weightset(ckpt, "folded")
    p = "model.layers.0."
    torch.testing.assert_close(folded[("attn_q", 0)], raw[("attn_q", 0)] * (1 + state[p + "input_layernorm.weight"]))
    torch.testing.assert_close(folded[("mlp_gate", 0)], raw[("mlp_gate", 0)] * (1 + state[p + "pre_feedforward_layernorm.weight"]))
    torch.testing.assert_close(folded[("attn_o", 0)],
                               (1 + state[p + "post_attention_layernorm.weight"])[:, None] * raw[("attn_o", 0)])
    torch.testing.assert_close(folded[("mlp_down", 0)],
                               (1 + state[p + "post_feedforward_layernorm.weight"])[:, None] * raw[("mlp_down", 0)])


def test_folded_view_is_the_same_from_gguf_and_safetensors(tmp_path) -> None:
    # gemma's GGUF stores 1 + w; both routes must fold the same effective gain.
    state = llama_state(2, 32, 4, 4, 48, gemma2=True)
    st = open_checkpoint(write_hf_folder(tmp_path / "hf", state, hf_config("gemma2", n_layers=2, n_kv=4), dtype=torch.float32))
    gg = open_checkpoint(write_gguf(tmp_path / "g.gguf", "gemma2", hf_to_gguf_tensors(state, "gemma2", 4, 4),
                                    llama_metadata(2, 32, 4, 4, 48)))
    a, b = weightset(st, "folded"), weightset(gg, "folded")
    for key in a:
        torch.testing.assert_close(a[key], b[key], msg=str(key))
