"""Random small transformers models of each architecture family the scanner reads, for the numeric twins.

Built from their configs (no download), in float64, eval mode, eager attention, every weight drawn
from a ``torch.Generator`` (std 0.2, so the nonlinearities bend) and every norm gain and bias random
too, so that no gauge holds by accident of a uniform gain. Needs ``transformers`` (the test extra).
"""

from __future__ import annotations

from typing import Any

import torch

WIDTH, HEADS, KV_HEADS, HEAD_DIM, FF, VOCAB, LAYERS = 32, 4, 2, 8, 48, 64, 2


def _randomise(model: Any, generator: torch.Generator, std: float = 0.2) -> Any:
    """Redraw every parameter: matrices ~ N(0, std^2), vectors (gains, biases) ~ N(0, 0.3^2) (+1 for a
    gain stored as the gain itself, i.e. every ``*norm*``/``ln_*`` weight outside the Gemma family)."""
    gemma = "Gemma" in type(model).__name__
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * std)
            else:
                noise = torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.3
                is_gain = name.endswith("weight") and ("norm" in name or ".ln_" in name)
                p.copy_(noise + (1.0 if is_gain and not gemma else 0.0))
    return model.eval()


def _build(config: Any, cls: Any, generator: torch.Generator) -> Any:
    config._attn_implementation = "eager"
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        model = cls(config).double()
    return _randomise(model, generator)


def qwen2(generator: torch.Generator) -> Any:
    """Qwen2 (Llama with q/k/v biases): GQA 4/2 heads, RoPE, RMSNorm pre-norms, SwiGLU, untied head."""
    import transformers as hf

    config = hf.Qwen2Config(hidden_size=WIDTH, intermediate_size=FF, num_hidden_layers=LAYERS,
                            num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                            tie_word_embeddings=False, max_position_embeddings=64)
    return _build(config, hf.Qwen2ForCausalLM, generator)


def gemma(generator: torch.Generator, version: int = 2) -> Any:
    """Gemma 2 (sandwich norms, soft-capping) or Gemma 3 (plus per-head q/k norms), GeGLU, tied head."""
    import transformers as hf

    common = dict(hidden_size=WIDTH, intermediate_size=FF, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, vocab_size=VOCAB, query_pre_attn_scalar=HEAD_DIM,
                  sliding_window=8, max_position_embeddings=64)
    if version == 2:
        return _build(hf.Gemma2Config(**common), hf.Gemma2ForCausalLM, generator)
    config = hf.Gemma3TextConfig(**common, layer_types=["sliding_attention", "full_attention"])
    return _build(config, hf.Gemma3ForCausalLM, generator)


def gpt2(generator: torch.Generator, activation: str = "gelu_new") -> Any:
    """GPT-2: LayerNorm with biases, learned positions, Conv1D ``(d_in, d_out)`` weights, untied head."""
    import transformers as hf

    config = hf.GPT2Config(n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, n_positions=64, vocab_size=VOCAB,
                           activation_function=activation, tie_word_embeddings=False, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0)
    return _build(config, hf.GPT2LMHeadModel, generator)


def mixtral(generator: torch.Generator) -> Any:
    """Mixtral: 4 experts, top-2 routing, SwiGLU experts (w1 Gate, w3 Up, w2 Down)."""
    import transformers as hf

    config = hf.MixtralConfig(hidden_size=WIDTH, intermediate_size=24, num_hidden_layers=LAYERS,
                              num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                              num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
                              max_position_embeddings=64)
    return _build(config, hf.MixtralForCausalLM, generator)
