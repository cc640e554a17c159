"""The fine-tuning jobs: ``geodrift finetune`` (one run) and the forgetting grid (its runs through the sweep).

Example:
    >>> run_finetune(FinetuneRequest(corpus="no-such-corpus", lr=1e-4, steps=2))
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --corpus no-such-corpus: no such corpus; use one of stdlib-docs, django-en, django-de, django-ja, sympy-code, or a path to a text file or folder
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geodrift.jobs.events import SILENT, Events
from geodrift.jobs.options import check_fields


@dataclass(frozen=True)
class FinetuneRequest:
    """Every option of ``geodrift finetune`` (see :class:`geodrift.finetune.spec.FinetuneSpec` for their meaning).

    ``out`` None: nothing is written (no checkpoints, so no weights-only indicators).
    """

    corpus: str
    lr: float
    steps: int
    model: str | None = None
    batch: int = 2
    seq_len: int = 128
    checkpoints: tuple[int, ...] | str = ()  # or the command line's "8,16,24"
    seed: int = 0
    probe_windows: int = 64
    domain_windows: int = 32
    taylor_windows: int = 4
    reverts: bool = False
    revert_windows: int = 16
    keep: str = "all"
    out: Path | None = None
    resume: bool = False
    force: bool = False
    device: str = "cpu"


def run_finetune(request: FinetuneRequest, events: Events = SILENT) -> dict[str, Any]:
    """Check everything (spec, corpus, model, device, output folder), then fine-tune and measure one run.

    Returns:
        The run's record (``run.json``'s payload).

    Raises:
        GeodriftError: a bad option, a missing corpus, another architecture, an output folder holding files
            geodrift did not write, non-finite weights after a step (the last good checkpoint is kept).
    """
    from geodrift.errors import GeodriftError
    from geodrift.finetune.inputs import check_model
    from geodrift.finetune.run import run_finetune as run_one
    from geodrift.finetune.spec import FinetuneSpec
    from geodrift.io.checks import check_device
    from geodrift.io.outdir import prepare_out
    from geodrift.lm.corpora import load_named

    r = request
    check_fields(r)
    steps_at = r.checkpoints
    if isinstance(steps_at, str):
        parts = [p.strip() for p in steps_at.split(",") if p.strip()]
        if not all(p.isdigit() for p in parts):
            raise GeodriftError(f"--checkpoints {steps_at}: give steps as integers, e.g. 8,16,24")
        steps_at = tuple(int(p) for p in parts)
    spec = FinetuneSpec(corpus=r.corpus, lr=r.lr, steps=r.steps, model=r.model, batch=r.batch, seq_len=r.seq_len,
                        checkpoints=steps_at, seed=r.seed, probe_windows=r.probe_windows,
                        domain_windows=r.domain_windows, taylor_windows=r.taylor_windows, reverts=r.reverts,
                        revert_windows=r.revert_windows, keep=r.keep)
    check_device(r.device)
    load_named(spec.corpus)  # a missing corpus is refused before the model is read
    check_model(r.model)  # headers only: another architecture is refused before anything is loaded
    corpus_path = spec.corpus if Path(spec.corpus).exists() else None
    prepare_out(r.out, resume=r.resume, reload=False, force=r.force, inputs=[r.model, corpus_path])
    events.begin(f"fine-tune {spec.label}", spec.steps, "steps")
    record = run_one(spec, r.out, device=r.device, on_stage=events.stage,
                     on_step=lambda step, steps, loss: events.advance(step, steps, f"loss {loss:.3f}"))
    events.end()
    return record


@dataclass(frozen=True)
class ForgettingRequest:
    """The forgetting grid (:func:`geodrift.finetune.grid.grid_specs`): its runs on a sweep backend, then the
    analysis. ``out`` is required (the runs' records and final checkpoints; a finished run is skipped)."""

    out: Path
    preset: str = "full"
    model: str | None = None
    backend: str = "local"
    workers: int = 1
    address: str | None = None
    threads: int = 1
    device: str = "cpu"
    resume: bool = False
    force: bool = False


def run_forgetting_runs(request: ForgettingRequest, events: Events = SILENT) -> list[dict[str, Any]]:
    """Run (or reuse) every run of the grid through :func:`geodrift.sweep.runner.run_sweep`; their records.

    Raises:
        GeodriftError: a bad option or output folder; every run failed. A failed run is reported by name and the
            others go on (its record is absent from the list).
    """
    from geodrift.errors import GeodriftError
    from geodrift.finetune.grid import grid_specs
    from geodrift.finetune.inputs import check_model
    from geodrift.io.checks import check_device
    from geodrift.io.outdir import prepare_out
    from geodrift.sweep.grid import Job
    from geodrift.sweep.runner import check_options, run_sweep

    r = request
    check_fields(r)
    check_options(r.backend, r.workers, r.threads, 0.0)
    check_device(r.device)
    specs = grid_specs(r.preset, r.model)
    check_model(r.model)
    removed = prepare_out(r.out, resume=r.resume, reload=False, force=r.force, inputs=[r.model])
    if removed:
        events.stage(f"--force: deleted {len(removed)} earlier result file(s) under {r.out}")
    jobs = [Job(spec, spec.seed, f"forgetting-{r.preset}") for spec in specs]
    events.begin(f"forgetting grid {r.preset}", len(jobs), "runs")
    outcomes = run_sweep(jobs, backend=r.backend, workers=r.workers, address=r.address, out=str(r.out),
                         device=r.device, threads=r.threads, on_status=events.sweep)
    events.end()
    records = [o.result for o in outcomes if isinstance(o.result, dict)]
    failed = [f"{o.job.spec.label}: {o.error}" for o in outcomes if o.error is not None]
    if not records:
        raise GeodriftError(f"forgetting grid {r.preset}: every run failed ({'; '.join(failed[:3])})")
    for line in failed:
        events.stage(f"failed run: {line}")
    return records


@dataclass
class ForgettingAnswer:
    """The grid's answer: the points, every indicator's result, the best weights-only one and the merges."""

    records: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    indicators: list[Any]  # geodrift.finetune.analysis.IndicatorResult
    best: Any
    merges: list[dict[str, Any]]


MERGE_METHODS = ("indicator", "taylor", "oracle")


def run_forgetting_analysis(records: list[dict[str, Any]], out: Path, *, merge: bool = True,
                            methods: tuple[str, ...] = ("indicator", "taylor"),
                            events: Events = SILENT) -> ForgettingAnswer:
    """Analyse a grid's records (:mod:`geodrift.finetune.analysis`); with ``merge``, evaluate the forgetting-aware
    per-layer merges (:mod:`geodrift.finetune.merge_eval`) of every shifted-domain run with reverts whose last
    checkpoint is on disk, each against the uniform midpoint, with weights from ``methods``: ``indicator`` (the
    best weights-only one), ``taylor`` (the data baseline's per-layer prediction), ``oracle`` (the measured
    single-layer reverts: uses the probe itself)."""
    from geodrift.finetune.analysis import analyse, best_weights_only, per_layer_values, points
    from geodrift.finetune.merge_eval import evaluate_merges, indicator_weights

    results = analyse(records)
    best = best_weights_only(results)
    merges = []
    if merge:
        chosen = [r for r in records if r.get("reverts") and r["spec"]["corpus"] != r["spec"]["probe"]
                  and Path(str(r["checkpoints"][-1]["path"])).is_dir()]
        events.begin("forgetting-aware merges", len(chosen), "runs")
        for i, rec in enumerate(chosen, 1):
            values = per_layer_values(rec, best.name) or []
            taylor = [max(0.0, v) for v in per_layer_values(rec, "taylor") or []]
            oracle = [max(0.0, r["recovery"]) for r in rec["reverts"]]
            weights = {"indicator": (f"indicator:{best.name}", indicator_weights(values)),
                       "taylor": ("taylor", indicator_weights(taylor)),
                       "oracle": ("reverts (oracle)", indicator_weights(oracle))}
            merges.append(evaluate_merges(rec, dict(weights[m] for m in methods), out))
            events.advance(i)
        events.end()
    return ForgettingAnswer(records, points(records), results, best, merges)
