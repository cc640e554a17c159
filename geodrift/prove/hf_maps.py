"""Exact (and deliberately inexact) maps of GPT-2, Gemma 2/3 and Mixtral state dicts: the families
:mod:`geodrift.gauge.orbit` (Llama-named dicts) does not cover. Each returns a new dict.

GPT-2 stores ``Conv1D`` weights as ``(d_in, d_out)`` (``y = x W + b``), so a map ``v -> M v`` on a
layer's output is ``W -> W M^T`` there. Gemma's RMSNorm multiplies by ``1 + w`` (w is stored).
"""

from __future__ import annotations

import torch

StateDict = dict[str, torch.Tensor]


def _copy(sd: StateDict) -> StateDict:
    return {k: v.clone() for k, v in sd.items()}


def _layers(sd: StateDict, prefix: str) -> list[int]:
    return sorted({int(k[len(prefix):].split(".")[0]) for k in sd if k.startswith(prefix)})


# ---- GPT-2 ----------------------------------------------------------------------------------
GPT2 = "transformer.h."


def gpt2_fold_gains(sd: StateDict) -> StateDict:
    """LayerNorm gains into their readers (``c_attn``, ``c_fc``, ``lm_head``); gains 1, biases ``b / g``.

    Example:
        >>> sd = {"transformer.ln_f.weight": torch.tensor([2.0]), "transformer.ln_f.bias": torch.tensor([4.0]),
        ...       "lm_head.weight": torch.tensor([[3.0]])}
        >>> gpt2_fold_gains(sd)["lm_head.weight"].item(), gpt2_fold_gains(sd)["transformer.ln_f.bias"].item()
        (6.0, 2.0)
    """
    out = _copy(sd)
    pairs = [(f"{GPT2}{l}.ln_1", f"{GPT2}{l}.attn.c_attn", "conv") for l in _layers(sd, GPT2)]
    pairs += [(f"{GPT2}{l}.ln_2", f"{GPT2}{l}.mlp.c_fc", "conv") for l in _layers(sd, GPT2)]
    pairs.append(("transformer.ln_f", "lm_head", "linear"))
    for norm, reader, kind in pairs:
        g = out[f"{norm}.weight"]
        w = out[f"{reader}.weight"]
        out[f"{reader}.weight"] = g[:, None] * w if kind == "conv" else w * g[None, :]
        out[f"{norm}.bias"] = out[f"{norm}.bias"] / g
        out[f"{norm}.weight"] = torch.ones_like(g)
    return out


def gpt2_rotate(sd: StateDict, r: torch.Tensor) -> StateDict:
    """Residual map ``h -> R h`` on a gain-folded GPT-2: embeddings ``E R^T``, readers ``R W`` (Conv1D),
    writers ``W R^T`` with biases ``R b``, LayerNorm biases ``R b``, head ``H R^T``."""
    out = _copy(sd)
    r = r.to(next(iter(sd.values())).dtype)
    for key in ("transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight"):
        out[key] = out[key] @ r.T
    out["transformer.ln_f.bias"] = r @ out["transformer.ln_f.bias"]
    for l in _layers(sd, GPT2):
        p = f"{GPT2}{l}."
        for reader in ("attn.c_attn", "mlp.c_fc"):
            out[p + reader + ".weight"] = r @ out[p + reader + ".weight"]
        for writer in ("attn.c_proj", "mlp.c_proj"):
            out[p + writer + ".weight"] = out[p + writer + ".weight"] @ r.T
            out[p + writer + ".bias"] = r @ out[p + writer + ".bias"]
        for norm in ("ln_1", "ln_2"):
            out[p + norm + ".bias"] = r @ out[p + norm + ".bias"]
    return out


def gpt2_translate(sd: StateDict, generator: torch.Generator) -> StateDict:
    """Add random multiples of ``1`` to every write: token and position rows, writers' biases and columns."""
    out = _copy(sd)

    def along_ones(n: int, d: int) -> torch.Tensor:  # n random multiples of the all-ones row
        return torch.randn(n, 1, generator=generator, dtype=torch.float64).to(out["lm_head.weight"].dtype) \
            * torch.ones(1, d, dtype=out["lm_head.weight"].dtype)

    for key in ("transformer.wte.weight", "transformer.wpe.weight"):
        out[key] = out[key] + along_ones(*out[key].shape)
    for l in _layers(sd, GPT2):
        for writer in ("attn.c_proj", "mlp.c_proj"):
            w = out[f"{GPT2}{l}.{writer}.weight"]
            out[f"{GPT2}{l}.{writer}.weight"] = w + along_ones(*w.shape)
            out[f"{GPT2}{l}.{writer}.bias"] = out[f"{GPT2}{l}.{writer}.bias"] + along_ones(1, w.shape[1])[0]
    return out


def gpt2_head_columns(d_model: int, head_dim: int, part: int, head: int) -> slice:
    """``c_attn``'s output columns of head ``head`` of ``part`` (0 q, 1 k, 2 v)."""
    start = part * d_model + head * head_dim
    return slice(start, start + head_dim)


def gpt2_map_head(sd: StateDict, layer: int, head: int, head_dim: int, q: torch.Tensor | None = None,
                  k: torch.Tensor | None = None, v: torch.Tensor | None = None,
                  o: torch.Tensor | None = None) -> StateDict:
    """Left-multiply head ``head``'s q / k / v outputs (weight columns and bias) by the given matrices and
    map ``c_proj``'s input rows of the head by ``o`` (rows ``-> o @ rows``)."""
    out = _copy(sd)
    p = f"{GPT2}{layer}.attn."
    w, b = out[p + "c_attn.weight"], out[p + "c_attn.bias"]
    d_model = w.shape[0]
    for part, m in enumerate((q, k, v)):
        if m is not None:
            cols = gpt2_head_columns(d_model, head_dim, part, head)
            w[:, cols] = w[:, cols] @ m.T
            b[cols] = m @ b[cols]
    if o is not None:
        rows = slice(head * head_dim, (head + 1) * head_dim)
        out[p + "c_proj.weight"][rows] = o @ out[p + "c_proj.weight"][rows]
    return out


def gpt2_scale_units(sd: StateDict, layer: int, scales: torch.Tensor, perm: torch.Tensor | None = None) -> StateDict:
    """Hidden unit ``j`` of layer ``layer``: ``c_fc`` column and bias ``* s_j``, ``c_proj`` row ``/ s_j``;
    then (optionally) the units permuted."""
    out = _copy(sd)
    p = f"{GPT2}{layer}.mlp."
    s = scales.to(out[p + "c_fc.weight"].dtype)
    fc_w, fc_b, proj = out[p + "c_fc.weight"] * s, out[p + "c_fc.bias"] * s, out[p + "c_proj.weight"] / s[:, None]
    if perm is not None:
        fc_w, fc_b, proj = fc_w[:, perm], fc_b[perm], proj[perm]
    out[p + "c_fc.weight"], out[p + "c_fc.bias"], out[p + "c_proj.weight"] = fc_w, fc_b, proj
    return out


# ---- Gemma 2/3 ------------------------------------------------------------------------------
GEMMA = "model.layers."
READERS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
WRITERS = ("self_attn.o_proj", "mlp.down_proj")
PRE_NORM = {"self_attn.q_proj": "input_layernorm", "self_attn.k_proj": "input_layernorm",
            "self_attn.v_proj": "input_layernorm", "mlp.gate_proj": "pre_feedforward_layernorm",
            "mlp.up_proj": "pre_feedforward_layernorm"}
POST_NORMS = ("post_attention_layernorm", "post_feedforward_layernorm")


def gemma_fold_pre_gains(sd: StateDict) -> StateDict:
    """The pre-norms' gains ``1 + w`` into their readers (``W diag(1 + w)``), ``w -> 0``. The sandwich
    (post) norms and the final norm keep theirs: nothing reads them linearly."""
    out = _copy(sd)
    for l in _layers(sd, GEMMA):
        for reader, norm in PRE_NORM.items():
            out[f"{GEMMA}{l}.{reader}.weight"] = out[f"{GEMMA}{l}.{reader}.weight"] * (1 + sd[f"{GEMMA}{l}.{norm}.weight"])
        for norm in set(PRE_NORM.values()):
            out[f"{GEMMA}{l}.{norm}.weight"] = torch.zeros_like(sd[f"{GEMMA}{l}.{norm}.weight"])
    return out


def gemma_residual(sd: StateDict, m: torch.Tensor, perm: torch.Tensor | None = None) -> StateDict:
    """``h -> M h``: embedding ``E M^T`` (the tied head follows), readers ``W M^T``, writers ``M W``; with
    ``perm`` (``M`` a signed permutation, ``(M h)_i = +-h_perm[i]``) every norm gain is permuted too."""
    out = _copy(sd)
    m = m.to(sd["model.embed_tokens.weight"].dtype)
    out["model.embed_tokens.weight"] = sd["model.embed_tokens.weight"] @ m.T
    if "lm_head.weight" in out:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    for l in _layers(sd, GEMMA):
        for reader in READERS:
            out[f"{GEMMA}{l}.{reader}.weight"] = sd[f"{GEMMA}{l}.{reader}.weight"] @ m.T
        for writer in WRITERS:
            out[f"{GEMMA}{l}.{writer}.weight"] = m @ sd[f"{GEMMA}{l}.{writer}.weight"]
        if perm is not None:
            for norm in (*set(PRE_NORM.values()), *POST_NORMS):
                out[f"{GEMMA}{l}.{norm}.weight"] = sd[f"{GEMMA}{l}.{norm}.weight"][perm]
    if perm is not None:
        out["model.norm.weight"] = sd["model.norm.weight"][perm]
    return out


def gemma_uniform_gains(sd: StateDict, names: tuple[str, ...]) -> StateDict:
    """The named per-layer norms (and ``model.norm`` if ``"final"`` is named) set to gain 1 (``w = 0``)."""
    out = _copy(sd)
    for key in out:
        if any(key.endswith(f".{n}.weight") for n in names) or ("final" in names and key == "model.norm.weight"):
            out[key] = torch.zeros_like(out[key])
    return out


def qk_pair_map(sd: StateDict, layer: int, kv: int, pair: int, q_map: torch.Tensor, k_map: torch.Tensor,
                n_heads: int, n_kv: int, head_dim: int) -> StateDict:
    """The 2x2 maps on frequency pair ``pair`` (rows ``(j, j + head_dim/2)``) of K's head ``kv`` and of Q's
    heads of that KV group (Llama-named ``q_proj`` / ``k_proj``, biases too where present)."""
    out = _copy(sd)
    rows = torch.tensor([pair, pair + head_dim // 2])
    group = n_heads // n_kv
    for name, heads, m in (("q_proj", range(kv * group, (kv + 1) * group), q_map), ("k_proj", [kv], k_map)):
        for suffix in ("weight", "bias"):
            key = f"{GEMMA}{layer}.self_attn.{name}.{suffix}"
            if key in out:
                for h in heads:
                    idx = h * head_dim + rows
                    out[key][idx] = m.to(out[key].dtype) @ out[key][idx]
    return out


# ---- Mixtral --------------------------------------------------------------------------------
def moe_prefix(layer: int) -> str:
    """The Mixtral sparse-MoE block's key prefix."""
    return f"{GEMMA}{layer}.block_sparse_moe."


def mixtral_permute_experts(sd: StateDict, layer: int, perm: torch.Tensor) -> StateDict:
    """New expert ``i`` is old expert ``perm[i]``; the router's rows move with them."""
    out = _copy(sd)
    p = moe_prefix(layer)
    out[p + "gate.weight"] = sd[p + "gate.weight"][perm]
    for new, old in enumerate(perm.tolist()):
        for w in ("w1", "w2", "w3"):
            out[f"{p}experts.{new}.{w}.weight"] = sd[f"{p}experts.{old}.{w}.weight"]
    return out


def mixtral_expert_units(sd: StateDict, layer: int, expert: int, up: torch.Tensor | None = None,
                         gate: torch.Tensor | None = None, perm: torch.Tensor | None = None) -> StateDict:
    """Expert ``expert``'s hidden units: Up (``w3``) rows ``* up``, or Gate (``w1``) rows ``* gate``, Down
    (``w2``) columns divided by the same; then optionally permuted."""
    out = _copy(sd)
    p = f"{moe_prefix(layer)}experts.{expert}."
    w1, w2, w3 = sd[p + "w1.weight"], sd[p + "w2.weight"], sd[p + "w3.weight"]
    for scales, which in ((up, "up"), (gate, "gate")):
        if scales is not None:
            s = scales.to(w1.dtype)
            w3, w1 = (w3 * s[:, None], w1) if which == "up" else (w3, w1 * s[:, None])
            w2 = w2 / s[None, :]
    if perm is not None:
        w1, w2, w3 = w1[perm], w2[:, perm], w3[perm]
    out[p + "w1.weight"], out[p + "w2.weight"], out[p + "w3.weight"] = w1, w2, w3
    return out
