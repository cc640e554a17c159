"""Where ``compress share``'s time goes at 1 and 2 torch threads, side by side in one process.

Measured on the embedded SmolLM2-135M, each setting alternated (1, 2, 1, 2 threads) and the faster
of its repeats kept:

- ``held-out evaluation``: one dense evaluation, 64 windows of 128 tokens (the default; every one of
  the run's 36 evaluations is a forward of this size or smaller);
- ``greedy candidate``: the forward of 2 calibration windows through every layer and the head (the
  greedy search's 294 candidates are this size, through fewer layers);
- ``eigh 1536``: one float64 eigendecomposition of a 1536 x 1536 moment-sized matrix (the sharing
  evidence's and geodrift's largest units);
- ``NLL head, old layout``: the log-softmax over a strided ``(B, vocab, T)`` axis, as before, against
  the contiguous ``(B T, vocab)`` one now used, on the same final hidden states (1 thread).

Usage (under the shared lock, quiet machine)::

    flock /tmp/geodrift-bench.lock .venv/bin/python benchmarks/bench_share_speed.py [--write-results benchmarks/RESULTS_share_speed.md]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch

from geodrift.compress.evaluate import heldout_nll
from geodrift.compress.model import nll_from_hidden
from geodrift.compress.sources import load_compress_setup


def _best(fn: Callable[[], object], threads: int, repeats: int) -> float:
    torch.set_num_threads(threads)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def parse_known() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-results", type=Path, default=None,
                        help="also write what this prints to this file, after geodrift.io.provenance's stamp")
    parser.add_argument("--repeats", type=int, default=2, help="alternations of 1 and 2 threads")
    return parser.parse_args()


def main() -> None:
    args = parse_known()
    setup, texts = load_compress_setup(None, eval_count=64)
    model, windows, calib = setup.model, setup.evaluation, texts.draws[0][:2]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1536, 1536, dtype=torch.float64, generator=g)
    moment = x @ x.T
    with torch.no_grad():
        hidden = model.run_layers(model.embed(windows[:8, :-1]), range(model.n_layers))

    def old_head() -> torch.Tensor:
        logits = model.logits(hidden).float()
        return torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:8, 1:], reduction="none").mean(1)

    work: dict[str, Callable[[], object]] = {
        "held-out evaluation (64 windows)": lambda: heldout_nll(model, windows),
        "greedy candidate (2 windows, every layer)": lambda: heldout_nll(model, calib),
        "eigh 1536 (float64)": lambda: torch.linalg.eigh(moment),
    }
    seconds: dict[str, dict[int, float]] = {name: {} for name in work}
    for _ in range(args.repeats):
        for threads in (1, 2):
            for name, fn in work.items():
                t = _best(fn, threads, 1)
                seconds[name][threads] = min(seconds[name].get(threads, float("inf")), t)
    head_old = _best(old_head, 1, 3)
    head_new = _best(lambda: nll_from_hidden(model, hidden, windows[:8, 1:]), 1, 3)
    lines = ["| work | 1 thread (s) | 2 threads (s) | 1 / 2 threads |", "|---|---|---|---|"]
    for name, by in seconds.items():
        lines.append(f"| {name} | {by[1]:.2f} | {by[2]:.2f} | {by[1] / by[2]:.2f} |")
    lines += ["", "| NLL from final states, 8 windows, 1 thread | seconds |", "|---|---|",
              f"| log-softmax over the strided (B, vocab, T) axis (before) | {head_old:.3f} |",
              f"| log-softmax over the contiguous (B T, vocab) axis (now) | {head_new:.3f} |",
              f"| ratio | {head_old / head_new:.2f} |"]
    print("\n".join(lines))


if __name__ == "__main__":
    results = parse_known().write_results
    if results is None:
        main()
    else:  # what it prints, after the stamp (command, load before and after, versions, wall time)
        from geodrift.io.provenance import run_recorded

        run_recorded(main, results, "compress share: threads and the NLL head")
