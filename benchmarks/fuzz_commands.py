"""The long fuzz run of the commands: >= 5,000 hostile command lines for scan, inspect, drift, compare, compress
prune|share and sweep, through the real CLI entry, in-process, and hostile calls of the Python face - with issue 39's
classes (tests/_fuzz_classes.py): degenerate and non-finite weights, colliding outputs, user files and folders named
like geodrift's own under --force, numpy/list state dicts, path-like and bytes paths, geodrift.read.

Usage::

    .venv/bin/python benchmarks/fuzz_commands.py --cases 5000 --seed 2323 [--results benchmarks/RESULTS_fuzz.md]

(Its CPU time is ~0.1 s a case; under ``nice`` on a loaded machine it is starved for minutes a batch.)

The harness (the user's area, the case generator, the accepted outcomes) is tests/_fuzz_commands.py,
the same code the bounded default test runs. Each case gets a per-case timeout (SIGALRM: a case without
an outcome in time is a hang); every file of the user's area is hashed before and after each case.
Reports the count of every outcome (per command), the tracebacks (by the deepest geodrift file) and multi-line
errors, the hangs, the cases that changed or deleted a user's file or folder, the temporary files left behind, the
non-finite successes, the colliding outputs accepted and the JSON that did not read back;
``--results`` appends a section that opens with geodrift.io.provenance's stamp (benchmarks/_stamp.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _fuzz_classes import ITEM_3_FILES, is_item_3  # noqa: E402
from _fuzz_commands import build_area, run_cases  # noqa: E402


def _worker(job: tuple[int, int, int, int]) -> tuple[Counter[str], Counter[str], list[str], int, int]:
    # One process: its own user's area, cases [first, first + count) in batches (seed + batch start).
    first, count, seed, timeout = job
    import torch

    torch.set_num_threads(1)
    totals: Counter[str] = Counter()
    by_command: Counter[str] = Counter()
    findings: list[str] = []
    changed = stale = 0
    with tempfile.TemporaryDirectory(prefix="geodrift-fuzz-commands-") as tmp:
        root = Path(tmp)
        area = build_area(root / "area")
        lookalikes = {p for p in root.rglob("*.tmp")}  # the user's files named like temporary files
        scratch = root / "scratch"
        scratch.mkdir()
        for start in range(first, first + count, BATCH):
            size = min(BATCH, first + count - start)
            outcomes, batch_changed, per_command = run_cases(area, size, seed + start, scratch, timeout, first=start)
            totals.update(outcomes.counts)
            by_command.update(per_command)
            findings += outcomes.findings
            changed += batch_changed
            stale += len([p for p in root.rglob("*") if p.name.endswith(".tmp") and p not in lookalikes])
            print(f"cases {start}..{start + size - 1}: {dict(outcomes.counts)}", file=sys.stderr, flush=True)
    return totals, by_command, findings, changed, stale


BATCH = 250


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=2323)
    parser.add_argument("--timeout", type=int, default=120, help="per-case timeout, seconds")
    parser.add_argument("--workers", type=int, default=1, help="processes, each with its own user's area")
    parser.add_argument("--results", type=Path, default=None, help="append a Markdown section here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    start = time.perf_counter()
    share = -(-args.cases // args.workers)
    jobs = [(first, min(share, args.cases - first), args.seed, args.timeout) for first in range(0, args.cases, share)]
    if args.workers == 1:
        parts = [_worker(job) for job in jobs]
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            parts = pool.map(_worker, jobs)
    totals: Counter[str] = Counter()
    by_command: Counter[str] = Counter()
    findings: list[str] = []
    changed = stale = 0
    for part_totals, part_by_command, part_findings, part_changed, part_stale in parts:
        totals.update(part_totals)
        by_command.update(part_by_command)
        findings += part_findings
        changed += part_changed
        stale += part_stale
    wall = time.perf_counter() - start
    bad = sum(n for k, n in totals.items() if k.startswith(("traceback:", "exit:")) or k == "multiline-error")
    collisions, readback = totals["collision-accepted"], totals["readback-failed"]
    item_3 = sum(n for k, n in totals.items() if is_item_3(k))
    nonfinite = totals["nonfinite-success"]
    lines = [
        f"cases: {args.cases} (seed {args.seed}, per-case timeout {args.timeout} s, {args.workers} process(es)), "
        f"wall {wall:.0f} s",
        "outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(totals.items())),
        "per command: " + ", ".join(f"{k} {n}" for k, n in sorted(by_command.items())),
        f"tracebacks (incl. multi-line errors and other exits): {bad}, of which from alignment or the canonical view "
        f"on degenerate weights (issue 39 item 3, {', '.join(ITEM_3_FILES)}): {item_3}; hangs: {totals['hang']}; "
        f"cases that changed or deleted a user's file or folder: {changed}; stale temp files: {stale}; non-finite "
        f"successes: {nonfinite}; colliding outputs accepted: {collisions}; JSON not read back: {readback}",
    ]
    print("\n".join(lines))
    for finding in findings[:50]:
        print("FINDING", finding)
    if args.results is not None:
        from _stamp import stamp_lines

        section = [f"\n## Commands and the Python face: run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
                   *stamp_lines(load_before, {"cases": str(args.cases), "workers": f"{args.workers} x 1 thread",
                                              "wall": f"{wall:.0f} s"}), "",
                   *[f"- {line}" for line in lines]]
        with args.results.open("a", encoding="utf-8") as handle:
            handle.write("\n".join(section) + "\n")
    sys.exit(1 if bad or totals["hang"] or changed or stale or nonfinite or collisions or readback else 0)


if __name__ == "__main__":
    main()
