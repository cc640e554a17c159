"""LaCo-style layer merging (Yang et al. 2024): fold the layers to be removed into a kept neighbour.

LaCo's Reserving-Differences-while-Seeking-Common merges a block ``l, l+1, ..., l+m`` into layer
``l`` as ``theta_l + sum_k (theta_{l+k} - theta_l)`` (every parameter of the decoder layer: the
seven projections and both norms), then drops ``l+1..l+m``. geodrift applies it to any removal set:
each removed layer is merged into the nearest kept layer before it (the first kept layer when
nothing is kept before it), so that merging and plain removal of the *same* layers can be compared
on the same held-out windows. LaCo's own choice of blocks (by output similarity) is not used.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import torch

from geodrift.compress.model import kept_layers
from geodrift.lm.llama import LlamaLM


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


@torch.no_grad()
def merged_parameters(model: LlamaLM, removed: Iterable[int]) -> dict[str, torch.Tensor]:
    """``{parameter name: merged tensor}`` of the kept layers that absorb ``removed`` (the model is unchanged).

    Example:
        >>> m = LlamaLM(vocab_size=20, d_model=8, n_layers=3, n_heads=2, d_ff=16)
        >>> new = merged_parameters(m, [2])
        >>> p = "model.layers.{}.mlp.up_proj.weight"
        >>> w = dict(m.named_parameters())
        >>> torch.allclose(new[p.format(1)], w[p.format(2)])  # theta_1 + (theta_2 - theta_1)
        True
    """
    params = dict(model.named_parameters())
    out: dict[str, torch.Tensor] = {}
    for target, sources in merge_targets(len(model.model.layers), removed).items():
        prefix = f"model.layers.{target}."
        for name, base in params.items():
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            delta = sum((params[f"model.layers.{s}.{rest}"].detach() - base.detach() for s in sources),
                        torch.zeros_like(base))
            out[name] = base.detach() + delta
    return out
