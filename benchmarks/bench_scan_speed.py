"""Speed of `geodrift scan` on the embedded SmolLM2-135M, side by side in one run.

Measures, each as the median of --repeats runs:
  floor       read + dequantize every projection tensor once through geodrift's reader (nothing else)
  gguf floor  the same with the `gguf` package's own reader and dequantizer (GGUFReader + dequantize)
  scan        the default scan end to end (top-k SVD, k = 8, every metric, both floors, OV composite)
  topk        the singular-vector stage alone on matrices already in memory, run as the scan runs it
              (geodrift.linalg.top_k_svd inside continuity.schedule.single_threaded_blas)
  full64      a full-spectrum float64 SVD of every matrix (WeightWatcher's approach), same matrices,
              with torch's default threads and with one thread; the faster one is the baseline
and prints the target ratios: scan / floor (target <= 1.5) and full64 / topk (target >= 10).

Run: python benchmarks/bench_scan_speed.py [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from geodrift.continuity import MeasureSpec
from geodrift.continuity.schedule import single_threaded_blas
from geodrift.linalg import top_k_svd
from geodrift.scan.embedded import embedded_model_path
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
        scan(ws, MeasureSpec(k=args.k), heads=heads)

    def read_all_gguf() -> None:
        from gguf import GGUFReader
        from gguf.quants import dequantize

        for tensor in GGUFReader(embedded_model_path()).tensors:
            if tensor.name.startswith("blk.") and len(tensor.shape) == 2:
                dequantize(tensor.data, tensor.tensor_type)

    def topk_stage() -> None:
        with single_threaded_blas():
            for W in matrices:
                top_k_svd(W, args.k)

    def full64_stage() -> None:
        for W in matrices:
            torch.linalg.svd(W.double(), full_matrices=False)

    floor = _timed(read_all, args.repeats)
    gguf_floor = _timed(read_all_gguf, args.repeats)
    full_scan = _timed(scan_all, args.repeats)
    ws, _ = load_weights(None)
    matrices = [ws[key] for key in ws]
    topk = _timed(topk_stage, args.repeats)
    full64_default = _timed(full64_stage, args.repeats)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    full64_single = _timed(full64_stage, args.repeats)
    torch.set_num_threads(threads)
    full64 = min(full64_default, full64_single)

    print(f"embedded SmolLM2-135M: {len(matrices)} projection matrices, k = {args.k}, "
          f"torch threads = {torch.get_num_threads()}, repeats = {args.repeats} (median)")
    print(f"floor       geodrift read + dequantize once    {floor:7.2f} s")
    print(f"gguf floor  gguf package read + dequantize     {gguf_floor:7.2f} s")
    print(f"scan        default scan, end to end           {full_scan:7.2f} s   scan / floor = {full_scan / floor:5.2f}"
          f"  (target <= 1.5);  scan / gguf floor = {full_scan / gguf_floor:5.2f}")
    print(f"top-k       SVD stage, in memory               {topk:7.2f} s")
    print(f"full64      float64 SVD, {threads} threads             {full64_default:7.2f} s")
    print(f"full64      float64 SVD, 1 thread              {full64_single:7.2f} s   full64 (best) / top-k = "
          f"{full64 / topk:5.1f}  (target >= 10)")


if __name__ == "__main__":
    main()
