"""LaCo layer merging (Yang et al. 2024): fold the layers to be removed into a kept neighbour.

What is merged. LaCo's Reserving-Differences-while-Seeking-Common (its Eq. 1) merges a block
``l, l+1, ..., l+m`` into layer ``l`` as ``theta_l + sum_k (theta_{l+k} - theta_l)`` and drops
``l+1..l+m``. ``theta`` is the seven projection weights (Q, K, V, O, Gate, Up, Down): those are the
tensors LaCo's published code (``merge_layers_return_model`` in github.com/yangyifei729/LaCo)
merges. The two RMSNorm weights (and any bias) stay the kept layer's own, as in that code.

How the blocks are chosen. geodrift applies Eq. 1 to any removal set: each removed layer is merged
into the nearest kept layer before it (the first kept layer when nothing is kept before it), so
every block is contiguous (``l`` and the removed run after it), and merging and plain removal of
the *same* layers are compared on the same held-out windows. LaCo's own choice of blocks (by
output similarity) is not used.

What Eq. 1 does and what LaCo's code does. For one merged layer (m = 1) Eq. 1 gives
``theta_{l+1}``: the block keeps layer ``l+1``'s projections behind ``l``'s norms, and the
perplexity is close to plain removal's. For m >= 2 the merged weight is
``sum_k theta_{l+k} - (m - 1) theta_l``; when adjacent layers' weights are unrelated (cosine near
0, as in SmolLM2-135M) its Frobenius norm is about ``sqrt(m^2 - m + 1)`` times a layer's
(:func:`norm_growth`), and the merged layer is not a layer of the model. LaCo's published code adds
the differences *in place*, so each difference is taken from the already-updated weight and the
block ends as ``theta_{l+m}``: it replaces rather than merges (issues #4 and #5 of that
repository; #4 reports that Eq. 1 applied as written collapses the model's output similarity).
geodrift implements Eq. 1 as the paper states it, not the in-place slip.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import torch

from geodrift.compress.model import kept_layers
from geodrift.lm.llama import LlamaLM
from geodrift.weights import HF_LLAMA_PROJECTIONS


def merge_targets(n_layers: int, removed: Iterable[int]) -> dict[int, list[int]]:
    """``{kept layer: [removed layers merged into it]}``.

    Example:
        >>> merge_targets(6, [0, 3, 4])
        {1: [0], 2: [3, 4]}
    """
    gone = sorted(set(removed))
    keep = kept_layers(n_layers, gone)
    out: dict[int, list[int]] = defaultdict(list)
    for layer in gone:
        below = [k for k in keep if k < layer]
        out[below[-1] if below else keep[0]].append(layer)
    return dict(sorted(out.items()))


def merged_names(layer: int) -> list[str]:
    """Parameter names LaCo merges in decoder layer ``layer``: the seven projection weights.

    Example:
        >>> merged_names(3)[:2]
        ['model.layers.3.self_attn.q_proj.weight', 'model.layers.3.self_attn.k_proj.weight']
    """
    return [f"model.layers.{layer}.{path}.weight" for path in HF_LLAMA_PROJECTIONS.values()]


@torch.no_grad()
def merged_parameters(model: LlamaLM, removed: Iterable[int]) -> dict[str, torch.Tensor]:
    """``{parameter name: merged tensor}`` of the kept layers that absorb ``removed`` (the model is unchanged).

    Only the seven projection weights of each target layer appear (:func:`merged_names`); its norms
    are left as they are.

    Args:
        model: the dense model.
        removed: the layers merged away (they must also be skipped in the forward).

    Returns:
        One tensor per projection of each target layer, shaped as that projection ``(d_out, d_in)``.

    Example:
        >>> m = LlamaLM(vocab_size=20, d_model=8, n_layers=3, n_heads=2, d_ff=16)
        >>> new = merged_parameters(m, [2])
        >>> p = "model.layers.{}.mlp.up_proj.weight"
        >>> w = dict(m.named_parameters())
        >>> torch.allclose(new[p.format(1)], w[p.format(2)])  # theta_1 + (theta_2 - theta_1)
        True
        >>> "model.layers.1.input_layernorm.weight" in new
        False
    """
    params = dict(model.named_parameters())
    out: dict[str, torch.Tensor] = {}
    for target, sources in merge_targets(len(model.model.layers), removed).items():
        for name, *source_names in zip(merged_names(target), *map(merged_names, sources), strict=True):
            base = params[name].detach()
            deltas = (params[s].detach() - base for s in source_names)
            out[name] = base + sum(deltas, torch.zeros_like(base))
    return out


@torch.no_grad()
def norm_growth(model: LlamaLM, removed: Iterable[int]) -> float:
    """Mean ``||merged projection|| / ||the target's own||`` (Frobenius) over every merged projection.

    About 1 when the merged layers' weights are close to the target's (LaCo's premise), about
    ``sqrt(m^2 - m + 1)`` for a block of m merged layers whose weights are unrelated; 1.0 when
    nothing is merged.

    Example:
        >>> m = LlamaLM(vocab_size=20, d_model=8, n_layers=3, n_heads=2, d_ff=16)
        >>> norm_growth(m, [])
        1.0
    """
    params = dict(model.named_parameters())
    ratios = [float(t.norm() / params[name].detach().norm()) for name, t in merged_parameters(model, removed).items()]
    return sum(ratios) / len(ratios) if ratios else 1.0
