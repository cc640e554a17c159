"""Benchmarks of the toy-MLP simulator, each a side-by-side ratio measured in one process.

1. Tracking overhead: the same Res+ReLU run with tracking off (the compute floor), with the
   table1 tracking set (default interval, no EMAs) and with the full set (EMAs 0.9/0.99/0.999).
2. table1-style floor ratio: all 11 Table 1 configurations, tracked vs untracked, at a small step
   count (tracks at the same interval as the full preset, so the ratio is if anything pessimistic).
3. Batched ensemble vs sequential seeds (tracking off): member-steps per second.

Runs alternate (A, B, A, B, ...) so that load from other processes hits both sides alike.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/bench_sim_mlp.py [--steps 938] [--floor-steps 469]
        [--ens-steps 200] [--members 3] [--repeats 1] [--device cpu]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch

from geodrift.sim.config import (
    PAPER_EPOCH_STEPS,
    ImageData,
    MLPConfig,
    RunSpec,
    TrackConfig,
    TrainConfig,
)
from geodrift.sim.presets import preset
from geodrift.sim.run import run, run_seeds


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2 * PAPER_EPOCH_STEPS)
    parser.add_argument("--floor-steps", type=int, default=PAPER_EPOCH_STEPS)
    parser.add_argument("--ens-steps", type=int, default=200)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip", default="", help="comma list of sections to skip: overhead,table1,ensemble")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {args.device}")

    if "overhead" not in skip:
        base = RunSpec("mlp", "Res+ReLU", MLPConfig(), ImageData(), TrainConfig(steps=args.steps))
        variants = {
            "off (floor)": replace(base, track=TrackConfig(every=0)),
            "table1 set (every 469, no EMA)": replace(base, track=TrackConfig()),
            "full set (every 469, 3 EMAs)": replace(base, track=TrackConfig(ema_betas=(0.9, 0.99, 0.999))),
        }
        walls: dict[str, float] = dict.fromkeys(variants, 0.0)
        tracker_s: dict[str, float] = dict.fromkeys(variants, 0.0)
        for _ in range(args.repeats):
            for name, spec in variants.items():
                recs: list = []
                walls[name] += _timed(lambda spec=spec, recs=recs: recs.extend(run(spec, [42], device=args.device)))
                tracker_s[name] += recs[0].record.timing["track_s"]
        floor = walls["off (floor)"]
        print(f"\n## 1. Tracking overhead ({args.steps} steps, Res+ReLU, seed 42, x{args.repeats})\n")
        print("| tracking | wall s | ratio to floor | tracker's own s |")
        print("|---|---|---|---|")
        for name in variants:
            print(f"| {name} | {walls[name]:.1f} | {walls[name] / floor:.3f} | {tracker_s[name]:.1f} |")

    if "table1" not in skip:
        specs = [replace(s, train=replace(s.train, steps=args.floor_steps)) for s in preset("mlp", "table1")]
        tracked = untracked = 0.0
        for spec in specs:
            untracked += _timed(lambda spec=spec: run(replace(spec, track=TrackConfig(every=0)), [42],
                                                      device=args.device))
            tracked += _timed(lambda spec=spec: run(spec, [42], device=args.device))
        print(f"\n## 2. table1-style: 11 configurations x 1 seed x {args.floor_steps} steps\n")
        print("| | wall s |\n|---|---|")
        print(f"| tracking off (floor) | {untracked:.1f} |\n| table1 tracking | {tracked:.1f} |")
        print(f"| ratio | {tracked / untracked:.3f} |")

    if "ensemble" not in skip:
        seeds = [42 + i for i in range(args.members)]
        spec = RunSpec("mlp", "Res+ReLU", MLPConfig(), ImageData(), TrainConfig(steps=args.ens_steps),
                       TrackConfig(every=0))
        seq = bat = 0.0
        for _ in range(args.repeats):
            seq += _timed(lambda: run_seeds(spec, seeds, batched=False, device=args.device))
            bat += _timed(lambda: run_seeds(spec, seeds, batched=True, device=args.device))
        work = args.members * args.ens_steps * args.repeats
        print(f"\n## 3. Batched ensemble vs sequential ({args.members} seeds x {args.ens_steps} steps, tracking off)\n")
        print("| mode | wall s | member-steps/s |\n|---|---|---|")
        print(f"| sequential | {seq:.1f} | {work / seq:.1f} |\n| batched | {bat:.1f} | {work / bat:.1f} |")
        print(f"| speed-up | {seq / bat:.2f}x | |")


if __name__ == "__main__":
    from geodrift.io.provenance import run_recorded

    run_recorded(main, "benchmarks/RESULTS_sim_mlp.md", "Residual-MLP simulator: tracking overhead, floor ratio, batched seeds")  # what it prints, with the stamp
