"""Shared helpers for the simulator tests (tiny presets, the embedded data loaded once)."""

from __future__ import annotations

import functools

import torch

from geodrift.sim.config import RunSpec, preset
from geodrift.sim.data import Dataset, ShuffledBatches, load_dataset
from geodrift.sim.mlp import build_mlp, ensemble_loss
from geodrift.sim.train import make_optimizer, train


@functools.lru_cache(maxsize=1)
def mnist5k() -> Dataset:
    return load_dataset("mnist5k")


def smoke_spec(index: int = 0) -> RunSpec:
    return preset("smoke")[index]


def first_losses(spec: RunSpec, seed: int, n: int) -> list[float]:
    """Per-step training losses of the first ``n`` steps (tracking off)."""
    data = mnist5k()
    model = build_mlp(spec.mlp, data.in_dim, data.n_classes, [seed])
    opt = make_optimizer(model.parameters(), spec.train)
    losses: list[float] = []

    def loss_fn(m: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]):  # type: ignore[no-untyped-def]
        loss, stats = ensemble_loss(m, batch)
        losses.append(float(stats["loss"][0]))
        return loss, stats

    train(model, ShuffledBatches(data, [seed], spec.train.batch_size), loss_fn, opt, steps=n)
    return losses
