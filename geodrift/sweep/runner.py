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
(CPU). A run that raises is reported with its error; the others go on. A local worker that dies (killed,
out of memory) fails only the run it was running: the pool is restarted for the rest.
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
    """Run every job on a local process pool. A worker that dies (killed, out of memory) breaks the pool: the
    run it was running is reported failed with one line, and the pool is restarted for the runs still to do."""
    outcomes: dict[int, Outcome] = {}
    tally = Tally(len(jobs), on_status)
    todo = list(range(len(jobs)))
    for _ in range(len(jobs) + 1):  # a restart follows a worker's death, which fails the run it was running
        if not todo:
            break
        todo = _run_pool(todo, jobs, args, workers, tally, outcomes)
    for i in todo:
        outcomes[i] = Outcome(jobs[i], None, "not run: the local process pool kept breaking", 0.0)
    return [outcomes[i] for i in range(len(jobs))]


def _run_pool(todo: list[int], jobs: list[Job], args: list[tuple[Any, ...]], workers: int, tally: Tally,
              outcomes: dict[int, Outcome]) -> list[int]:
    """Run the jobs ``todo`` on a fresh pool, filling ``outcomes``; the jobs to run again when a worker died."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")
    announcements = context.SimpleQueue()  # (job index, worker pid) as each run starts
    size = min(workers, len(todo))
    pool = ProcessPoolExecutor(max_workers=size, mp_context=context, initializer=_start_worker,
                               initargs=(announcements,))
    started: dict[int, int] = {}
    processes: dict[int, Any] = {}  # pid -> multiprocessing Process, to read a dead worker's exit code
    broken: list[int] = []
    try:
        pending: dict[Future[Any], int] = {pool.submit(_announce_and_execute, i, *args[i]): i for i in todo}
        while pending and not broken:
            processes.update({p.pid: p for p in multiprocessing.active_children() if p.pid is not None})
            tally.running = min(len(pending), size)
            tally.emit(None)
            finished, _ = wait(pending, timeout=2.0, return_when=FIRST_COMPLETED)
            for future in finished:
                i = pending.pop(future)
                try:
                    result, error, seconds = future.result()
                except BrokenProcessPool:
                    broken.append(i)
                    continue
                except Exception as crash:  # e.g. a result that could not be sent back
                    result, error, seconds = None, f"worker process failed: {type(crash).__name__}: {crash}", 0.0
                outcomes[i] = Outcome(jobs[i], result, error, seconds)
                tally.finish(outcomes[i], min(len(pending), size))
        if broken:  # every other unfinished future fails with the same BrokenProcessPool at once
            wait(pending)
            for future, i in pending.items():
                if future.exception() is None:
                    result, error, seconds = future.result()
                    outcomes[i] = Outcome(jobs[i], result, error, seconds)
                    tally.finish(outcomes[i], 0)
                else:
                    broken.append(i)
    except BaseException:
        # Interrupted (Ctrl-C, a signal turned into an exception): do not wait for the running runs; their
        # checkpoints let --resume continue them, and exit_with_parent ends the workers once we are gone.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    if not broken:
        return []
    while not announcements.empty():
        i, pid = announcements.get()
        started[i] = pid
    for i, why in _killed_runs([i for i in broken if i in started], started, processes).items():
        outcomes[i] = Outcome(jobs[i], None, f"worker process died while running this run ({why}); "
                                             "the sweep restarted its pool and ran the other runs again", 0.0)
        tally.finish(outcomes[i], 0)
    return sorted(i for i in broken if i not in outcomes)


def _killed_runs(suspects: list[int], started: dict[int, int], processes: dict[int, Any]) -> dict[int, str]:
    """Which of the runs in flight when the pool broke ran in the worker that died, with how it died.

    The pool ends its other workers with SIGTERM once one has died; the dead one shows another exit code
    (SIGKILL from the out-of-memory killer or a user, a crash's signal, an exit status). When no exit code
    singles one out, every run in flight is counted (so that each restart fails at least one run).
    """
    import signal

    died: dict[int, str] = {}
    for i in suspects:
        process = processes.get(started[i])
        code = process.exitcode if process is not None else None
        if code is None or code == -signal.SIGTERM:
            continue
        died[i] = (f"killed by {signal.Signals(-code).name}, e.g. out of memory" if code < 0
                   else f"exit status {code}")
    return died or {i: "the pool broke while it ran; the worker's exit code is unknown" for i in suspects}


_ANNOUNCEMENTS: Any = None


def _start_worker(announcements: Any) -> None:
    """Pool initializer: keep the queue on which each run announces its start, and end with the parent."""
    global _ANNOUNCEMENTS
    _ANNOUNCEMENTS = announcements
    exit_with_parent()


def _announce_and_execute(index: int, *args: Any) -> tuple[RunResult | dict[str, Any] | None, str | None, float]:
    """:func:`execute` in a worker, after telling the sweep which process runs job ``index``."""
    import os

    _ANNOUNCEMENTS.put((index, os.getpid()))
    return execute(*args)


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

