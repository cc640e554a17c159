"""The long fuzz run of the readers: >= 5,000 mutated real files through the open-and-scan path.

Usage::

    nice -n 10 .venv/bin/python benchmarks/fuzz_readers.py --cases 6000 --seed 2026 [--results benchmarks/RESULTS_fuzz.md]

It writes ``--results`` (default benchmarks/RESULTS_fuzz.md) with the stamp of ``geodrift.io.provenance``.

The harness (seeds, mutations, the accepted outcomes) is tests/_fuzz.py, the same code the bounded
default test runs. Each case gets a per-case timeout (SIGALRM; a case without an outcome in time
counts as a hang). Reports the count of every outcome, the tracebacks (any exception but a one-line
GeodriftError), the hangs, and the temporary files of atomic writes left behind.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _fuzz import Outcomes, mutants, remove_case, run_case, seed_files  # noqa: E402


class _Hang(BaseException):
    pass


def _alarm(signum, frame):  # type: ignore[no-untyped-def]
    raise _Hang()


def run(cases: int, seed: int, timeout_s: int, batch: int = 500) -> tuple[Outcomes, int, float]:
    """Run ``cases`` mutated files; returns the outcomes, the stale temp files and the wall time."""
    import torch

    torch.set_num_threads(1)
    outcomes = Outcomes()
    stale = 0
    start = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    with tempfile.TemporaryDirectory(prefix="geodrift-fuzz-") as tmp:
        root = Path(tmp)
        seeds = seed_files(root / "seeds")
        out_dir = root / "out"
        out_dir.mkdir()
        for first in range(0, cases, batch):  # files are written a batch at a time
            for how, path in mutants(seeds, min(batch, cases - first), seed + first, root / "cases"):
                signal.alarm(timeout_s)
                try:
                    outcome, finding = run_case(path, out_dir)
                except _Hang:
                    outcome, finding = "hang", f"{path.name} ({how}): no outcome within {timeout_s} s"
                finally:
                    signal.alarm(0)
                outcomes.add(outcome, None if finding is None else f"{how}: {finding}")
                remove_case(path)
            stale += len(list(out_dir.glob(".*.tmp")))
            print(f"{first + min(batch, cases - first)} cases: {dict(outcomes.counts)}", file=sys.stderr, flush=True)
    return outcomes, stale, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--timeout", type=int, default=30, help="per-case timeout, seconds")
    parser.add_argument("--results", type=Path, default=Path("benchmarks/RESULTS_fuzz.md"),
                        help="the Markdown results file")
    args = parser.parse_args()
    check_results_path(args.results)
    load_before = load_average()
    outcomes, stale, wall = run(args.cases, args.seed, args.timeout)
    tracebacks = sum(n for k, n in outcomes.counts.items() if k.startswith("traceback:") or k == "multiline-error")
    lines = [
        f"cases: {args.cases} (seed {args.seed}, per-case timeout {args.timeout} s), wall {wall:.0f} s",
        "outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.counts.items())),
        f"tracebacks (incl. multi-line errors): {tracebacks}; hangs: {outcomes.counts['hang']}; "
        f"stale temp files: {stale}",
    ]
    print("\n".join(lines))
    for finding in outcomes.findings:
        print("FINDING", finding)
    body = "\n".join([*[f"- {line}" for line in lines], *[f"- finding: {f}" for f in outcomes.findings]])
    s = stamp(command_line(), load_before=load_before, wall_s={"total": wall})
    print(f"wrote {write_results(args.results, 'Fuzzing the readers', body, s)}")
    sys.exit(1 if tracebacks or outcomes.counts["hang"] or stale else 0)


if __name__ == "__main__":
    main()
