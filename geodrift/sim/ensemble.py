"""Train one configuration for several seeds, as one batched ensemble or one seed at a time.

``run_group(spec, seeds, data)`` builds a ``ResidualMLP`` with ``len(seeds)`` members (batched
matmuls over the member axis; members are independent, see ``geodrift.sim.mlp``), trains it with
the shared loop (``geodrift.sim.train.train``), tracks it with ``MLPTracker`` and returns one
``RunRecord`` per seed. ``run_spec`` chooses batched or sequential execution. On a CPU the model is
compute-bound, so batching buys little; on a GPU a single member leaves the device idle and
batching is where the speed comes from (benchmarks/bench_sim_mlp.py measures both).

With ``out`` set, records go to ``<out>/<label>/seed<seed>/run.json`` and a resumable checkpoint to
``<out>/<label>/<group>/checkpoint.pt`` (``group`` = ``seed42`` or ``ens-42-123-777``), removed
once the run completes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from geodrift.errors import GeodriftError
from geodrift.sim.config import RunSpec
from geodrift.sim.data import Dataset, ShuffledBatches
from geodrift.sim.mlp import build_mlp, ensemble_loss
from geodrift.sim.record import (
    RunRecord,
    load_checkpoint,
    load_record,
    run_dir,
    save_checkpoint,
    slug,
    write_record,
)
from geodrift.sim.track import MLPTracker, summarize
from geodrift.sim.train import make_optimizer, resolve_device, train


def checkpoint_path(out: str | Path, label: str, seeds: list[int]) -> Path:
    group = f"seed{seeds[0]}" if len(seeds) == 1 else "ens-" + "-".join(str(s) for s in seeds)
    return Path(out) / slug(label) / group / "checkpoint.pt"


def run_group(
    spec: RunSpec,
    seeds: list[int],
    data: Dataset,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    preset: str | None = None,
    stop_at: int | None = None,
    on_step: Callable[[int], None] | None = None,
) -> list[RunRecord]:
    """Train ``spec`` for every seed in ``seeds`` as one batched ensemble.

    Args:
        spec: configuration (its ``train.seed`` is ignored; ``seeds`` rule).
        seeds: one member per seed.
        data: the data set (moved to the run's device).
        out: folder for records and checkpoints (``None``: keep in memory only).
        resume: reuse complete records and continue from a checkpoint under ``out``.
        preset: name stored in the records.
        stop_at: interrupt before this step (records are written with status ``partial``).
        on_step: progress callback (completed steps).

    Returns:
        One RunRecord per seed, in ``seeds`` order.

    Raises:
        GeodriftError: bad device, a checkpoint from another configuration, divergence.
    """
    if out is not None and resume:
        done = [run_dir(out, spec.label, s) / "run.json" for s in seeds]
        if all(p.is_file() for p in done):
            records = [load_record(p) for p in done]
            wanted = json.loads(json.dumps(spec.to_dict()))  # as stored (tuples become lists)
            if all(r.status == "complete" and r.config == wanted for r in records):
                return records
    device = resolve_device(spec.train.device)
    model = build_mlp(spec.mlp, data.in_dim, data.n_classes, seeds, device)
    optimizer = make_optimizer(model.parameters(), spec.train)
    ddata = data.to(device)
    batches = ShuffledBatches(ddata, seeds, spec.train.batch_size)
    epoch_steps = spec.train.epoch_steps or batches.steps_per_epoch
    tracker = MLPTracker(model, ddata, spec.track, epoch_steps, seeds) if spec.track.every > 0 else None
    start_step, elapsed = 0, 0.0
    ckpt = checkpoint_path(out, spec.label, seeds) if out is not None else None
    if ckpt is not None and resume and ckpt.is_file():
        state = load_checkpoint(ckpt)
        if state.get("spec") != spec.to_dict() or state.get("seeds") != list(seeds):
            raise GeodriftError(f"{ckpt}: checkpoint belongs to another configuration or seed list; "
                                "delete it or choose another --out")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if tracker is not None:
            tracker.load_state_dict(state["tracker"])
        start_step, elapsed = int(state["step"]), float(state["seconds"])
    t0 = time.perf_counter()

    def save(next_step: int) -> None:
        if ckpt is None:
            return
        save_checkpoint(ckpt, {
            "step": next_step, "spec": spec.to_dict(), "seeds": list(seeds), "model": model.state_dict(),
            "optimizer": optimizer.state_dict(), "tracker": tracker.state_dict() if tracker else None,
            "seconds": elapsed + time.perf_counter() - t0,
        })

    end = train(model, batches, ensemble_loss, optimizer, steps=spec.train.steps, tracker=tracker,
                start_step=start_step, stop_at=stop_at, checkpoint_every=spec.train.checkpoint_every,
                on_checkpoint=save if ckpt is not None else None, on_step=on_step)
    seconds = elapsed + time.perf_counter() - t0
    status = "complete" if end == spec.train.steps else "partial"
    if status == "complete" and ckpt is not None and ckpt.is_file():
        ckpt.unlink()  # the records now hold everything; resume reuses them
    records = []
    for e, seed in enumerate(seeds):
        rows = tracker.rows[e] if tracker is not None else []
        record = RunRecord(label=spec.label, seed=seed, config=spec.to_dict(), data=data.name,
                           device=str(device), preset=preset, rows=[list(r) for r in rows],
                           summary=summarize(rows) if rows else {},
                           timing={"wall_s": seconds, "track_s": tracker.seconds if tracker else 0.0,
                                   "members": float(len(seeds)), "steps": float(end)},
                           status=status, vectors=tracker.vectors[e] if tracker is not None else {})
        records.append(record)
        if out is not None:
            write_record(out, record)
    return records


def run_spec(
    spec: RunSpec,
    seeds: list[int],
    data: Dataset,
    *,
    batched: bool = False,
    out: str | Path | None = None,
    resume: bool = False,
    preset: str | None = None,
    on_step: Callable[[int], None] | None = None,
) -> list[RunRecord]:
    """Train ``spec`` for ``seeds``: one batched ensemble (``batched``) or one run per seed.

    One run per seed is the CPU default: each record is then bitwise what a single run with that
    seed gives.
    """
    if batched:
        return run_group(spec, seeds, data, out=out, resume=resume, preset=preset, on_step=on_step)
    records: list[RunRecord] = []
    for seed in seeds:
        records += run_group(spec, [seed], data, out=out, resume=resume, preset=preset, on_step=on_step)
    return records


def default_batched(device: str) -> bool:
    """Batch seeds by default only where it pays: on CUDA."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())
