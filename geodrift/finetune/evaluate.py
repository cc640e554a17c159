"""Held-out NLL per window, and the paired difference of two models on the same windows.

Forgetting and learning are differences between checkpoints of one run measured on *fixed* windows, so
each window is its own control: the standard error of the mean paired difference is far smaller than
either NLL's own spread across windows (``paired``).

Example:
    >>> import torch
    >>> d = paired(torch.tensor([3.0, 2.0, 4.0]), torch.tensor([3.1, 2.2, 4.3]))
    >>> round(d["mean"], 3), round(d["se"], 3), d["n"]
    (0.2, 0.058, 3)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

Logits = Callable[[torch.Tensor], torch.Tensor]


@torch.no_grad()
def window_nlls(logits: Logits, windows: torch.Tensor, device: torch.device, batch: int = 8) -> torch.Tensor:
    """Mean next-token NLL (nats) of each window ``(W, T + 1)``: tokens 1..T predicted from the ones before.

    Args:
        logits: ``ids (B, T) -> logits (B, T, vocab)``.
        windows: token ids.
        device: where the model runs.
        batch: windows per forward pass.

    Returns:
        ``(W,)`` float64 on the CPU.
    """
    out = []
    for start in range(0, windows.shape[0], batch):
        chunk = windows[start:start + batch].to(device)
        scores = logits(chunk[:, :-1]).float()
        loss = torch.nn.functional.cross_entropy(scores.transpose(1, 2), chunk[:, 1:], reduction="none")
        out.append(loss.mean(1).double().cpu())
    return torch.cat(out)


def paired(before: torch.Tensor, after: torch.Tensor) -> dict[str, float]:
    """``after - before`` on the same windows: mean, its standard error and the count.

    A single window has no spread: its SE is NaN (written as null in JSON).
    """
    diff = (after.double() - before.double())
    n = diff.numel()
    se = float(diff.std(unbiased=True) / math.sqrt(n)) if n > 1 else math.nan
    return {"mean": float(diff.mean()), "se": se, "n": n}


def mean_se(values: torch.Tensor) -> dict[str, float]:
    """Mean NLL of the windows and its standard error (across windows)."""
    n = values.numel()
    return {"mean": float(values.double().mean()),
            "se": float(values.double().std(unbiased=True) / math.sqrt(n)) if n > 1 else math.nan, "n": n}
