"""The Ray backend of :func:`geodrift.sweep.runner.run_sweep` (``pip install 'geodrift[sweep]'``).

One Ray task per run, requesting ``num_cpus=threads, num_gpus=gpus``; no retries (a failed run is
reported, not re-run). Without ``address`` a local cluster of ``workers * threads`` CPUs is started
and shut down afterwards; with one, the running cluster is joined and left running.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from geodrift.io.cluster import ray_cluster
from geodrift.sweep.execute import Outcome, SweepStatus, Tally, execute
from geodrift.sweep.grid import Job


def run_on_ray(jobs: list[Job], args: list[tuple[Any, ...]], *, workers: int, address: str | None, threads: int,
               gpus: float, on_status: Callable[[SweepStatus], None] | None) -> list[Outcome]:
    """Submit every job as a Ray task; outcomes in ``jobs`` order.

    Raises:
        GeodriftError: Ray is not installed, or the cluster cannot be reached (see :func:`geodrift.io.cluster.ray_cluster`).
    """
    with ray_cluster(address, num_cpus=workers * threads) as ray:
        task = ray.remote(num_cpus=threads, num_gpus=gpus, max_retries=0)(execute)
        capacity = max(1, int(ray.cluster_resources().get("CPU", workers * threads) // threads))
        pending = {task.remote(*a): i for i, a in enumerate(args)}
        outcomes: dict[int, Outcome] = {}
        tally = Tally(len(jobs), on_status)
        while pending:
            tally.running = min(len(pending), capacity)
            tally.emit(None)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=2.0)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    result, error, seconds = ray.get(ref)
                except Exception as crash:  # ray.exceptions.RayError: the worker died
                    result, error, seconds = None, f"Ray task failed: {type(crash).__name__}: {crash}", 0.0
                outcomes[i] = Outcome(jobs[i], result, error, seconds)
                tally.finish(outcomes[i], min(len(pending), capacity))
        return [outcomes[i] for i in range(len(jobs))]
