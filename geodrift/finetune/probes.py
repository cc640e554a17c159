"""What needs data besides the weights: the Taylor / EWC baseline, single-layer reverts, per-layer merges.

- :class:`TaylorBaseline`: the gradient ``g`` of the original loss at the base, from a few windows of the
  original kind of text (the probe corpus's *training* split: never the held-out windows), and the diagonal
  of the empirical Fisher ``F = mean(g_w^2)`` over those windows. The predicted forgetting of a change
  ``d = theta_t - theta_0`` is ``g . d`` (first order) plus ``1/2 sum F d^2`` (EWC's penalty), in total and
  per decoder layer. This is the data-light baseline the weights-only indicators must beat.
- :func:`single_layer_reverts`: the fine-tuned model with one decoder layer put back to the base, for each
  layer: the probe NLL it recovers (the per-layer ground truth of where the forgetting lives). Each layer's
  input states are computed once, so reverting layer ``l`` runs only layers ``l..L-1``.
- :func:`layer_lerp`: ``(1 - a_l) theta_0 + a_l theta_t`` with one weight per decoder layer (the merge of
  item 4; parameters outside the layers take the mean weight).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from geodrift.finetune.evaluate import Logits, paired
from geodrift.finetune.model import TrainableLM, layer_of


class TaylorBaseline:
    """The gradient and diagonal Fisher of the original loss at the base (see the module docstring)."""

    def __init__(self, lm: TrainableLM, windows: torch.Tensor, device: torch.device) -> None:
        params = dict(lm.named_parameters())
        self.grad = {name: torch.zeros_like(p) for name, p in params.items()}
        self.fisher = {name: torch.zeros_like(p) for name, p in params.items()}
        self.windows = int(windows.shape[0])
        for window in windows:
            ids = window[None].to(device)
            scores = lm.logits(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(scores.reshape(-1, scores.shape[-1]), ids[:, 1:].reshape(-1))
            grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
            for name, g in zip(params, grads, strict=True):
                if g is not None:
                    self.grad[name] += g / self.windows
                    self.fisher[name] += g.pow(2) / self.windows

    @torch.no_grad()
    def predict(self, lm: TrainableLM, base: dict[str, torch.Tensor]) -> dict[str, object]:
        """The predicted change of the original loss, total and per layer, for the model's current weights.

        Returns:
            ``{"first_order", "fisher", "total", "per_layer": {layer: total}}`` in nats.
        """
        first, fisher = 0.0, 0.0
        per_layer: dict[int, float] = {}
        for name, p in lm.named_parameters():
            d = (p.detach() - base[name]).double()
            a = float((self.grad[name].double() * d).sum())
            b = 0.5 * float((self.fisher[name].double() * d.pow(2)).sum())
            first, fisher = first + a, fisher + b
            layer = layer_of(name)
            if layer is not None:
                per_layer[layer] = per_layer.get(layer, 0.0) + a + b
        return {"first_order": first, "fisher": fisher, "total": first + fisher,
                "per_layer": {str(k): v for k, v in sorted(per_layer.items())}}


@torch.no_grad()
def swap_layer(lm: TrainableLM, layer: int, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copy ``state``'s parameters of decoder layer ``layer`` into the model; returns what they replaced."""
    old = {}
    for name, p in lm.named_parameters():
        if layer_of(name) == layer:
            old[name] = p.detach().clone()
            p.copy_(state[name])
    return old


@torch.no_grad()
def single_layer_reverts(lm: TrainableLM, base: dict[str, torch.Tensor], windows: torch.Tensor,
                         device: torch.device, batch: int = 8,
                         progress: Callable[[int, int], None] | None = None) -> list[dict[str, float]]:
    """For each decoder layer: the probe NLL the fine-tuned model recovers when that layer alone is the base's.

    Returns:
        One row per layer: ``layer``, ``recovery`` (NLL of the fine-tune minus NLL with the layer reverted,
        mean over windows: positive = the layer carries forgetting), ``se`` (paired, across windows).
    """
    n = lm.n_layers
    finetuned: list[torch.Tensor] = []
    reverted: list[list[torch.Tensor]] = [[] for _ in range(n)]
    runner = lm.runner
    for start in range(0, windows.shape[0], batch):
        chunk = windows[start:start + batch].to(device)
        inputs: dict[int, torch.Tensor] = {}
        h = runner.run_layers(runner.embed(chunk[:, :-1]), range(n), record=inputs.__setitem__)
        finetuned.append(_nll(runner.logits(h), chunk))
        for layer in range(n):
            old = swap_layer(lm, layer, base)
            try:
                out = runner.run_layers(inputs[layer], range(layer, n))
            finally:
                swap_layer(lm, layer, old)
            reverted[layer].append(_nll(runner.logits(out), chunk))
        if progress is not None:
            progress(min(start + batch, windows.shape[0]), windows.shape[0])
    ft = torch.cat(finetuned)
    rows = []
    for layer in range(n):
        d = paired(torch.cat(reverted[layer]), ft)  # ft - reverted
        rows.append({"layer": layer, "recovery": d["mean"], "se": d["se"]})
    return rows


def _nll(logits: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
    loss = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), chunk[:, 1:], reduction="none")
    return loss.mean(1).double().cpu()


@torch.no_grad()
def layer_lerp(lm: TrainableLM, base: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor],
               weights: dict[int, float]) -> None:
    """Set the model to ``(1 - a_l) base + a_l tuned`` per decoder layer ``l`` (``a`` = ``weights[l]``); parameters
    outside the decoder layers take the mean weight."""
    mean = sum(weights.values()) / len(weights)
    for name, p in lm.named_parameters():
        layer = layer_of(name)
        a = mean if layer is None else weights[layer]
        p.copy_(torch.lerp(base[name], tuned[name], a))


def logits_of(lm: TrainableLM) -> Logits:
    """``lm.logits`` as a plain callable (what :func:`geodrift.finetune.evaluate.window_nlls` takes)."""
    return lm.logits
