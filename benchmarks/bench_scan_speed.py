"""Speed of `geodrift scan` on the embedded SmolLM2-135M, side by side in one run.

Measures, each as the median of --repeats runs:
  floor     read + dequantize every projection tensor once through geodrift's reader (nothing else)
  scan      the default scan end to end (top-k SVD, k = 8, every metric, both floors, OV composite)
  topk      the singular-vector stage alone on matrices already in memory (geodrift.linalg.top_k_svd)
  full64    a full-spectrum float64 SVD of every matrix (WeightWatcher's approach), same matrices
and prints the two target ratios: scan / floor (target <= 1.5) and full64 / topk (target >= 10).

Run: python benchmarks/bench_scan_speed.py [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from geodrift.linalg import top_k_svd
from geodrift.scan.scan import load_weights, scan


def _timed(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--k", type=int, default=8)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    def read_all() -> None:
        ws, _ = load_weights(None)
        for key in ws:
            ws[key]

    def scan_all() -> None:
        ws, heads = load_weights(None)
        scan(ws, k=args.k, heads=heads)

    floor = _timed(read_all, args.repeats)
    full_scan = _timed(scan_all, args.repeats)
    ws, _ = load_weights(None)
    matrices = [ws[key] for key in ws]
    topk = _timed(lambda: [top_k_svd(W, args.k) for W in matrices], args.repeats)
    full64 = _timed(lambda: [torch.linalg.svd(W.double(), full_matrices=False) for W in matrices], args.repeats)

    print(f"embedded SmolLM2-135M: {len(matrices)} projection matrices, k = {args.k}, "
          f"torch threads = {torch.get_num_threads()}, repeats = {args.repeats} (median)")
    print(f"floor  (read + dequantize once)      {floor:7.2f} s")
    print(f"scan   (default, end to end)         {full_scan:7.2f} s   scan / floor  = {full_scan / floor:5.2f}  (target <= 1.5)")
    print(f"top-k  SVD stage (in memory)          {topk:7.2f} s")
    print(f"full   float64 SVD (in memory)        {full64:7.2f} s   full / top-k = {full64 / topk:5.1f}  (target >= 10)")


if __name__ == "__main__":
    main()
