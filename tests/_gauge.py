"""Shared by the gauge tests: Llama models rebuilt from (gauged) state dicts, and scan reports compared."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from geodrift.continuity import Report
from geodrift.gauge.orbit import EMBED, LM_HEAD
from geodrift.lm.hf import save_hf
from geodrift.lm.llama import LlamaLM


def rebuild(sd: dict[str, torch.Tensor], like: LlamaLM, dtype: torch.dtype = torch.float64) -> LlamaLM:
    """An untied LlamaLM of ``like``'s shape holding ``sd`` (``dtype``; float64 for function checks).

    The model is built on the meta device and takes ``sd``'s tensors themselves (``assign=True``; converted only
    where their dtype differs): a function check of a float64 SmolLM2 holds no third copy of its weights.
    """
    with torch.device("meta"):
        model = LlamaLM(like.model.embed_tokens.num_embeddings, like.model.embed_tokens.embedding_dim, like.n_layers,
                        like.n_heads, like.model.layers[0].mlp.up_proj.out_features, n_kv_heads=like.n_kv_heads,
                        rope_theta=like.rope_theta, norm_eps=like.norm_eps, tie_embeddings=False, init_std=0.0)
    full = dict(sd)
    full.setdefault(LM_HEAD, full[EMBED])
    model.load_state_dict({k: v.to(dtype) for k, v in full.items()}, assign=True)
    return model.eval()


def smollm2_layers(n_layers: int | None = None) -> LlamaLM:
    """The embedded SmolLM2-135M as a LlamaLM (float32): its real weights, all 30 layers (None) or its first
    ``n_layers`` with the embedding and final norm - a smaller real model of the same family, for the default test
    run (a float64 copy of the whole model is 1.1 GB; the tests that need two of them are ``heavy``)."""
    from geodrift.pretrained import llama_from_checkpoint, open_llama

    full = llama_from_checkpoint(open_llama(None))
    if n_layers is None or n_layers >= full.n_layers:
        return full
    sd = {k: v for k, v in full.state_dict().items()
          if not (k.startswith("model.layers.") and int(k.split(".")[2]) >= n_layers)}
    model = LlamaLM(full.model.embed_tokens.num_embeddings, full.model.embed_tokens.embedding_dim, n_layers,
                    full.n_heads, full.model.layers[0].mlp.up_proj.out_features, n_kv_heads=full.n_kv_heads,
                    rope_theta=full.rope_theta, norm_eps=full.norm_eps, tie_embeddings=full.tie_embeddings,
                    init_std=0.0)
    model.load_state_dict(sd)
    return model.eval()


def write_copy(sd: dict[str, torch.Tensor], like: LlamaLM, folder: Path) -> Path:
    """``sd`` written as a Hugging Face folder (float32 ``model.safetensors`` + ``config.json``)."""
    return save_hf(rebuild(sd, like, torch.float32), folder)


def numbers(report: Report) -> dict[tuple[str, str, str], Any]:
    """Every k = 1..K number and both verdicts of a report, keyed by (role, space, what)."""
    out: dict[tuple[str, str, str], Any] = {}
    for r in report.roles:
        out[(r.role, "", "verdict")] = (r.verdict, r.path_verdict)
        for s, space in r.spaces.items():
            out[(r.role, s, "gauge")] = space.gauge
            if space.gauge == "aligned":
                # head/hidden side of the canonical view: not shown, not judged; its means are canonical too (the
                # hidden units' sort key is accumulated in float64, so near-ties no longer swap between gauge-equivalent
                # copies: SmolLM2 layers 0-9, 3 draws of every generator: <= 3.8e-6, was 9.6e-4), to ALIGNED_TOLERANCE
                for vc in space.vectors:
                    out[(r.role, s, f"aligned_mean{vc.k}")] = vc.mean
                continue
            for vc in space.vectors:
                for name in ("mean", "null_mean", "null_std", "z"):
                    out[(r.role, s, f"{name}{vc.k}")] = getattr(vc, name)
            out[(r.role, s, "sigma2_wa")] = space.sigma2_wa
    for t in report.trajectory:
        out[(t.role, t.space, "evr")] = t.evr
        out[(t.role, t.space, "order_p")] = t.order_p
    return out


# Statistics divided by a null's std (z) or counted over permutations (order_p) amplify float32 rounding
# of the weights (1e-7) by 1/std, most for singular vectors k > 1 of nearly equal singular values (SmolLM2's
# Gate z6 moved by 1.1e-3 relative): they are compared to this tolerance instead (relative beyond 1).
DERIVED_TOLERANCE = 1e-2
# The means of the canonical view's aligned (head/hidden-side) spaces: a swap of two hidden units whose sort keys
# tie within the weights' own float32 rounding still moves them (by ~1e-4 per swap on SmolLM2), rarely.
ALIGNED_TOLERANCE = 1e-4


def differences(a: Report, b: Report, relative: float) -> list[str]:
    """The numbers of ``a`` and ``b`` that differ: means, nulls and Eq. 2 beyond ``relative * max(1, |x|)``,
    z, EVR and order p-values beyond :data:`DERIVED_TOLERANCE`, the aligned spaces' means beyond
    :data:`ALIGNED_TOLERANCE` (both times ``max(1, |x|)``), labels and verdicts at all."""
    na, nb = numbers(a), numbers(b)
    out = [f"{key}: only in one" for key in set(na) ^ set(nb)]
    for key in sorted(set(na) & set(nb)):
        x, y = na[key], nb[key]
        if isinstance(x, float):
            derived = key[2].startswith(("z", "evr", "order_p"))
            tolerance = max(relative, DERIVED_TOLERANCE) if derived else relative
            if key[2].startswith("aligned_mean"):
                tolerance = max(relative, ALIGNED_TOLERANCE)
            if not (math.isnan(x) and math.isnan(y)) and not abs(x - y) <= tolerance * max(1.0, abs(x)):
                out.append(f"{key}: {x!r} vs {y!r}")
        elif x != y:
            out.append(f"{key}: {x!r} vs {y!r}")
    return out
