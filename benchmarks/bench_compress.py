"""The ``compress`` runs behind benchmarks/RESULTS_compress.md, each a fresh child process with its outputs in ``--out``.

Runs (``--only`` picks one):

- ``prune``: ``geodrift compress prune`` with its defaults but without the greedy search (20
  random orders for the rank-test verdict; the greedy search costs about 45 evaluations and is not
  part of any verdict).
- ``share``: ``geodrift compress share`` with its defaults (whitened, ratios 20/30/40 %, every method,
  one calibration draw, 64 held-out windows of the pydoc topics; calibration on the stdlib
  docstrings). Its wall time is the time target (at most 15 minutes on 2 cores).
- ``share-draws``: calibration draws 1 and 2 at 20 and 40 % for every baseline, geodrift and its
  random-grouping control (draw 0 is the ``share`` run's), for the verdict over 3 draws.
- ``share-dev``: the development set: the interleaved split's first 8 held-out windows, 24
  calibration windows, 20 % (the set of the independent check quoted in issue 21).

``uptime`` is recorded before and after each run (the machine is shared), and so is the child's CPU
time (user + system): with one torch thread it is what the wall time would be on an idle core (``share`` now
defaults to the usable CPUs, at most 2, so its CPU time exceeds its wall time on a quiet machine).

Usage (timings under the shared lock)::

    flock /tmp/geodrift-bench.lock .venv/bin/python benchmarks/bench_compress.py --only share [--out runs/compress]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from geodrift.compress.table import BASELINE, CANDIDATE, GROUPING_CONTROL, METHODS, RANKINGS, names

LIMIT_S = 15 * 60
FIGURE = Path(__file__).resolve().parent / "figures" / "compress_share.png"
# The extra draws: every baseline, geodrift and its random-grouping control (geodrift.compress.table).
DRAW_METHODS = ",".join([*(n for n, m in METHODS.items() if m.kind == BASELINE), CANDIDATE, GROUPING_CONTROL])
RUNS: dict[str, tuple[str, list[str]]] = {
    "prune": ("prune", ["--methods", ",".join(names(RANKINGS, preset="quick"))]),
    "share": ("share", []),
    "share-draws": ("share", ["--first-draw", "1", "--calib-draws", "2", "--ratios", "0.2,0.4", "--methods",
                              DRAW_METHODS, "--verdict-ratio", "0"]),
    "share-dev": ("share", ["--split", "interleaved", "--eval-windows", "8", "--ratios", "0.2", "--verdict-ratio",
                            "0"]),
}


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run(name: str, out: Path) -> dict[str, object]:
    """Run one of :data:`RUNS` with its JSON, CSV, figure and log in ``out``; return wall time, load and the JSON."""
    kind, extra = RUNS[name]
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "geodrift", "compress", kind, "--json-out", str(out / f"{name}.json"),
           "--csv", str(out / f"{name}.csv"), "--plot", str(out / f"{name}.png"), *extra]
    before = _uptime()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(out / f"{name}.txt", "w", encoding="utf-8") as log:
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}); see {out / (name + '.txt')}")
    payload = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    record = {"name": name, "command": " ".join(["geodrift", "compress", kind, *extra]), "wall_s": wall, "cpu_s": cpu,
              "load_before": before, "load_after": _uptime(), "seconds": payload["seconds"],
              "eval_seconds": payload["eval_seconds"]}
    (out / f"{name}.timing.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if name == "share":  # the README's figure: the default run's --plot
        shutil.copyfile(out / "share.png", FIGURE)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help=f"comma list of {', '.join(RUNS)} (default all)")
    parser.add_argument("--out", type=Path, default=Path("runs/compress"))
    parser.add_argument("--results", type=Path, default=None,
                        help="also write what this prints, and the tables of every run's JSON, to this file with the "
                        "stamp of geodrift.io.provenance")
    args = parser.parse_args()
    for name in args.only.split(",") if args.only else RUNS:
        if name not in RUNS:
            raise SystemExit(f"--only: unknown run {name!r}; choose from {', '.join(RUNS)}")
        r = run(name, args.out)
        print(f"## {name}: `{r['command']}`\n")
        print(f"- wall {r['wall_s']:.0f} s (target <= {LIMIT_S} s for the defaults: "
              f"{'met' if float(r['wall_s']) <= LIMIT_S else 'MISSED'})")  # type: ignore[arg-type]
        print(f"- CPU time of the child {r['cpu_s']:.0f} s (user + system over its torch threads)")
        print(f"- load before: {r['load_before']}\n- load after: {r['load_after']}")
        print(f"- one held-out evaluation of the full model: {r['eval_seconds']:.1f} s")
        for stage, s in r["seconds"].items():  # type: ignore[attr-defined]
            print(f"- {stage}: {s:.1f} s = {s / r['eval_seconds']:.1f} evaluations")  # type: ignore[operator]
        print(flush=True)


def main_with_tables() -> None:
    """:func:`main`, then the tables of every JSON it wrote (``compress_tables.py``)."""
    main()
    import json

    from compress_tables import prune_tables, share_tables

    args = argparse.ArgumentParser(add_help=False)
    args.add_argument("--out", type=Path, default=Path("runs/compress"))
    out = args.parse_known_args()[0].out
    shares = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.glob("share*.json"))
              if not p.name.endswith(".timing.json")]
    if (out / "prune.json").is_file():
        print(prune_tables(json.loads((out / "prune.json").read_text(encoding="utf-8"))))
    if shares:
        print(share_tables(shares))


if __name__ == "__main__":
    results = next((Path(sys.argv[i + 2]) for i, a in enumerate(sys.argv[1:]) if a == "--results" and i + 2 < len(sys.argv)),
                   None)
    if results is None:
        main()
    else:
        from geodrift.io.provenance import run_recorded

        run_recorded(main_with_tables, results, "Compression at the commands' defaults")
