"""SIGINT at many delays into a real ``geodrift scan`` writing a set of outputs (issue 39, item 7).

Usage::

    .venv/bin/python benchmarks/interrupt_sweep.py --first 0.05 --step 0.05 --count 80

Each run starts ``python -m geodrift scan --layers 0-5 --null-draws 10 --json-out r.json --csv s.csv --plot f.png
--quiet`` (the embedded SmolLM2) in a fresh folder and sends SIGINT after its delay. Accepted: exit 130 with exactly
``interrupted`` on stderr and nothing written, or exit 0 with the whole set. Anything else - a traceback, another
exit status, a partial set, a temporary file left - is printed with its stderr; the script exits 1 if any.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=float, default=0.05)
    parser.add_argument("--step", type=float, default=0.05)
    parser.add_argument("--count", type=int, default=80)
    args = parser.parse_args()
    bad = interrupted = completed = 0
    with tempfile.TemporaryDirectory(prefix="geodrift-interrupts-") as tmp:
        for i in range(args.count):
            delay = args.first + i * args.step
            out = Path(tmp) / f"run{i}"
            out.mkdir()
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            process = subprocess.Popen([sys.executable, "-m", "geodrift", "scan", "--layers", "0-5", "--null-draws",
                                        "10", "--json-out", str(out / "r.json"), "--csv", str(out / "s.csv"),
                                        "--plot", str(out / "f.png"), "--quiet"], cwd=out, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, env=env)
            time.sleep(delay)
            process.send_signal(signal.SIGINT)
            try:
                _, err = process.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()
                _, err = process.communicate()
                err = "no exit within 300 s (hang)\n" + err
            files = sorted(p.name for p in out.iterdir() if p.name != ".geodrift-written")
            whole = {"r.json", "s.csv", "s.pairs.csv", "f.png"} <= set(files)
            if process.returncode == 130 and err.strip() == "interrupted" and not files:
                interrupted += 1
            elif process.returncode == 0 and not err.strip() and whole and not any(f.endswith(".tmp") for f in files):
                completed += 1
            else:
                bad += 1
                print(f"{delay:.2f} s: exit {process.returncode}, files {files}, stderr {err[-1500:]!r}", flush=True)
    print(f"delays: {args.count} ({args.first:.2f} s to {args.first + (args.count - 1) * args.step:.2f} s); "
          f"interrupted cleanly: {interrupted}; completed whole: {completed}; anything else: {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
