"""One run skeleton for both simulators: a RunSpec and its seeds -> trained models, records, reports.

``run(spec, seeds)`` asks the spec's simulator object (:mod:`geodrift.sim.simulator`) for its parts
(model, batches, loss, tracker), trains them with the shared loop (``geodrift.sim.train.train``: clip ->
step -> schedule), checkpoints and resumes (model, optimiser, scheduler and tracker state; bitwise
identical to an uninterrupted run on CPU), then measures the final weights of every member with
``geodrift.continuity.measure`` (the same report as ``geodrift scan``) and writes, per seed,
``<out>/<slug(label)>/seed<seed>/run.json`` and ``report.json``.

Seeds: a simulator that ``ensembles`` (the MLP) trains ``len(seeds)`` members as one batched ensemble
(members never interact, see ``geodrift.sim.mlp``); the transformer takes one seed per call.
``run_seeds`` trains one group per seed or one ensemble, as asked. A resumable checkpoint lives in
``<out>/<slug(label)>/<group>/checkpoint.pt`` (``group`` = ``seed42`` or ``ens-42-123-777``) and is
removed once the run completes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from geodrift.continuity import MeasureSpec, Report, measure
from geodrift.errors import GeodriftError
from geodrift.io.atomic import document, write_json
from geodrift.sim.config import RunSpec
from geodrift.sim.record import (
    RunRecord,
    load_checkpoint,
    load_record,
    run_dir,
    save_checkpoint,
    slug,
    write_record,
)
from geodrift.sim.simulator import Stage, silent, simulator
from geodrift.sim.track import Latest, summarize
from geodrift.sim.train import make_optimizer, make_scheduler, resolve_device, train


@dataclass
class RunResult:
    """One seed's outcome: its record, the final weights' continuity report, and its folder."""

    record: RunRecord
    report: Report
    path: Path | None


@dataclass(frozen=True)
class StepStatus:
    """What a progress display shows after each training step of a run."""

    label: str  # the configuration
    seeds: tuple[int, ...]  # the run's seed(s) (an MLP ensemble trains several at once)
    done: int  # steps completed in this run
    steps: int  # the run's length
    loss: torch.Tensor  # that step's training loss, detached 0-d (float() waits for the device: do it sparingly)
    latest: Latest | None  # the latest tracked weight continuity and its null (None before the first track)


def run(spec: RunSpec, seeds: list[int], *, out: str | Path | None = None, resume: bool = False,
        device: str = "auto", checkpoint_every: int = 0, track: bool = True, preset: str | None = None,
        stop_at: int | None = None, on_step: Callable[[StepStatus], None] | None = None,
        on_stage: Stage = silent, save_hf_every: int = 0) -> list[RunResult]:
    """Train ``spec`` for ``seeds`` as one group; record, checkpoint, resume, report.

    Args:
        spec: the configuration.
        seeds: the group's seeds (MLP: one ensemble member each; transformer: exactly one).
        out: folder for records and checkpoints (None: nothing is written).
        resume: reuse complete records, or continue from the group's checkpoint under ``out``.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        checkpoint_every: save a resumable checkpoint every this many steps (0: none).
        track: False turns tracking off (the compute floor of the overhead benchmarks).
        preset: the preset name stored in the records.
        stop_at: interrupt before this step (records are written with status ``partial``).
        on_step: called after every step with a :class:`StepStatus` (step, loss, latest continuity).
        on_stage: called with a message before slow start-up work (data loading, tokenizer training).
        save_hf_every: transformer only, with ``out``: save the weights as a Hugging Face folder
            (``<run folder>/hf/step-<n>/``, :func:`geodrift.lm.hf.save_hf`) at step 0, every this many
            steps and at the end (0: never).

    Returns:
        One RunResult per seed, in ``seeds`` order.

    Raises:
        GeodriftError: bad device or seeds, a checkpoint of another configuration, divergence.

    Example:
        >>> from geodrift.sim.presets import preset
        >>> [r.record.status for r in run(preset("mlp", "smoke")[0], [42])]  # doctest: +SKIP
        ['complete']
    """
    sim = simulator(spec.sim)
    if len(seeds) != 1 and not sim.ensembles:
        raise GeodriftError(f"--batch-seeds: the {sim.name} trains one seed per run; drop --batch-seeds")
    if save_hf_every < 0 or (save_hf_every and (not sim.exports_hf or out is None)):
        raise GeodriftError(f"--save-hf-every {save_hf_every}: needs a value >= 1, the transformer simulator and "
                            "--out DIR (where the Hugging Face folders go)")
    if out is not None and resume:
        done = _reload(out, spec, seeds)
        if done is not None:
            return done
    dev = resolve_device(device)
    parts = sim.parts(spec, seeds, dev, track, on_stage)
    optimizer = make_optimizer(parts.model.parameters(), spec.train)
    scheduler = make_scheduler(optimizer, spec.train)
    start_step, elapsed = 0, 0.0
    ckpt = checkpoint_path(out, spec.label, seeds) if out is not None else None
    if ckpt is not None and resume and ckpt.is_file():
        state = load_checkpoint(ckpt)
        if state.get("spec") != _stored(spec) or state.get("seeds") != list(seeds):
            raise GeodriftError(f"{ckpt}: checkpoint belongs to another configuration or seed list; "
                                "delete it or choose another --out")
        parts.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if parts.tracker is not None:
            parts.tracker.load_state_dict(state["tracker"])
        start_step, elapsed = int(state["step"]), float(state["seconds"])
    t0 = time.perf_counter()

    def save(next_step: int) -> None:
        if ckpt is not None:
            save_checkpoint(ckpt, {
                "step": next_step, "spec": _stored(spec), "seeds": list(seeds), "model": parts.model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "tracker": parts.tracker.state_dict() if parts.tracker else None,
                "seconds": elapsed + time.perf_counter() - t0,
            })

    def save_hf_step(done: int) -> None:
        if save_hf_every and out is not None and (done % save_hf_every == 0 or done == spec.train.steps):
            sim.save_hf(spec, parts.model, run_dir(out, spec.label, seeds[0]), done)

    def step_done(done: int, loss: torch.Tensor) -> None:
        save_hf_step(done)
        if on_step is not None:
            on_step(StepStatus(spec.label, tuple(seeds), done, spec.train.steps, loss,
                               parts.tracker.latest if parts.tracker else None))

    if start_step == 0:
        save_hf_step(0)

    end = train(parts.model, parts.batches, parts.loss_fn, optimizer, scheduler, steps=spec.train.steps,
                grad_clip=spec.train.grad_clip, tracker=parts.tracker, start_step=start_step, stop_at=stop_at,
                checkpoint_every=checkpoint_every, on_checkpoint=save if ckpt is not None else None,
                on_step=step_done if (on_step is not None or save_hf_every) else None)
    wall = time.perf_counter() - t0
    status = "complete" if end == spec.train.steps else "partial"
    if status == "complete" and ckpt is not None and ckpt.is_file():
        ckpt.unlink()  # the records now hold everything; resume reuses them
    timing = {"wall_s": elapsed + wall, "track_s": parts.tracker.seconds if parts.tracker else 0.0,
              "members": float(len(seeds)), "steps": float(end),
              sim.throughput: (end - start_step) * sim.units_per_step(spec) / max(wall, 1e-9)}
    results = []
    for e, seed in enumerate(seeds):
        rows = parts.tracker.rows(e) if parts.tracker is not None else parts.untracked_rows(end)
        report = measure(parts.weightset(e), MeasureSpec(k=spec.track.final_k, null_draws=spec.track.final_null_draws,
                                                         seed=seed), trajectory=True)
        record = RunRecord(label=spec.label, seed=seed, config=_stored(spec), data=parts.data_note,
                           device=str(dev), preset=preset, rows=[list(r) for r in rows],
                           summary={**summarize(rows), **_report_summary(report)}, timing=dict(timing),
                           status=status, vectors=parts.tracker.vectors[e] if parts.tracker is not None else {})
        path = None
        if out is not None:
            path = write_record(out, record).parent
            write_json(path / "report.json", document("continuity_report", report.to_dict()))
            for name, (kind, payload) in parts.files.items():
                write_json(path / name, document(kind, payload))
        results.append(RunResult(record, report, path))
    return results


def run_seeds(spec: RunSpec, seeds: list[int], *, batched: bool = False, **options: Any) -> list[RunResult]:
    """Train ``spec`` for every seed: one batched ensemble (``batched``, where the simulator can) or one run
    per seed (``Simulator.seed_groups``).

    One run per seed is the CPU default: each record is then bitwise what a single run with that
    seed gives. ``options`` are :func:`run`'s.
    """
    groups = simulator(spec.sim).seed_groups(seeds, batched)
    return [result for group in groups for result in run(spec, group, **options)]


def default_batched(device: str) -> bool:
    """Batch MLP seeds by default only where it pays: on CUDA."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def checkpoint_path(out: str | Path, label: str, seeds: list[int]) -> Path:
    """Where the resumable checkpoint of one group lives."""
    group = f"seed{seeds[0]}" if len(seeds) == 1 else "ens-" + "-".join(str(s) for s in seeds)
    return Path(out) / slug(label) / group / "checkpoint.pt"


def load_result(folder: str | Path) -> RunResult:
    """Reload one run (``run.json`` and ``report.json``) for re-rendering.

    Raises:
        GeodriftError: missing or unreadable files.
    """
    folder = Path(folder)
    record = load_record(folder)
    try:
        report = Report.from_dict(json.loads((folder / "report.json").read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as error:
        raise GeodriftError(f"{folder / 'report.json'}: cannot read the run's report ({error}); re-run it") from None
    return RunResult(record, report, folder)


def load_results(out: str | Path) -> list[RunResult]:
    """Every run saved under ``out`` (folders holding ``run.json`` and ``report.json``), sorted by path."""
    return [load_result(p.parent) for p in sorted(Path(out).rglob("run.json")) if (p.parent / "report.json").is_file()]


def _reload(out: str | Path, spec: RunSpec, seeds: list[int]) -> list[RunResult] | None:
    folders = [run_dir(out, spec.label, s) for s in seeds]
    if not all((f / "run.json").is_file() and (f / "report.json").is_file() for f in folders):
        return None
    results = [load_result(f) for f in folders]
    if all(r.record.status == "complete" and r.record.config == _stored(spec) for r in results):
        return results
    return None


def _stored(spec: RunSpec) -> dict[str, Any]:
    # The spec as it reads back from JSON (tuples become lists), for comparisons with records.
    return json.loads(json.dumps(spec.to_dict()))  # type: ignore[no-any-return]


def _report_summary(report: Report) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for r in report.roles:
        for space in ("v", "u"):
            vc = r.spaces[space].vectors[0]
            out[f"final {r.role} {space}1"] = vc.mean
            out[f"final {r.role} {space}1 null"] = vc.null_mean
            out[f"final {r.role} {space}1 z"] = vc.z
    return out
