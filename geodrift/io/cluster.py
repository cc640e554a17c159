"""A Ray cluster for the jobs that outgrow one machine (``pip install 'geodrift[sweep]'``, or ray).

:func:`ray_cluster` joins the cluster at ``address`` (left running afterwards) or starts a local one
(shut down afterwards); a cluster the caller already started (``ray.init`` in a test) is used as it is.
:func:`run_tasks` maps a module-level function over argument tuples as Ray tasks, without retries, and
returns the results in argument order; a task's user error comes back as one
:class:`geodrift.errors.GeodriftError` line, like a local run's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from geodrift.errors import GeodriftError


@contextmanager
def ray_cluster(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None) -> Iterator[Any]:
    """The ``ray`` module, initialised: joined at ``address``, else a local cluster of ``num_cpus`` CPUs.

    Raises:
        GeodriftError: Ray is not installed, or the cluster cannot be reached (naming ``--address``).
    """
    try:
        import ray
    except ImportError:
        raise GeodriftError("--backend ray: Ray is not installed; pip install 'geodrift[sweep]' (or ray)") from None
    started = not ray.is_initialized()
    if started:
        try:
            if address is None:
                ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            else:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as failure:
            raise GeodriftError(f"--address {address}: cannot reach a Ray cluster ({failure}); start one with "
                                "`ray start --head` or leave --address out for a local cluster") from None
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def run_tasks(fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], *, address: str | None, cpus_per_task: int,
              on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """``[fn(*a) for a in args]`` as Ray tasks of ``cpus_per_task`` CPUs each; results in ``args`` order.

    Args:
        fn: a module-level function (workers import it by name).
        args: one argument tuple per task.
        address: an existing cluster, or None for a local one of ``os.cpu_count()`` CPUs.
        cpus_per_task: CPUs each task requests (a task's threads).
        on_done: called with ``(index, result)`` as each task finishes, in completion order.

    Raises:
        GeodriftError: a task's own error (its message), or a task that crashed.
    """
    local_cpus = max(cpus_per_task, os.cpu_count() or 1)
    with ray_cluster(address, num_cpus=None if address else local_cpus) as ray:
        task = ray.remote(num_cpus=cpus_per_task, max_retries=0)(fn)
        pending = {task.remote(*a): i for i, a in enumerate(args)}
        results: dict[int, Any] = {}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except Exception as failure:  # ray.exceptions.RayTaskError: wraps the task's exception as .cause
                    cause = getattr(failure, "cause", None) or failure
                    if isinstance(cause, GeodriftError):
                        raise GeodriftError(str(cause)) from None
                    raise GeodriftError(f"Ray task {i + 1} of {len(args)} failed: {type(cause).__name__}: "
                                        f"{str(cause).splitlines()[0] if str(cause) else ''}") from None
                if on_done is not None:
                    on_done(i, results[i])
        return [results[i] for i in range(len(args))]
