"""Held-out NLL per window of a compressed model, and paired differences between two configurations.

Every configuration is evaluated on the same held-out windows, so two are compared by the paired
per-window difference of their mean NLL (nats/token) and its standard error over windows.
A configuration that changes nothing before layer ``start`` starts from the dense model's recorded
layer inputs (:func:`geodrift.compress.model.layer_states`), so pruning and merging cost only the
layers after their first change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from geodrift.compress.model import BATCH, kept_layers, nll_from_hidden
from geodrift.lm.llama import LlamaLM


@torch.no_grad()
def heldout_nll(model: LlamaLM, windows: torch.Tensor, removed: Iterable[int] = (),
                prefix: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
    """Mean NLL of each window ``(W, T + 1)`` with the layers ``removed`` skipped: ``(W,)``.

    Args:
        model: the model as it is now (factors applied by the caller).
        windows: held-out windows.
        removed: layers to skip.
        prefix: the dense model's layer inputs on these windows ``(L + 1, W, T, d)``; with it the
            forward starts at layer ``start`` (nothing before ``start`` may differ from the dense model).
        start: see ``prefix`` (ignored without it).
    """
    n_layers = len(model.model.layers)
    first = start if prefix is not None else 0
    layers = [i for i in kept_layers(n_layers, removed) if i >= first]
    out = []
    for i in range(0, windows.shape[0], BATCH):
        chunk = windows[i: i + BATCH]
        h = prefix[first, i: i + BATCH] if prefix is not None else model.model.embed_tokens(chunk[:, :-1])
        out.append(nll_from_hidden(model, model.run_layers(h, layers), chunk[:, 1:]))
    return torch.cat(out)


def paired(a: torch.Tensor | list[float], b: torch.Tensor | list[float]) -> dict[str, float]:
    """Paired difference of window NLLs ``a - b``: ``mean``, its standard error ``se`` and ``significant`` (|mean| > 2 se).

    Example:
        >>> d = paired([1.0, 2.0, 3.0, 4.0], [0.5, 1.5, 2.5, 3.0])
        >>> round(d["mean"], 3), round(d["se"], 3), d["significant"]
        (0.625, 0.125, 1.0)
    """
    d = torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)
    se = float(d.std() / math.sqrt(d.numel())) if d.numel() > 1 else float("inf")
    mean = float(d.mean())
    return {"mean": mean, "se": se, "significant": float(abs(mean) > 2 * se)}
