"""Which route decomposes a Gram matrix fastest: ARPACK, one LAPACK eigh, or a batch across layers.

The scan's Lanczos route (``geodrift.linalg``) forms the Gram matrix of a matrix's smaller side and
needs its top k = 8 eigenpairs plus a bound of the 9th. Per matrix, with one BLAS thread (the scan's
SVD workers run with one each), this measures on stacks of 30 same-shaped Gram matrices (one role
across the layers of a model):

  arpack        ``_top_eigenpairs`` + ``_next_eigenvalue_bound`` (ARPACK eigsh twice: the route until now)
  eigh          ``torch.linalg.eigh`` of one Gram matrix (every eigenpair; LAPACK releases the GIL)
  eigh batched  ``torch.linalg.eigh`` of the (30, r, r) stack in one call
  syevr k+1     ``scipy.linalg.eigh(subset_by_index=[r-9, r-1], driver="evr")``: the top k + 1 pairs only
                (the tridiagonal reduction, then MRRR for those; ``linalg._gram_subset_eigenpairs``)
  block batched a block Lanczos (block 16, full reorthogonalisation, Rayleigh-Ritz) on the whole stack at once,
                the acceptance rule (``geodrift.krylov.certify``) checked after 4, 6, 8, 10, 12 and 16 blocks
                per matrix, until every matrix is accepted (time includes the certificates)

on the embedded SmolLM2's K (side 192), Q and Up (side 576) Grams, on synthetic 3r x r matrices with
a decaying spectrum (singular values 1 .. 0.1, Gaussian bases) for r = 64 .. 384, and on two 4096 x 4096
matrices of each 8B spectrum (``bench_scan_memory.write_checkpoint``'s ``random`` N(0, 0.02) and
``trained`` spike profile; no block batched there). The eigh route replaces ARPACK where it is faster; the
ratio column says where that is (``geodrift.linalg.EIGH_MAX_SIDE``). For the random spectrum the arpack
column is the route's first try only: its loose gap bound is rejected by the acceptance rule there, and
``linalg`` then asks ARPACK for k + 1 pairs (after block Krylov) or a tight bound, else takes syevr.

Run::

    uptime; flock /tmp/geodrift-bench.lock python benchmarks/bench_routes.py [--write-results benchmarks/RESULTS_routes.md]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from geodrift import linalg
from geodrift.continuity.schedule import single_threaded_blas
from geodrift.krylov import certify, products

K, LAYERS = 8, 30


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _block_lanczos(G: torch.Tensor, k: int, block: int = 16, checks: tuple[int, ...] = (4, 6, 8, 10, 12, 16)
                   ) -> Iterator[tuple[int, torch.Tensor]]:
    # Block Lanczos on a (B, r, r) stack at once; yields (blocks, Ritz vectors (B, r, k+1)) at each check.
    B, r, _ = G.shape
    start = torch.randn(r, block, generator=torch.Generator().manual_seed(0))
    Q = torch.linalg.qr(start).Q.expand(B, r, block).contiguous()
    T = torch.zeros(B, 0, 0, dtype=torch.float64)
    for blocks in range(1, max(checks) + 1):
        if Q.shape[2] + block > r:
            return
        AV = G @ Q[:, :, -block:]
        coeff = Q.mT @ AV
        s = T.shape[1]
        grown = torch.zeros(B, s + block, s + block, dtype=torch.float64)
        grown[:, :s, :s], grown[:, :, s:], grown[:, s:, :s] = T, coeff.double(), coeff[:, :s].double().mT
        T = grown
        if blocks in checks:
            _, Y = torch.linalg.eigh((T + T.mT) / 2)
            X = (Q.double() @ Y[:, :, -(k + 1):].flip(-1)).float()
            yield blocks, X / X.norm(dim=1, keepdim=True)
        residual = AV - Q @ coeff
        residual = residual - Q @ (Q.mT @ residual)
        Q = torch.cat([Q, torch.linalg.qr(residual).Q], 2)


def _block_batched(Ws: list[torch.Tensor], G: torch.Tensor) -> tuple[int, list[int]]:
    accepted: dict[int, int] = {}
    for blocks, X in _block_lanczos(G, K):
        for i, W in enumerate(Ws):
            if i in accepted:
                continue
            side = W if W.shape[0] >= W.shape[1] else W.T
            c = certify(*products(side), X[i])
            if c.accepted and float(c.rho[:K].max()) <= 1e-4 * float(c.S[0]):
                accepted[i] = blocks
        if len(accepted) == len(Ws):
            break
    return len(accepted), sorted(set(accepted.values()))


def _eight_b(m: int, n: int, spectrum: str, g: torch.Generator) -> torch.Tensor:
    # bench_scan_memory.write_checkpoint's matrices, rounded to bf16 as stored.
    from bench_scan_memory import TRAINED_TOP

    W = torch.randn(m, n, generator=g) * 0.02
    if spectrum == "trained":
        edge = 0.02 * (m ** 0.5 + n ** 0.5)
        a = torch.nn.functional.normalize(torch.randn(m, len(TRAINED_TOP), generator=g), dim=0)
        b = torch.nn.functional.normalize(torch.randn(n, len(TRAINED_TOP), generator=g), dim=0)
        W += (a * (edge * torch.tensor(TRAINED_TOP))) @ b.T
    return W.to(torch.bfloat16).float()


def measure(label: str, Ws: list[torch.Tensor], repeats: int, block: bool = True) -> str:
    grams = [linalg._gram(W.numpy()) for W in Ws]
    stack = torch.from_numpy(np.stack(grams))

    def arpack() -> None:
        for g in grams:
            pairs = linalg._top_eigenpairs(g, K, 1e-4)
            assert pairs is not None
            linalg._next_eigenvalue_bound(g, pairs, 1e-4)

    def eigh_each() -> None:
        for g in grams:
            torch.linalg.eigh(torch.from_numpy(g))

    def subset_each() -> None:
        for g in grams:
            linalg._gram_subset_eigenpairs(g, K + 1)

    blocks: list[int] = []
    with single_threaded_blas():
        t_arpack = _best(arpack, repeats) / len(Ws)
        t_eigh = _best(eigh_each, repeats) / len(Ws)
        t_batched = _best(lambda: torch.linalg.eigh(stack), repeats) / len(Ws)
        t_subset = _best(subset_each, repeats) / len(Ws)
        if block:
            start = time.perf_counter()
            accepted, blocks = _block_batched(Ws, stack)
            t_block = (time.perf_counter() - start) / len(Ws)
    cell = (f"{t_block * 1e3:.2f} ({accepted}/{len(Ws)} accepted after {blocks} blocks)" if blocks
            else "n/a (fewer than 5 blocks of 16 fit the side)" if block else "not run")
    return (f"| {label} | {stack.shape[1]} | {t_arpack * 1e3:.2f} | {t_eigh * 1e3:.2f} | {t_batched * 1e3:.2f} | "
            f"{t_subset * 1e3:.2f} | {cell} | {t_arpack / t_eigh:.2f} | {t_arpack / t_subset:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-results", type=Path, default=None)
    args = parser.parse_args()
    from geodrift.scanner.scan import load_weights

    ws, _ = load_weights(None, "raw")
    rows = ["| matrices (30 of each) | Gram side | arpack (ms) | eigh (ms) | eigh batched (ms) | syevr k+1 (ms) | "
            "block batched (ms) | arpack / eigh | arpack / syevr |", "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for role in ("attn_k", "attn_q", "mlp_up"):
        rows.append(measure(f"SmolLM2 {role}", [ws[(role, layer)] for layer in range(LAYERS)], args.repeats))
    g = torch.Generator().manual_seed(0)
    for side in (64, 96, 128, 160, 192, 256, 384):
        decay = torch.logspace(0, -1, side)
        Ws = [(torch.linalg.qr(torch.randn(3 * side, side, generator=g)).Q * decay)
              @ torch.linalg.qr(torch.randn(side, side, generator=g)).Q.T for _ in range(LAYERS)]
        rows.append(measure(f"synthetic {3 * side} x {side}", Ws, args.repeats))
    for spectrum in ("random", "trained"):  # 8B-shaped: 2 matrices, not 30
        Ws = [_eight_b(4096, 4096, spectrum, g) for _ in range(2)]
        rows.append(measure(f"8B-shaped {spectrum} 4096 x 4096 (2 matrices)", Ws, 1, block=False))
    print(f"per matrix, one BLAS thread, best of {args.repeats}; k = {K}; the eigh route is taken up to a side of "
          f"{linalg.EIGH_MAX_SIDE}")
    print("\n".join(rows))


if __name__ == "__main__":
    from _stamp import run_main

    run_main(main, "Decomposition routes of a Gram matrix, per matrix")
