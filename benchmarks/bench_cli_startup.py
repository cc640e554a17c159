"""Start-up time of the command line: ``geodrift --help`` and ``--version`` next to ``import typer``, and the
time to refuse a missing file (``geodrift scan nope.gguf``, ``drift``, ``inspect``: checked before torch is imported).

Each command runs as a fresh subprocess of the given venv's python (``python -m geodrift ...``),
interleaved (one round = every command once) for ``--repeat`` rounds after one unmeasured warm-up
round (byte-code caches, page cache); the median wall time of each is reported with its ratio to
``python -c "import typer"`` (the floor any Typer CLI pays). A separate child checks that importing
``geodrift.cli.main`` leaves torch unimported (``--help`` must not pay for torch).

Targets: ``geodrift --help`` under 1 s; a missing file refused (exit 2) in under 1 s.

Usage (writes ``--results``, default ``benchmarks/RESULTS_cli_startup.md``, with the stamp of
``geodrift.io.provenance``; timing: run it under the shared lock)::

    flock /tmp/geodrift-bench.lock python benchmarks/bench_cli_startup.py [--repeat 7] [--python .venv/bin/python]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results

HELP_LIMIT_S = 1.0
REFUSAL_LIMIT_S = 1.0
COMMANDS: dict[str, list[str]] = {
    "import typer": ["-c", "import typer"],
    "geodrift --help": ["-m", "geodrift", "--help"],
    "geodrift --version": ["-m", "geodrift", "--version"],
    "geodrift scan nope.gguf": ["-m", "geodrift", "scan", "nope.gguf"],
    "geodrift drift nope-a nope-b": ["-m", "geodrift", "drift", "nope-a", "nope-b"],
    "geodrift inspect nope.gguf": ["-m", "geodrift", "inspect", "nope.gguf"],
}
# The refusals: exit status 2 (a missing file), each under REFUSAL_LIMIT_S.
REFUSALS = ("geodrift scan nope.gguf", "geodrift drift nope-a nope-b", "geodrift inspect nope.gguf")
_NO_TORCH = ("import sys, geodrift.cli.main; "
             "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'sympy', 'matplotlib') if m in sys.modules))")


def time_once(python: str, args: list[str], expected: int = 0) -> float:
    """Wall seconds of one ``python *args`` child (output discarded); raises if it exits other than ``expected``."""
    start = time.perf_counter()
    done = subprocess.run([python, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, COLUMNS="100"))
    elapsed = time.perf_counter() - start
    if done.returncode != expected:
        raise SystemExit(f"{python} {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="measured rounds (median reported)")
    parser.add_argument("--python", default=sys.executable, help="the venv's python (default: this one)")
    parser.add_argument("--results", type=Path, default=Path("benchmarks/RESULTS_cli_startup.md"))
    args = parser.parse_args()
    check_results_path(args.results)
    load_before, t_start = load_average(), time.perf_counter()
    python = str(Path(args.python))
    times: dict[str, list[float]] = {label: [] for label in COMMANDS}
    for round_ in range(args.repeat + 1):
        for label, cmd in COMMANDS.items():
            elapsed = time_once(python, cmd, 2 if label in REFUSALS else 0)
            if round_:  # round 0 warms the caches
                times[label].append(elapsed)
    floor = statistics.median(times["import typer"])
    lines = [f"{args.repeat} rounds (+1 warm-up), median wall time of a fresh process of `{python}`.", "",
             "| command | median (s) | min (s) | max (s) | / import typer |", "|---|---|---|---|---|"]
    for label, values in times.items():
        med = statistics.median(values)
        lines.append(f"| `{label}` | {med:.3f} | {min(values):.3f} | {max(values):.3f} | {med / floor:.2f}x |")
    help_s = statistics.median(times["geodrift --help"])
    heavy = subprocess.run([python, "-c", _NO_TORCH], capture_output=True, text=True, check=True).stdout.strip()
    refusal_s = max(statistics.median(times[label]) for label in REFUSALS)
    lines += ["", f"`geodrift --help`: {help_s:.3f} s, {'under' if help_s < HELP_LIMIT_S else 'OVER'} the "
              f"target of {HELP_LIMIT_S:.0f} s.", f"A missing file refused (exit 2) in at most {refusal_s:.3f} s "
              f"(median of the slowest of the three), {'under' if refusal_s < REFUSAL_LIMIT_S else 'OVER'} the target "
              f"of {REFUSAL_LIMIT_S:.0f} s.", f"Heavy modules loaded by `import geodrift.cli.main`: {heavy}; "
              f"torch {'not ' if 'torch' not in heavy else ''}imported."]
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t_start})
    print(f"wrote {write_results(args.results, 'CLI start-up time', chr(10).join(lines), s)}")
    if "torch" in heavy or help_s >= HELP_LIMIT_S or refusal_s >= REFUSAL_LIMIT_S:
        sys.exit(1)


if __name__ == "__main__":
    main()
