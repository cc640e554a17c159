"""Wall time of the default ``geodrift compress prune`` and ``compress share`` runs on the embedded SmolLM2.

Targets (issue 9, 2 CPU cores): the default prune experiment (5 rankings + random, N = 10, greedy
included) in at most 15 minutes, and share (all policies, one group size, 4 ratios, plus each
projection alone) in at most 15. Each command runs as a fresh child process with its JSON, CSV and
figure written to ``--out``; the cost of each ranking relative to one held-out perplexity evaluation
is read from the JSON (the command measures it in the same run). ``uptime`` is recorded before and
after each run, since the machine is shared, and so is the child's CPU time (user + system): with
one torch thread it is what the wall time would be on an idle core.

It writes ``--results`` (default benchmarks/RESULTS_compress.md) with the stamp of ``geodrift.provenance``:
each run's timing, then the commands' tables (``compress_tables.py``).

Usage (timings under the shared lock)::

    flock /tmp/geodrift-bench.lock .venv/bin/python benchmarks/bench_compress.py [--only prune|share] [--out runs/compress]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from compress_tables import prune_tables, share_tables

from geodrift.provenance import check_results_path, command_line, load_average, stamp, write_results

LIMIT_S = 15 * 60


def _load() -> str:
    return " / ".join(f"{v:.2f}" for v in load_average())


def run(kind: str, out: Path, extra: list[str]) -> dict[str, object]:
    """Run ``geodrift compress KIND`` with its outputs in ``out``; return wall time, load and the JSON."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "geodrift", "compress", kind, "--json-out", str(out / f"{kind}.json"),
           "--csv", str(out / f"{kind}.csv"), "--plot", str(out / f"{kind}.png"), *extra]
    before = _load()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(out / f"{kind}.txt", "w", encoding="utf-8") as log:
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}); see {out / (kind + '.txt')}")
    payload = json.loads((out / f"{kind}.json").read_text(encoding="utf-8"))
    return {"command": " ".join(["geodrift", "compress", kind, *extra]), "wall_s": wall, "cpu_s": cpu,
            "load_before": before, "load_after": _load(), "seconds": payload["seconds"],
            "eval_seconds": payload["eval_seconds"], "payload": payload}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("prune", "share"))
    parser.add_argument("--out", type=Path, default=Path("runs/compress"))
    parser.add_argument("--results", type=Path, default=Path("benchmarks/RESULTS_compress.md"))
    args = parser.parse_args()
    check_results_path(args.results)
    load_before, t_start, lines = load_average(), time.perf_counter(), []
    wall: dict[str, float] = {}
    for kind in ("prune", "share"):
        if args.only and kind != args.only:
            continue
        r = run(kind, args.out, [])
        wall[kind] = r["wall_s"]  # type: ignore[assignment]
        lines += [f"## {kind}: `{r['command']}`", "",
                  f"- wall {r['wall_s']:.0f} s (target ≤ {LIMIT_S} s: {'met' if r['wall_s'] <= LIMIT_S else 'MISSED'})",
                  f"- CPU time of the child {r['cpu_s']:.0f} s (1 torch thread: the wall time on an otherwise idle core)",
                  f"- load average before: {r['load_before']}; after: {r['load_after']}",
                  f"- one held-out evaluation of the full model: {r['eval_seconds']:.1f} s", "",
                  prune_tables(r["payload"]) if kind == "prune" else share_tables(r["payload"]), ""]  # type: ignore[arg-type]
        print("\n".join(lines), flush=True)
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t_start, **wall})
    print(f"wrote {write_results(args.results, 'Compression: default prune and share runs', chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
