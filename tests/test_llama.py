"""The simulator's Llama: same logits as Hugging Face transformers, real SmolLM2 weights, ablations."""

from __future__ import annotations

import math

import pytest
import torch

from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from geodrift.pretrained import llama_from_checkpoint, smollm2_perplexity, smollm2_tokenizer
from geodrift.weights import TRANSFORMER_ROLES


def _hf_config(**kw):  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    return transformers, transformers.LlamaConfig(attn_implementation="eager", attention_bias=False,
                                                  mlp_bias=False, hidden_act="silu", **kw)


@pytest.mark.parametrize("tie,n_kv", [(False, None), (True, 2)])
def test_logits_match_hugging_face_llama_on_random_weights(tie: bool, n_kv: int | None) -> None:
    model = LlamaLM(vocab_size=97, d_model=32, n_layers=3, n_heads=4, n_kv_heads=n_kv, d_ff=48,
                    tie_embeddings=tie, rope_theta=500.0, norm_eps=1e-6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # non-trivial norm gains so that a misplaced gain would show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    transformers, cfg = _hf_config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=n_kv or 4, rms_norm_eps=1e-6,
                                   rope_theta=500.0, tie_word_embeddings=tie, max_position_embeddings=64)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    hf.load_state_dict(model.state_dict(), strict=True)  # same names, one to one
    ids = torch.randint(0, 97, (2, 19), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours, theirs = model.eval()(ids), hf(ids).logits
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4), (ours - theirs).abs().max()


@pytest.fixture(scope="module")
def smollm2() -> LlamaLM:
    from geodrift.scanner.readers import open_checkpoint

    return llama_from_checkpoint(open_checkpoint(None))


def test_smollm2_logits_match_hugging_face_llama(smollm2: LlamaLM) -> None:
    from geodrift.scanner.readers import open_checkpoint

    c = open_checkpoint(None).config
    transformers, cfg = _hf_config(
        vocab_size=c["vocab_size"], hidden_size=c["d_model"], intermediate_size=c["d_ff"],
        num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"], num_key_value_heads=c["n_kv_heads"],
        rms_norm_eps=c["norm_eps"], rope_theta=c["rope_theta"], tie_word_embeddings=c["tie_embeddings"],
        max_position_embeddings=256)
    hf = transformers.LlamaForCausalLM(cfg)
    hf.load_state_dict(smollm2.state_dict(), strict=True)
    hf.eval()
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 2116, 30, 378, 253, 1390, 28, 2], [2, 17, 33, 900, 49000,
                                                                                           5, 6, 7, 8, 9, 10, 11, 12]])
    with torch.no_grad():
        ours, theirs = smollm2(ids), hf(ids).logits
    scale = theirs.abs().max()
    assert float((ours - theirs).abs().max()) <= 1e-4 * float(scale) + 1e-4
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_smollm2_predicts_repeated_real_text_with_its_own_tokenizer(smollm2: LlamaLM) -> None:
    # A real Llama with correctly un-permuted Q/K rows (RoPE layout) copies a repeated sentence
    # (induction): the second occurrence costs far fewer nats than the first; chance is log(49152) = 10.8.
    tok = smollm2_tokenizer()
    sentence = "Geometric continuity of singular vectors emerges across the layers of residual networks."
    phrase = tok.encode(" " + sentence)
    assert tok.decode(phrase) == " " + sentence
    ids = torch.tensor([tok.encode(sentence) + phrase])
    with torch.no_grad():
        logp = torch.log_softmax(smollm2(ids), -1)[0]
    nll = [-float(logp[i, ids[0, i + 1]]) for i in range(ids.shape[1] - 1)]
    n = len(phrase)
    first, second = sum(nll[: -n]) / (len(nll) - n), sum(nll[-n + 1:]) / (n - 1)
    assert second < 2.0 < math.log(tok.vocab_size)
    assert second < 0.4 * first


def test_weight_tensors_are_hf_projections_in_d_out_d_in_orientation() -> None:
    m = LlamaLM(vocab_size=11, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24)
    ws = m.weightset()
    assert ws.roles() == list(TRANSFORMER_ROLES)
    assert ws.shape("attn_k") == (8, 16) and ws.shape("mlp_down") == (16, 24)
    assert m.state_dict()["model.layers.1.mlp.up_proj.weight"].data_ptr() == m.projection("mlp_up", 1).weight.data_ptr()


def test_init_is_normal_with_std_0_02_and_seeded() -> None:
    a = LlamaLM(300, 64, 2, 4, 128, generator=torch.Generator().manual_seed(5))
    b = LlamaLM(300, 64, 2, 4, 128, generator=torch.Generator().manual_seed(5))
    w = torch.cat([p.detach().flatten() for n, p in a.named_parameters() if "norm" not in n])
    assert abs(float(w.std()) - 0.02) < 0.0005 and abs(float(w.mean())) < 0.0005
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert float(a.model.norm.weight.detach().min()) == 1.0  # type: ignore[union-attr]


@torch.no_grad()
def test_linear_attention_is_the_documented_causal_mean_of_raw_scores() -> None:
    torch.manual_seed(0)
    m = LlamaLM(20, 8, 1, 1, 8, attention="linear", generator=torch.Generator().manual_seed(3))
    attn = m.model.layers[0].self_attn
    x = torch.randn(1, 5, 8)
    cos, sin = m._rope_tables(5, x.device)
    got = attn(x, cos, sin)
    from geodrift.lm.llama import _apply_rope

    q = _apply_rope(attn.q_proj(x)[:, None], cos, sin)[0, 0]
    k = _apply_rope(attn.k_proj(x)[:, None], cos, sin)[0, 0]
    v = attn.v_proj(x)[0]
    rows = [sum(float(q[t] @ k[s]) / math.sqrt(8) * v[s] for s in range(t + 1)) / (t + 1) for t in range(5)]
    want = attn.o_proj(torch.stack(rows))  # type: ignore[arg-type]
    assert torch.allclose(got[0], want, atol=1e-5)
    # Causal: changing the last position does not change earlier outputs.
    y = x.clone()
    y[0, -1] += 1.0
    assert torch.allclose(attn(y, cos, sin)[0, :-1], got[0, :-1], atol=1e-6)


def test_v_activation_is_applied_to_v_output() -> None:
    # With v = relu(W_v x) and a single position, attention output is o_proj(relu(v_proj(x))).
    m = LlamaLM(20, 8, 1, 2, 8, v_activation="relu", generator=torch.Generator().manual_seed(3))
    attn = m.model.layers[0].self_attn
    x = torch.randn(1, 1, 8, generator=torch.Generator().manual_seed(4))
    cos, sin = m._rope_tables(1, x.device)
    assert torch.allclose(attn(x, cos, sin), attn.o_proj(torch.relu(attn.v_proj(x))), atol=1e-6)


@pytest.mark.parametrize("activation", ["silu", "relu", "gelu", "none", "radial", "radial_rms"])
def test_every_mlp_activation_trains_one_step_finitely(activation: str) -> None:
    m = LlamaLM(30, 16, 2, 2, 32, activation=activation)
    ids = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(0))
    loss = torch.nn.functional.cross_entropy(m(ids[:, :-1]).reshape(-1, 30), ids[:, 1:].reshape(-1))
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in m.parameters())


def test_bilinear_mlp_is_gate_times_up() -> None:
    m = LlamaLM(10, 8, 1, 2, 12, activation="none")
    mlp = m.model.layers[0].mlp
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(mlp(x), mlp.down_proj(mlp.gate_proj(x) * mlp.up_proj(x)))


def test_no_residual_and_no_norm_switches_change_the_function() -> None:
    ids = torch.randint(0, 30, (1, 6), generator=torch.Generator().manual_seed(0))
    base = LlamaLM(30, 16, 2, 2, 32)(ids)
    assert not torch.allclose(base, LlamaLM(30, 16, 2, 2, 32, residual=False)(ids))
    nonorm = LlamaLM(30, 16, 2, 2, 32, norm="none")
    assert "model.norm.weight" not in nonorm.state_dict()
    assert not torch.allclose(base, nonorm(ids))


def test_bad_switch_or_shape_raises_geodrift_error() -> None:
    with pytest.raises(GeodriftError, match="activation"):
        LlamaLM(10, 8, 1, 2, 8, activation="swish")
    with pytest.raises(GeodriftError, match="n_heads"):
        LlamaLM(10, 10, 1, 3, 8)
    with pytest.raises(GeodriftError, match="norm"):
        LlamaLM(10, 8, 1, 2, 8, norm="post")


@pytest.mark.parametrize("attention", ["softmax", "linear"])
def test_the_whole_model_is_causal(attention: str) -> None:
    # Changing token t never changes the logits at positions < t (no leak from the future).
    m = LlamaLM(40, 16, 2, 2, 32, attention=attention, v_activation="silu",
                generator=torch.Generator().manual_seed(0))
    ids = torch.randint(0, 40, (1, 12), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[0, 7] = (ids[0, 7] + 1) % 40
    a, b = m(ids), m(changed)
    assert torch.allclose(a[0, :7], b[0, :7], atol=1e-6)
    assert not torch.allclose(a[0, 7:], b[0, 7:])


def test_smollm2_perplexity_on_held_out_english_is_far_below_chance() -> None:
    from geodrift.lm.text import load_corpus

    text = load_corpus().valid[:4000]
    out = smollm2_perplexity(text, seq_len=48, max_windows=2)
    assert out["tokens"] == 96.0
    assert math.isclose(out["ppl"], math.exp(out["nll"]))
    assert out["ppl"] < 100.0 < 49152  # a trained model on English prose, vs chance = the vocabulary size
    assert 0.0 < out["bits_per_byte"] < 2.5
