"""Cost of the canonical view against the folded view on the embedded SmolLM2-135M (issue 31: target <= 1.3x),
and the first-vector numbers of the three views side by side.

Times ``geodrift.scan(view=...)`` end to end (reading, folding, canonicalising, SVDs, nulls, verdicts),
folded and canonical interleaved ``--repeats`` times (the median of each is compared, so a load
change on a shared machine hits both alike), then tabulates v1/u1 mean |cos| and z with both verdicts
per projection in the raw, folded and canonical views (the canonical view's head/hidden-side spaces
are ``aligned``: not continuity).

Usage (timing: run under the shared lock; writes ``--out``, default benchmarks/RESULTS_canonical.md, with
the stamp of ``geodrift.io.provenance``):
    flock /tmp/geodrift-bench.lock .venv/bin/python benchmarks/bench_canonical.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import geodrift
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results

VIEWS = ("raw", "folded", "canonical")


def _cell(report: geodrift.ScanReport, label: str, space: str) -> str:
    role = next(r for r in report.roles if r.label == label)
    s = role.spaces[space]
    if s.gauge == "aligned":
        return "aligned"
    vc = s.vectors[0]
    return f"{vc.mean:.3f} (z {vc.z:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--null-draws", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_canonical.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    load_before = load_average()
    seconds: dict[str, list[float]] = {"folded": [], "canonical": []}
    cpu: dict[str, list[float]] = {"folded": [], "canonical": []}
    reports: dict[str, geodrift.ScanReport] = {}
    for _ in range(args.repeats):
        for view in ("folded", "canonical"):
            t0, c0 = time.perf_counter(), time.process_time()
            reports[view] = geodrift.scan(view=view, null_draws=args.null_draws)
            seconds[view].append(time.perf_counter() - t0)
            cpu[view].append(time.process_time() - c0)
    reports["raw"] = geodrift.scan(view="raw", null_draws=args.null_draws)
    folded, canonical = statistics.median(seconds["folded"]), statistics.median(seconds["canonical"])
    folded_cpu, canonical_cpu = statistics.median(cpu["folded"]), statistics.median(cpu["canonical"])
    load_after = load_average()
    lines = [f"Embedded SmolLM2-135M (30 layers), 1 torch thread, k = 8, {args.null_draws} null draws; "
             f"{args.repeats} interleaved runs per view, median.", "",
             "| view | wall s (median) | wall runs | × folded (wall) | CPU s (median) | CPU runs | × folded (CPU) |",
             "|---|---|---|---|---|---|---|",
             f"| folded | {folded:.2f} | {', '.join(f'{s:.2f}' for s in seconds['folded'])} | 1.00 | {folded_cpu:.2f} | "
             f"{', '.join(f'{s:.2f}' for s in cpu['folded'])} | 1.00 |",
             f"| canonical | {canonical:.2f} | {', '.join(f'{s:.2f}' for s in seconds['canonical'])} | "
             f"{canonical / folded:.2f} | {canonical_cpu:.2f} | {', '.join(f'{s:.2f}' for s in cpu['canonical'])} | "
             f"{canonical_cpu / folded_cpu:.2f} |", "",
             "Load average before / after: " + " / ".join(" / ".join(f"{x:.2f}" for x in load) if load else "unknown"
                                                       for load in (load_before, load_after))
             + " (1/5/15 min) on 2 cores shared with other jobs: the wall times stretch with the load; the CPU "
             "time (this process, every thread) is the steadier measure of cost.", "",
             "First singular vectors, mean |cos| of adjacent layers (z against the permutation null), and the "
             "frame / path verdicts, in each view:", "",
             "| projection | " + " | ".join(f"{v} v1 | {v} u1 | {v} verdicts" for v in VIEWS) + " |",
             "|---|" + "---|---|---|" * len(VIEWS)]
    for role in reports["raw"].roles:
        cells = []
        for view in VIEWS:
            r = next(x for x in reports[view].roles if x.role == role.role)
            cells += [_cell(reports[view], role.label, "v"), _cell(reports[view], role.label, "u"),
                      f"{r.verdict} / {r.path_verdict}"]
        lines.append(f"| {role.label} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t_start})
    print(f"wrote {write_results(args.out, 'The canonical view: cost against the folded view, numbers in three views', chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
