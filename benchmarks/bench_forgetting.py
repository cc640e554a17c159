"""Does a weights-only indicator predict forgetting during fine-tuning? The grid, its analysis, a stamped results file.

Runs the forgetting grid (:func:`geodrift.finetune.grid.grid_specs`, preset ``full`` by default: the embedded
SmolLM2-135M fully fine-tuned on four shifted domains and the in-domain control at two learning rates) through
``geodrift.sweep`` (a local process pool, or Ray with ``--backend ray``), then the analysis
(:mod:`geodrift.finetune.analysis`): each indicator's pooled Spearman with measured forgetting (bootstrap
interval), the control's signs, per-layer Spearman against single-layer reverts, and the forgetting-aware merge.
Finished runs under ``--out`` are skipped, so an interrupted grid resumes where it stopped.

Usage (try ``--preset toy`` first):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_forgetting.py --out runs/forgetting --workers 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from geodrift.jobs.finetune import ForgettingRequest, run_forgetting_runs


class _Print:
    """Progress on stderr, one line per event (a benchmark log, not a display)."""

    def stage(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    def begin(self, title: str, total: int, unit: str) -> None:
        self.stage(f"{title}: {total} {unit}")

    def advance(self, done: int, total: int | None = None, description: str | None = None) -> None:
        pass

    def training(self, status: Any) -> None:
        pass

    def sweep(self, status: Any) -> None:
        if status.latest is not None:
            o = status.latest
            self.stage(f"run {o.job.spec.label}: {'done' if o.error is None else 'FAILED ' + o.error} "
                       f"({o.seconds:.0f} s); {status.done} done, {status.failed} failed of {status.total}")

    def end(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="full", choices=["full", "toy"])
    parser.add_argument("--out", type=Path, default=Path("runs/forgetting"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="local", choices=["local", "ray"])
    parser.add_argument("--model", default=None, help="A checkpoint path (default: the embedded SmolLM2-135M).")
    args = parser.parse_args()
    events = _Print()
    t0 = time.perf_counter()
    records = run_forgetting_runs(ForgettingRequest(out=args.out, preset=args.preset, model=args.model,
                                                    backend=args.backend, workers=args.workers, resume=True), events)
    events.stage(f"{len(records)} runs in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
