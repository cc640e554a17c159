"""Sweep throughput: the same grid of independent MLP runs on 1, 2 and 4 local workers (and Ray).

The grid: ``--runs`` runs of a reduced toy MLP (D 64, 8 layers, ``--steps`` steps, tracked as in the
presets), two configurations (Res+ReLU, Res+None) x seeds, one torch thread per run, nothing written.
Each backend/worker count runs the whole grid once, side by side in one process, in the order given;
reported: wall time, runs per minute, and the speed-up over 1 worker. Every backend's per-run
summaries must be identical (checked; a mismatch aborts). Run it under the shared lock; it writes
its results file (``--write-results``, default ``benchmarks/RESULTS_sweep.md``) with the stamp of
``geodrift.io.provenance``::

    flock /tmp/geodrift-bench.lock python benchmarks/bench_sweep.py

Target (issue 12): report 1, 2, 4 workers; the machine has 2 cores, so 4 workers oversubscribe it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.sweep.grid import grid_from_dict
from geodrift.sweep.runner import run_sweep


def grid(runs: int, steps: int):  # noqa: ANN201 - a Grid
    seeds = list(range(1, runs // 2 + 1))
    model = {"d_model": 64, "n_layers": 8}
    return grid_from_dict({"sim": "mlp", "name": "bench", "seeds": seeds, "configs": [
        {"label": "Res+ReLU", "model": model, "train": {"steps": steps}, "track": {"every": 100}},
        {"label": "Res+None", "model": {**model, "activation": "none"}, "train": {"steps": steps},
         "track": {"every": 100}}]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--settings", default="local:1,local:2,local:4,ray:2",
                        help="comma-separated backend:workers, run in this order")
    parser.add_argument("--write-results", type=Path, default=Path("benchmarks/RESULTS_sweep.md"))
    args = parser.parse_args()
    check_results_path(args.write_results)
    load_before, t_start = load_average(), time.perf_counter()
    g = grid(args.runs, args.steps)
    lines = [f"Grid: {len(g.jobs)} runs (Res+ReLU, Res+None x {len(g.seeds)} seeds; D 64, 8 layers, {args.steps} "
             "steps, 1 thread each), every setting side by side in this one process.", "",
             "| backend | workers | wall (s) | runs/min | speed-up vs local:1 |", "|---|---|---|---|---|"]
    base, reference = None, None
    for setting in args.settings.split(","):
        backend, workers = setting.split(":")
        t0 = time.perf_counter()
        outcomes = run_sweep(g.jobs, backend=backend, workers=int(workers))
        wall = time.perf_counter() - t0
        failed = [o.error for o in outcomes if o.error]
        if failed:
            raise SystemExit(f"{setting}: {failed[0]}")
        summaries = json.dumps([o.result.record.summary for o in outcomes if o.result])
        reference = reference or summaries
        if summaries != reference:
            raise SystemExit(f"{setting}: per-run summaries differ from the first setting's")
        base = base or wall
        row = f"| {backend} | {workers} | {wall:.1f} | {60 * len(outcomes) / wall:.1f} | {base / wall:.2f}x |"
        print(row, flush=True)
        lines.append(row)
    lines += ["", "Per-run summaries identical across all settings: yes."]
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t_start})
    title = "Sweep throughput: 1, 2 and 4 local workers and Ray"
    print(f"wrote {write_results(args.write_results, title, chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
