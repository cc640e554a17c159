"""Start-up time of the command line: ``geodrift --help`` and ``--version`` next to ``import typer``.

Each command runs as a fresh subprocess of the given venv's python (``python -m geodrift ...``),
interleaved (one round = every command once) for ``--repeat`` rounds after one unmeasured warm-up
round (byte-code caches, page cache); the median wall time of each is reported with its ratio to
``python -c "import typer"`` (the floor any Typer CLI pays). A separate child checks that importing
``geodrift.cli.main`` leaves torch unimported (``--help`` must not pay for torch).

Target: ``geodrift --help`` under 1 s.

Usage::

    python benchmarks/bench_cli_startup.py [--repeat 7] [--python .venv/bin/python]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HELP_LIMIT_S = 1.0
COMMANDS: dict[str, list[str]] = {
    "import typer": ["-c", "import typer"],
    "geodrift --help": ["-m", "geodrift", "--help"],
    "geodrift --version": ["-m", "geodrift", "--version"],
}
_NO_TORCH = ("import sys, geodrift.cli.main; "
             "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'sympy', 'matplotlib') if m in sys.modules))")


def time_once(python: str, args: list[str]) -> float:
    """Wall seconds of one ``python *args`` child (output discarded); raises if it fails."""
    start = time.perf_counter()
    done = subprocess.run([python, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, COLUMNS="100"))
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{python} {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="measured rounds (median reported)")
    parser.add_argument("--python", default=sys.executable, help="the venv's python (default: this one)")
    args = parser.parse_args()
    python = str(Path(args.python))
    times: dict[str, list[float]] = {label: [] for label in COMMANDS}
    for round_ in range(args.repeat + 1):
        for label, cmd in COMMANDS.items():
            elapsed = time_once(python, cmd)
            if round_:  # round 0 warms the caches
                times[label].append(elapsed)
    floor = statistics.median(times["import typer"])
    print(f"python: {python}; {args.repeat} rounds (+1 warm-up), median wall time of a fresh process")
    print(f"{'command':<22} {'median (s)':>10} {'min (s)':>8} {'max (s)':>8} {'/ import typer':>15}")
    for label, values in times.items():
        med = statistics.median(values)
        print(f"{label:<22} {med:>10.3f} {min(values):>8.3f} {max(values):>8.3f} {med / floor:>14.2f}x")
    help_s = statistics.median(times["geodrift --help"])
    print(f"geodrift --help {help_s:.3f} s -> {'under' if help_s < HELP_LIMIT_S else 'OVER'} the "
          f"{HELP_LIMIT_S:.0f} s target")
    heavy = subprocess.run([python, "-c", _NO_TORCH], capture_output=True, text=True, check=True).stdout.strip()
    print(f"heavy modules loaded by `import geodrift.cli.main`: {heavy} "
          f"-> torch {'NOT ' if 'torch' not in heavy else ''}imported")
    if "torch" in heavy or help_s >= HELP_LIMIT_S:
        sys.exit(1)


if __name__ == "__main__":
    main()
