"""Scheduling for streamed measurements: read-ahead on a second thread, SVDs on every core.

Reading (and dequantizing) the next matrix overlaps with the SVDs of the previous ones. Only matrices
up to ``PREFETCH_MAX_NUMEL`` entries are read ahead, so a 14336 x 4096 projection is read alone and
peak memory stays at about one large matrix; for a large one the reader thread only warms its stored
bytes into the page cache (``WeightEntry.warm``), so that a cold read from the disk overlaps with the
previous matrix's decomposition without a second resident copy. Small matrices' SVDs run on a pool of
``os.cpu_count()`` worker threads (:class:`SVDWorkers`; ARPACK and LAPACK release the GIL and give
bitwise the same results on any thread), each with one BLAS thread: on 2 cores, multi-threaded BLAS
on small matrices next to the busy reader thread was 7x slower (thread oversubscription). A large
matrix waits for the pool to drain and then gets every BLAS thread (its Gram product is compute-bound).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import torch
from threadpoolctl import ThreadpoolController

from geodrift.linalg import SVDTriplets
from geodrift.weights import WeightKey, WeightSet

# Matrices up to this many entries (64 MB in float32) are read ahead on a second thread.
PREFETCH_MAX_NUMEL = 16 * 2**20
# SVD worker threads of a streamed measurement; None = os.cpu_count() (benchmarks set 1 to compare).
SVD_WORKERS: int | None = None


@functools.lru_cache(maxsize=1)
def _controller() -> ThreadpoolController:
    # Finding the loaded BLAS libraries takes ~0.1 s; do it once per process.
    return ThreadpoolController()


@contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Limit numpy/scipy BLAS and torch to ``n`` threads inside the block, then restore both."""
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with _controller().limit(limits=n):
            yield
    finally:
        torch.set_num_threads(torch_threads)


def single_threaded_blas() -> contextlib.AbstractContextManager[None]:
    """Limit numpy/scipy BLAS and torch to one thread inside the block, then restore both."""
    return blas_threads(1)


class SVDWorkers:
    """Runs decompositions beside the reader: small ones on a thread pool, large ones on every core.

    Use inside :func:`read_ahead`'s loop (which holds the one-thread BLAS limit). At most
    ``2 * workers`` small jobs are in flight, so resident matrices stay bounded.

    Args:
        workers: pool threads (default :data:`SVD_WORKERS`, else ``os.cpu_count()``; at least 1).
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers or SVD_WORKERS or os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(max_workers=self.workers) if self.workers > 1 else None
        self._pending: deque[tuple[WeightKey, Future[SVDTriplets]]] = deque()
        self.results: dict[WeightKey, SVDTriplets] = {}

    def submit(self, name: WeightKey, job: Callable[[], SVDTriplets], large: bool) -> None:
        """Run ``job`` (result stored under ``name``); ``large`` runs it now with every BLAS thread."""
        if large or self._pool is None:
            self.drain()
            with blas_threads(self.workers):
                self.results[name] = job()
            return
        while len(self._pending) >= 2 * self.workers:
            done, future = self._pending.popleft()
            self.results[done] = future.result()
        self._pending.append((name, self._pool.submit(job)))

    def drain(self) -> dict[WeightKey, SVDTriplets]:
        """Wait for every job; returns :attr:`results` (name -> job result)."""
        while self._pending:
            done, future = self._pending.popleft()
            self.results[done] = future.result()
        return self.results

    def close(self) -> None:
        """Wait for every job and stop the pool."""
        self.drain()
        if self._pool is not None:
            self._pool.shutdown()


def read_ahead(ws: WeightSet, keys: Sequence[WeightKey], streamed: bool = True
               ) -> Iterator[tuple[WeightKey, torch.Tensor]]:
    """Yield ``(key, matrix)`` in ``keys`` order, loading the next small matrix while the caller works.

    The caller's work runs with single-threaded BLAS (see the module docstring); each matrix is
    loaded once and is the caller's to drop. ``streamed=False`` (every matrix goes to the batched
    exact SVD after the loop) loads them in turn, without the reader thread or thread limits.
    """
    if not streamed:
        for key in keys:
            yield key, ws[key]
        return

    def fetch(index: int) -> Future[torch.Tensor | None] | None:
        if index >= len(keys):
            return None
        entry = ws.entries[keys[index]]
        if entry.shape[0] * entry.shape[1] <= PREFETCH_MAX_NUMEL:
            return reader.submit(ws.__getitem__, keys[index])
        if entry.warm is not None:  # too large to hold twice: only its bytes into the page cache
            return reader.submit(entry.warm)
        return None

    with ThreadPoolExecutor(max_workers=1) as reader, single_threaded_blas():
        pending = fetch(0)
        for index, key in enumerate(keys):
            W = pending.result() if pending is not None else None
            if W is None:  # a large matrix (warmed, or not) is read here, after the previous one is dropped
                W = ws[key]
            pending = fetch(index + 1)
            yield key, W
            del W
