"""I/O scheduling for streamed measurements: read-ahead on a second thread, single-threaded BLAS.

Reading (and dequantizing) the next matrix overlaps with the SVD of the current one. Only matrices
up to ``PREFETCH_MAX_NUMEL`` entries are read ahead, so a 14336 x 4096 projection is read alone and
peak memory stays at about one large matrix. The SVDs run with one BLAS thread: on 2 cores,
multi-threaded BLAS on small matrices next to the busy reader thread was 7x slower (thread
oversubscription).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import torch
from threadpoolctl import ThreadpoolController

from geodrift.weights import WeightKey, WeightSet

# Matrices up to this many entries (64 MB in float32) are read ahead on a second thread.
PREFETCH_MAX_NUMEL = 16 * 2**20


@functools.lru_cache(maxsize=1)
def _controller() -> ThreadpoolController:
    # Finding the loaded BLAS libraries takes ~0.1 s; do it once per process.
    return ThreadpoolController()


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit numpy/scipy BLAS and torch to one thread inside the block, then restore both."""
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _controller().limit(limits=1):
            yield
    finally:
        torch.set_num_threads(torch_threads)


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

    def fetch(index: int) -> Future[torch.Tensor] | None:
        if index >= len(keys):
            return None
        shape = ws.entries[keys[index]].shape
        if shape[0] * shape[1] <= PREFETCH_MAX_NUMEL:
            return reader.submit(ws.__getitem__, keys[index])
        return None

    with ThreadPoolExecutor(max_workers=1) as reader, single_threaded_blas():
        pending = fetch(0)
        for index, key in enumerate(keys):
            W = pending.result() if pending is not None else ws[key]
            pending = fetch(index + 1)
            yield key, W
            del W
