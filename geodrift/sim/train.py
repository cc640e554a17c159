"""The training loop shared by every simulator (toy MLP, transformer): model-, data- and metric-agnostic.

A simulator plugs in four things:

- ``model``: any ``nn.Module``;
- ``batches``: a ``BatchSource`` whose ``batch(step)`` is a *pure function of the step* (and the
  seeds it was built with) - resuming then needs no RNG state and the same seed gives the same
  batches (bitwise on CPU);
- ``loss_fn(model, batch) -> (loss, stats)``: the scalar to backpropagate and a dict of detached
  tensors (e.g. per-member loss/accuracy) handed to the tracker;
- ``tracker``: an object implementing ``Tracker`` (or ``None`` = tracking off, the compute floor).

The loop, for ``step`` in ``[start_step, stop)``::

    loss, stats = loss_fn(model, batches.batch(step)); loss.backward()
    tracker.after_backward(step, stats)          # every step: cheap accumulation (e.g. sum of grads)
    if tracker.wants(step): tracker.track(step)  # gradients of this step are in .grad, weights are
                                                 # those *before* this step's update
    clip_grad_norm_(grad_clip)                   # clip -> step -> schedule, in that order
    optimizer.step(); scheduler.step()
    every checkpoint_every steps: on_checkpoint(step + 1)

After the last step (``step == steps``) one extra forward/backward is made without an update so the
tracker sees the final weights together with a gradient (not added to cumulative sums); it is
skipped when tracking is off. ``step 0`` tracking is the first backward pass, before any update.

Determinism: no global RNG is used here. Optimisers come from ``make_optimizer`` (Adam, AdamW,
SGD+momentum; ``foreach=False`` so the maths does not depend on the kernel path), the learning-rate
schedule from ``make_scheduler`` (a ``LambdaLR``; its state is saved with a checkpoint).

Example:
    >>> model = torch.nn.Linear(3, 1)
    >>> class Ones:
    ...     def batch(self, step): return torch.ones(4, 3)
    >>> loss_fn = lambda m, b: (m(b).pow(2).mean(), {})
    >>> opt = make_optimizer(model.parameters(), TrainConfig(steps=5))
    >>> train(model, Ones(), loss_fn, opt, make_scheduler(opt, TrainConfig(steps=5)), steps=5)
    5
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch
from torch import nn

from geodrift.errors import GeodriftError
from geodrift.io.checks import check_device
from geodrift.sim.config import TrainConfig

LossFn = Callable[[nn.Module, Any], tuple[torch.Tensor, dict[str, torch.Tensor]]]


class BatchSource(Protocol):
    """Step-indexed batches: ``batch(step)`` depends only on ``step`` and construction arguments."""

    def batch(self, step: int) -> Any: ...


class Tracker(Protocol):
    """Measures a run while it trains; owns its own results and resumable state."""

    def after_backward(self, step: int, stats: dict[str, torch.Tensor]) -> None:
        """Called every training step after ``backward()`` and before the update."""

    def wants(self, step: int, final: bool) -> bool:
        """Whether to call ``track`` at ``step`` (``final``: the post-training evaluation)."""

    def track(self, step: int) -> None:
        """Measure; ``.grad`` holds this step's gradient and the weights are pre-update."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``auto`` (cuda when available) -> ``torch.device`` (:func:`geodrift.io.checks.check_device`).

    Raises:
        GeodriftError: ``cuda`` requested but not available, or an unknown name.
    """
    return torch.device(check_device(name))


def make_optimizer(params: Iterable[nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser named by ``cfg`` (element-wise, so ensembles train members independently).

    Args:
        params: parameters to optimise.
        cfg: ``optimizer`` in ``adam, adamw, sgd``; ``lr``, ``beta1``, ``beta2``, ``eps``,
            ``weight_decay``, ``momentum``.

    Returns:
        A ``torch.optim.Optimizer``.
    """
    params = list(params)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                                weight_decay=cfg.weight_decay, foreach=False)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                                 weight_decay=cfg.weight_decay, foreach=False)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                           foreach=False)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """``cfg.schedule`` as a ``LambdaLR``: ``constant`` (factor 1) or ``cosine``.

    ``cosine``: linear warm-up to ``lr`` over ``warmup_steps`` (factor ``(t + 1) / warmup``), then
    cosine decay to ``lr * min_lr_ratio`` at the last step. Step ``t`` of training uses factor(t).
    """
    def factor(step: int) -> float:
        if cfg.schedule == "constant":
            return 1.0
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train(
    model: nn.Module,
    batches: BatchSource,
    loss_fn: LossFn,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    *,
    steps: int,
    grad_clip: float = 0.0,
    tracker: Tracker | None = None,
    start_step: int = 0,
    stop_at: int | None = None,
    checkpoint_every: int = 0,
    on_checkpoint: Callable[[int], None] | None = None,
    on_step: Callable[[int, torch.Tensor], None] | None = None,
) -> int:
    """Train ``model`` from ``start_step`` to ``steps`` (or stop early at ``stop_at``).

    Args:
        model, batches, loss_fn, optimizer, scheduler, tracker: see the module docstring.
        steps: total optimiser steps of the run.
        grad_clip: clip the global gradient norm to this before each step (0 = off).
        start_step: first step to run (a resumed run passes its checkpoint's step).
        stop_at: stop before this step (simulates an interruption); ``on_checkpoint`` is called.
        checkpoint_every: call ``on_checkpoint(next_step)`` every this many steps (0 = only at
            ``stop_at``; a finished run needs no checkpoint).
        on_checkpoint: saves a resumable state; receives the next step to run.
        on_step: progress callback, receives the number of completed steps and that step's loss
            (a detached 0-d tensor: convert it sparingly, ``float()`` waits for the device).

    Returns:
        The next step to run (``steps`` when finished).

    Raises:
        GeodriftError: when the loss becomes NaN/Inf (the message names the step).
    """
    end = steps if stop_at is None else min(stop_at, steps)
    model.train()
    for step in range(start_step, end):
        optimizer.zero_grad(set_to_none=True)
        loss, stats = loss_fn(model, batches.batch(step))
        if not bool(torch.isfinite(loss)):
            raise GeodriftError(f"training diverged: loss is {float(loss.detach())} at step {step}; lower --lr or "
                                "change the init")
        loss.backward()
        if tracker is not None:
            tracker.after_backward(step, stats)
            if tracker.wants(step, final=False):
                tracker.track(step)
        if grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=False)
        optimizer.step()
        scheduler.step()
        done = step + 1
        if on_step is not None:
            on_step(done, loss.detach())
        if on_checkpoint is not None and checkpoint_every and done % checkpoint_every == 0 and done < end:
            on_checkpoint(done)
    if end == steps and tracker is not None and tracker.wants(steps, final=True):
        optimizer.zero_grad(set_to_none=True)
        loss, _ = loss_fn(model, batches.batch(steps))
        loss.backward()
        tracker.track(steps)
        optimizer.zero_grad(set_to_none=True)
    if on_checkpoint is not None and end < steps:
        on_checkpoint(end)
    return end
