"""The streamed schedule: SVDs on worker threads beside the reader give the serial results, bitwise."""

from __future__ import annotations

import threading

import torch

from geodrift.continuity import MeasureSpec, decompose, schedule
from geodrift.continuity.schedule import SVDWorkers, blas_threads
from geodrift.linalg import top_k_svd
from geodrift.weights import WeightSet


def _weights(n_layers: int = 4) -> WeightSet:
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(n_layers):
        tensors[("mlp_up", layer)] = torch.randn(300, 96, generator=g)
        tensors[("attn_q", layer)] = torch.randn(96, 96, generator=g)
    return WeightSet.from_tensors(tensors)


def test_decompose_on_two_workers_equals_one_worker_bitwise(monkeypatch):
    ws, spec = _weights(), MeasureSpec(k=4, svd="topk")
    monkeypatch.setattr(schedule, "SVD_WORKERS", 1)
    serial = decompose(ws, spec)
    monkeypatch.setattr(schedule, "SVD_WORKERS", 2)
    parallel = decompose(ws, spec)
    assert serial.keys() == parallel.keys()
    for key, t in serial.items():
        assert torch.equal(t.U, parallel[key].U) and torch.equal(t.S, parallel[key].S) and t.method == parallel[key].method


def test_large_jobs_wait_for_the_pool_and_run_on_the_callers_thread_with_every_blas_thread():
    ran_on: dict[str, tuple[int, int]] = {}
    W = torch.randn(50, 40, generator=torch.Generator().manual_seed(1))

    def job(name: str):  # type: ignore[no-untyped-def]
        def run():  # type: ignore[no-untyped-def]
            ran_on[name] = (threading.get_ident(), torch.get_num_threads())
            return top_k_svd(W, 2)
        return run

    workers = SVDWorkers(2)
    with blas_threads(1):
        for i in range(5):
            workers.submit(("small", i), job(f"small{i}"), large=False)
        workers.submit(("large", 0), job("large"), large=True)
        assert len(workers.results) == 6  # the large job drained the pool first
    workers.close()
    assert ran_on["large"] == (threading.get_ident(), 2)
    assert all(ran_on[f"small{i}"][1] == 1 for i in range(5))
    assert torch.equal(workers.results[("large", 0)].U, workers.results[("small", 0)].U)
