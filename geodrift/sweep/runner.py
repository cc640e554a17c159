"""Run a sweep's jobs on a backend and aggregate them like an in-process reproduction.

Backends:
- ``local`` (default): a ``concurrent.futures.ProcessPoolExecutor`` of ``workers`` processes
  (``spawn`` start method: each worker imports torch afresh, nothing is inherited mid-computation);
- ``ray``: one Ray task per run requesting ``num_cpus=threads`` and ``num_gpus=gpus`` (a local
  cluster of ``workers * threads`` CPUs is started when ``address`` is None, else the cluster at
  ``address`` is joined: ``--out`` must then be a folder every node can reach).

Every run is :func:`geodrift.sim.run.run` with one seed, ``torch.set_num_threads(threads)`` in its
process, and ``resume=True``: a finished run (its ``run.json`` + ``report.json`` under ``out``) is
reused, an interrupted one continues from its checkpoint (``checkpoint_every``). A run's numbers
depend only on its spec, seed and thread count, so every backend gives the same records bitwise
(CPU). A run that raises is reported with its error; the others go on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.sim.reproduce import Reproduction, assemble
from geodrift.sim.run import RunResult
from geodrift.sweep.execute import Outcome, SweepStatus, Tally, execute, exit_with_parent
from geodrift.sweep.grid import Grid, Job

BACKENDS = ("local", "ray")


def run_sweep(jobs: list[Job], *, backend: str = "local", workers: int = 1, address: str | None = None,
              out: str | None = None, device: str = "cpu", threads: int = 1, gpus: float = 0.0,
              checkpoint_every: int = 0, on_status: Callable[[SweepStatus], None] | None = None) -> list[Outcome]:
    """Run every job on ``backend``; outcomes in ``jobs`` order.

    Args:
        jobs: the runs (``Grid.jobs``).
        backend: ``local`` or ``ray``; workers: concurrent runs (local pool size; Ray: the local
            cluster's CPUs are ``workers * threads``); address: an existing Ray cluster (``auto`` or host:port).
        out: records and checkpoints (None: nothing written, nothing resumed).
        device: ``cpu``, ``cuda`` or ``auto`` inside each run; threads: torch threads (and Ray CPUs) per run;
        gpus: GPUs per run (Ray resource; fractions share a GPU).
        checkpoint_every: steps between resumable checkpoints (0: none).
        on_status: called after each start and end of a run.

    Raises:
        GeodriftError: bad option values, or Ray not installed.
    """
    check_options(backend, workers, threads, gpus)
    if not jobs:
        return []
    args = [(job.spec.to_dict(), job.seed, job.preset, _job_out(out, job), device, threads, checkpoint_every)
            for job in jobs]
    if backend == "ray":
        from geodrift.sweep.ray_backend import run_on_ray

        return run_on_ray(jobs, args, workers=workers, address=address, threads=threads, gpus=gpus,
                          on_status=on_status)
    return _run_local(jobs, args, workers, on_status)


def run_grid(grid: Grid, *, backend: str, workers: int, address: str | None, gpus: float, out: Path | None,
             resume: bool, force: bool, threads: int, device: str, checkpoint_every: int, plot: Path | None = None,
             on_stage: Callable[[str], None] | None = None, on_begin: Callable[[str, int, str], None] | None = None,
             on_status: Callable[[SweepStatus], None] | None = None) -> Reproduction:
    """Check the options, prepare ``out``, run every job of ``grid`` and aggregate them (``geodrift sweep``, and
    ``geodrift simulate`` with ``--backend``/``--workers``).

    Args:
        grid: the runs; backend, workers, address, gpus, device, threads, checkpoint_every: as :func:`run_sweep`.
        out: records and checkpoints (None: nothing written); resume: reuse finished runs there, continue
            interrupted ones; force: delete the earlier results in ``out`` (and the figures under ``plot``) first.
        on_stage: start-up messages; on_begin: ``(title, total, "runs")`` once the runs start; on_status: as
            :func:`run_sweep` (the caller ends its display after the return).

    Raises:
        GeodriftError: a bad option value (named as its option), ``resume`` without ``out``, an ``out`` that
            holds a user's files, or every run failed.
    """
    from geodrift.io.outdir import prepare_out

    stage = on_stage or (lambda text: None)
    check_options(backend, workers, threads, gpus)
    if checkpoint_every < 0:
        raise GeodriftError(f"--checkpoint-every: must be >= 0 (0 = none), got {checkpoint_every}")
    if resume and out is None:
        raise GeodriftError("--resume needs --out DIR (where the records and checkpoints are)")
    removed = prepare_out(out, resume=resume, reload=False, force=force, plot=plot)
    if removed:
        stage(f"--force: deleted {len(removed)} earlier result file(s) under {out or plot}")
    jobs = grid.jobs
    stage(f"sweep {grid.name}: {len(jobs)} runs on {backend}"
          + (f" at {address}" if address else f" with {workers} worker(s)") + f", {threads} thread(s) each")
    if on_begin is not None:
        on_begin(f"sweep {grid.name}", len(jobs), "runs")
    outcomes = run_sweep(jobs, backend=backend, workers=workers, address=address,
                         out=str(out) if out is not None else None, device=device, threads=threads, gpus=gpus,
                         checkpoint_every=checkpoint_every, on_status=on_status)
    return sweep_reproduction(grid, outcomes)


def _job_out(out: str | None, job: Job) -> str | None:
    if out is None or not job.folder:
        return out
    return str(Path(out) / job.folder)


def check_options(backend: str, workers: int, threads: int, gpus: float) -> None:
    """Refuse bad sweep options before any work starts.

    Raises:
        GeodriftError: unknown backend, non-positive workers/threads, negative gpus.
    """
    if backend not in BACKENDS:
        raise GeodriftError(f"--backend {backend!r}: use local or ray")
    if workers < 1:
        raise GeodriftError(f"--workers: must be >= 1, got {workers}")
    if threads < 1:
        raise GeodriftError(f"--threads: must be >= 1 for a sweep (torch threads per run), got {threads}")
    if gpus < 0:
        raise GeodriftError(f"--gpus-per-run: must be >= 0, got {gpus}")


def _run_local(jobs: list[Job], args: list[tuple[Any, ...]], workers: int,
               on_status: Callable[[SweepStatus], None] | None) -> list[Outcome]:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    outcomes: dict[int, Outcome] = {}
    tally = Tally(len(jobs), on_status)
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=exit_with_parent)
    try:
        pending = {pool.submit(execute, *a): i for i, a in enumerate(args)}
        while pending:
            tally.running = min(len(pending), workers)
            tally.emit(None)
            finished, _ = wait(pending, timeout=2.0, return_when=FIRST_COMPLETED)
            for future in finished:
                i = pending.pop(future)
                try:
                    result, error, seconds = future.result()
                except Exception as crash:  # the worker process died (killed, out of memory)
                    result, error, seconds = None, f"worker process failed: {type(crash).__name__}: {crash}", 0.0
                outcomes[i] = Outcome(jobs[i], result, error, seconds)
                tally.finish(outcomes[i], min(len(pending), workers))
    except BaseException:
        # Interrupted (Ctrl-C, a signal turned into an exception): do not wait for the running runs; their
        # checkpoints let --resume continue them, and exit_with_parent ends the workers once we are gone.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [outcomes[i] for i in range(len(jobs))]


def sweep_reproduction(grid: Grid, outcomes: list[Outcome]) -> Reproduction:
    """Aggregate a sweep's outcomes with ``geodrift.sim.reproduce.assemble`` (the tables and verdicts of
    ``geodrift simulate``); failed runs are listed in the notes.

    Raises:
        GeodriftError: when every run failed (the first errors are quoted).
    """
    results = [o.result for o in outcomes if isinstance(o.result, RunResult)]
    failed = [o for o in outcomes if o.error is not None]
    if not results:
        errors = "; ".join(f"{o.job.key}: {o.error}" for o in failed[:3])
        raise GeodriftError(f"sweep {grid.name}: every run failed ({errors})")
    specs = [s for s in grid.specs if any(r.record.label == s.label for r in results)]
    rep = assemble(grid.sim, grid.name, specs, results, grid.seeds)
    if failed:
        rep.notes.append(f"{len(failed)} failed run(s): " + "; ".join(f"{o.job.key}: {o.error}" for o in failed))
    return rep

