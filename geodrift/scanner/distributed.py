"""Scans that outgrow one machine: checkpoints (``drift``, ``compare``) and layer ranges (``scan``) as Ray tasks.

``--backend ray`` sends one task per checkpoint (a training series of a 7B has hundreds), or per range of
layers of one model, to a Ray cluster (``--address``, or a local one); each task opens the checkpoint
itself (so every path must be readable on every node: a shared file system), decomposes its matrices
on the scan's own route, and returns only the top-k triplets (a few MB per 8B checkpoint). The driver
merges them and assembles one report, exactly as the local run does. Every task runs with the local
run's thread layout (``SVD_WORKERS`` and BLAS threads = the driver's CPU count, requested as the task's
CPUs), so the numbers are bitwise those of the local run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geodrift.continuity import schedule
from geodrift.io.cluster import run_tasks


@dataclass(frozen=True)
class RaySource:
    """Where the tasks of a scan on Ray read the model: what :func:`geodrift.scanner.scan.load_weights` was given.

    Attributes:
        model, view, names, roles: as ``load_weights``' arguments (the layers and the view the tasks read come
            from the WeightSet scanned).
        address: an existing Ray cluster (``auto`` or ``HOST:PORT``), or None for a local one.
        chunks: layer ranges (tasks); None = at least 2.
    """

    model: str | Path | None
    view: str | None = None
    names: str | Path | list[Any] | None = None  # a --names path, or its rules (geodrift.scanner.mapping.NameRule)
    roles: list[str] | None = None
    address: str | None = None
    chunks: int | None = None


BACKENDS = ("local", "ray")


def check_backend(backend: str, address: str | None) -> None:
    """Raises GeodriftError (naming the option) for an unknown backend or an address without Ray.

    Example:
        >>> check_backend("ray", "auto")
    """
    from geodrift.errors import GeodriftError

    if backend not in BACKENDS:
        raise GeodriftError(f"--backend {backend!r}: use local or ray")
    if address is not None and backend != "ray":
        raise GeodriftError("--address names a Ray cluster; add --backend ray (or drop --address)")


def task_threads() -> int:
    """The threads (and requested CPUs) of every task: this machine's CPU count, the local run's layout."""
    return os.cpu_count() or 1


def on_ray(task: Callable[..., Any], args: list[tuple[Any, ...]], address: str | None,
           on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """``[task(*a, threads) for a in args]`` as Ray tasks with the local run's thread layout, in ``args`` order.

    ``task`` is a module-level function taking the thread count last; it runs inside :func:`svd_workers`.

    Raises:
        GeodriftError: a task's own error (its message), or the cluster (see :mod:`geodrift.io.cluster`).
    """
    threads = task_threads()
    return run_tasks(task, [(*a, threads) for a in args], address=address, cpus_per_task=threads, on_done=on_done)


def layer_ranges(layers: list[int], chunks: int) -> list[list[int]]:
    """``layers`` (sorted) cut into ``chunks`` contiguous, nearly equal ranges (fewer if there are fewer layers).

    Example:
        >>> layer_ranges([0, 1, 2, 3, 4], 2)
        [[0, 1, 2], [3, 4]]
    """
    ordered = sorted(layers)
    n = max(1, min(chunks, len(ordered)))
    size, extra = divmod(len(ordered), n)
    out, start = [], 0
    for i in range(n):
        stop = start + size + (1 if i < extra else 0)
        out.append(ordered[start:stop])
        start = stop
    return out


@contextmanager
def svd_workers(threads: int) -> Iterator[None]:
    """The local run's SVD thread layout inside a task (Ray sets OMP_NUM_THREADS to the task's CPUs)."""
    saved, schedule.SVD_WORKERS = schedule.SVD_WORKERS, threads
    try:
        yield
    finally:
        schedule.SVD_WORKERS = saved
