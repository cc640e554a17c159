"""Shared helpers for the simulator tests: the smoke/tiny presets, their runs cached once per process.

Cached results are shared by several test files (the runs are deterministic, so any test may read
them); tests must not mutate them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

import torch

from geodrift.sim.config import RunSpec
from geodrift.sim.data import Dataset, ShuffledBatches, load_dataset
from geodrift.sim.experiment import Overrides, build_specs
from geodrift.sim.mlp import build_mlp, ensemble_loss
from geodrift.sim.presets import preset
from geodrift.sim.run import RunResult, run
from geodrift.sim.train import make_optimizer, make_scheduler, train


@functools.lru_cache(maxsize=1)
def mnist5k() -> Dataset:
    return load_dataset("mnist5k")


def smoke_spec(index: int = 0) -> RunSpec:
    """The MLP smoke preset's configuration ``index`` (0: Res+ReLU, 1: Res+None; D 32, L 4, 30 steps)."""
    return preset("mlp", "smoke")[index]


def tiny_spec(**overrides: Any) -> RunSpec:
    """The transformer tiny preset (D 32, 3 layers, byte tokens) with ``Overrides`` (e.g. ``steps=12``)."""
    return build_specs("transformer", "tiny", Overrides(**overrides))[0]


def smoke_result(index: int = 0, seed: int = 42) -> RunResult:
    """One tracked smoke run (nothing written), cached per (index, seed)."""
    return _smoke_result(index, seed)


@functools.lru_cache(maxsize=4)
def _smoke_result(index: int, seed: int) -> RunResult:
    return run(smoke_spec(index), [seed], device="cpu")[0]


@functools.lru_cache(maxsize=1)
def tiny_result() -> RunResult:
    """One tracked tiny transformer run of 12 steps (tracked at 0, 10, 12; evaluated at 0, 12), cached."""
    return run(tiny_spec(steps=12), [42], device="cpu")[0]


def first_losses(spec: RunSpec, seed: int, n: int) -> list[float]:
    """Per-step training losses of the first ``n`` steps of the MLP (tracking off)."""
    data = mnist5k()
    model = build_mlp(spec.model, data.in_dim, data.n_classes, [seed])  # type: ignore[arg-type]
    opt = make_optimizer(model.parameters(), spec.train)
    losses: list[float] = []

    def loss_fn(m: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]):  # type: ignore[no-untyped-def]
        loss, stats = ensemble_loss(m, batch)
        losses.append(float(stats["loss"][0]))
        return loss, stats

    train(model, ShuffledBatches(data, [seed], spec.train.batch_size), loss_fn, opt,
          make_scheduler(opt, spec.train), steps=n)
    return losses


def missing_nulls(rows: Iterable[list[Any]]) -> list[tuple[Any, ...]]:
    """Every ``cont`` row (step, source, role, space, k, layer) lacking a ``null_mean`` or ``null_std`` twin."""
    rows = list(rows)
    have = {(r[0], r[2], r[3], r[4], r[5], r[6], r[7]) for r in rows}
    return [(r[0], r[2], r[3], r[5], r[6], r[7]) for r in rows if r[4] == "cont"
            and not all((r[0], r[2], r[3], m, r[5], r[6], r[7]) in have for m in ("null_mean", "null_std"))]


def strict_json(text: str) -> Any:
    """``json.loads`` refusing NaN/Infinity (strict JSON)."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)
