"""The stamp of a results file written by these benchmarks: commit, CPU, threads, load, command.

A small local stand-in until the shared ``geodrift.provenance`` helper (issue 19's branch) lands; the
fields are the ones it writes, so porting is a rename.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    """``HEAD`` of the checkout the benchmark runs from, with ``+dirty`` when its code differs."""
    root = Path(__file__).resolve().parent.parent
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""
    rev = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "geodrift", "cli", "proofs", "benchmarks", ":(exclude)*.md")
    return rev + ("+dirty" if dirty else "")


def stamp_lines(load_before: tuple[float, float, float], extra: dict[str, str] | None = None) -> list[str]:
    """Markdown bullet lines: command, commit, CPU, CPUs, torch threads, load before/after, Python."""
    import torch

    after = os.getloadavg()
    lines = [
        f"- command: `{' '.join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])}`",
        f"- commit: {commit()}",
        f"- CPU: {cpu_model()}, {os.cpu_count()} CPUs; torch {torch.__version__}, {torch.get_num_threads()} threads",
        f"- load average (1/5/15 min) before: {'/'.join(f'{x:.1f}' for x in load_before)}, "
        f"after: {'/'.join(f'{x:.1f}' for x in after)}",
        f"- Python {platform.python_version()}",
    ]
    lines += [f"- {k}: {v}" for k, v in (extra or {}).items()]
    return lines
