"""What every backend runs and reports: one job in a worker (:func:`execute`), its :class:`Outcome`,
and the counts of a sweep's progress (:class:`SweepStatus`, :class:`Tally`)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.sim.config import RunSpec
from geodrift.sim.run import RunResult
from geodrift.sweep.grid import Job


@dataclass
class Outcome:
    """One job's end: its result, or the error that stopped it (one line), and its wall time."""

    job: Job
    result: RunResult | dict[str, Any] | None  # a simulator run's RunResult, or a fine-tuning run's record
    error: str | None
    seconds: float


@dataclass(frozen=True)
class SweepStatus:
    """What the progress display shows: runs done, running, failed, of ``total``; the latest outcome."""

    total: int
    done: int
    running: int
    failed: int
    latest: Outcome | None


def exit_with_parent(poll_s: float = 2.0) -> None:
    """Worker initializer: end this process when the sweep that started it is gone (killed, crashed).

    A pool worker is not told when its parent dies from a signal; without this it would train on,
    orphaned, and keep writing records. A daemon thread compares ``os.getppid()`` every ``poll_s``.
    """
    import os
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def execute(spec: dict[str, Any], seed: int, preset: str, out: str | None, device: str, threads: int,
            checkpoint_every: int) -> tuple[RunResult | dict[str, Any] | None, str | None, float]:
    """One run in a worker process: ``(result, None, seconds)`` or ``(None, error line, seconds)``.

    Args:
        spec: ``RunSpec.to_dict()`` or, for a fine-tuning run, ``FinetuneSpec.to_dict()`` (``kind: finetune``;
            plain data crosses process boundaries cheaply).
        seed, preset, out, device, checkpoint_every: see :func:`geodrift.sim.run.run` (a fine-tuning run takes its
            seed from its spec, resumes by skipping a finished run and has no mid-run checkpoint:
            :func:`geodrift.finetune.run.run_finetune`).
        threads: ``torch.set_num_threads`` for this run.
    """
    import torch

    from geodrift.sim.run import run

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    result: RunResult | dict[str, Any]
    try:
        if spec.get("kind") == "finetune":
            from geodrift.finetune.run import run_finetune
            from geodrift.finetune.spec import FinetuneSpec

            result = run_finetune(FinetuneSpec.from_dict(spec), out, device=device)
        else:
            result = run(RunSpec.from_dict(spec), [seed], out=out, resume=out is not None, device=device,
                         checkpoint_every=checkpoint_every, preset=preset)[0]
    except GeodriftError as error:
        return None, str(error), time.perf_counter() - t0
    except Exception as error:  # a failed run must not kill the sweep: report where it failed
        frame = traceback.extract_tb(error.__traceback__)[-1]
        where = f" ({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"
        return None, f"{type(error).__name__}: {error}{where}", time.perf_counter() - t0
    return result, None, time.perf_counter() - t0


class Tally:
    """Counts of a sweep's runs for :class:`SweepStatus`, shared by the backends."""
    def __init__(self, total: int, on_status: Callable[[SweepStatus], None] | None) -> None:
        self.total, self.done, self.failed, self.running, self.on_status = total, 0, 0, 0, on_status

    def emit(self, latest: Outcome | None) -> None:
        if self.on_status is not None:
            self.on_status(SweepStatus(self.total, self.done, self.running, self.failed, latest))

    def finish(self, outcome: Outcome, running: int) -> None:
        if outcome.error is None:
            self.done += 1
        else:
            self.failed += 1
        self.running = running
        self.emit(outcome)
