"""The README's test command from a fresh clone: its wall time, CPU time and peak memory (issue 40's budget).

Clones ``--branch`` of ``--repo`` (default: this checkout's branch and repository) into a temporary folder, runs
``bash scripts/setup.sh --test`` there (timed apart), then the README's test command, ``.venv/bin/python -m pytest``,
and writes a stamped results file: the run's wall time, its CPU time, the peak resident memory of its largest
process, and the test that first reached that peak (the line ``tests/conftest.py`` prints). The budget is 10
minutes and 3 GiB on a quiet 2-core machine (docs/testing.md); the stamp records the load before and after.

Usage (writes ``--results``, default benchmarks/RESULTS_test_command.md; about 12 minutes):
    python benchmarks/bench_test_command.py
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results

BUDGET_MIN, BUDGET_GIB = 10, 3


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _timed(cmd: list[str], cwd: Path, log: Path) -> tuple[int, float, float, float]:
    """(exit code, wall s, CPU s, peak RSS GiB of the largest process) of ``cmd`` and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return code, wall, cpu, after.ru_maxrss / 2**20  # ru_maxrss: KiB on Linux, the largest process waited for


def main() -> None:
    here = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", default=str(here), help="the repository to clone (default: this checkout's)")
    parser.add_argument("--branch", default=None, help="the branch to clone (default: this checkout's)")
    parser.add_argument("--results", type=Path, default=Path("benchmarks/RESULTS_test_command.md"))
    parser.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) / "geodrift-test-command.log",
                        help="where the test run's output is kept (the clone is removed)")
    args = parser.parse_args()
    check_results_path(args.results)
    branch = args.branch or _git("rev-parse", "--abbrev-ref", "HEAD", cwd=here)
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="geodrift-fresh-") as tmp:
        clone = Path(tmp) / "geodrift"
        subprocess.run(["git", "clone", "-q", "--branch", branch, args.repo, str(clone)], check=True)
        commit = _git("rev-parse", "HEAD", cwd=clone)
        setup = _timed(["bash", "scripts/setup.sh", "--test"], clone, Path(tmp) / "setup.log")
        if setup[0] != 0:
            sys.exit(f"set-up failed (exit {setup[0]}): {(Path(tmp) / 'setup.log').read_text()[-2000:]}")
        log = Path(tmp) / "pytest.log"
        code, wall, cpu, peak = _timed([".venv/bin/python", "-m", "pytest"], clone, log)
        text = log.read_text()
    args.log.write_text(text)
    summary = next((line.strip("= ") for line in reversed(text.splitlines()) if re.search(r"\d+ passed", line)),
                   "no summary line")
    peak_line = next((line for line in text.splitlines() if line.startswith("peak memory")), "no peak line")
    failures = [line for line in text.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    fits = wall <= BUDGET_MIN * 60 and peak <= BUDGET_GIB
    rows = [
        "| measure | value |",
        "|---|---|",
        f"| set-up (`bash scripts/setup.sh --test`, pip's cache warm) | {setup[1]:.0f} s wall |",
        f"| test command exit code | {code} |",
        f"| pytest's summary | {summary} |",
        f"| wall time | {wall:.0f} s ({wall / 60:.1f} min) |",
        f"| CPU time (user + system, every process) | {cpu:.0f} s |",
        f"| peak resident memory, largest process | {peak:.2f} GiB |",
        f"| the test that first reached the pytest process's peak | {peak_line} |",
        f"| within {BUDGET_MIN} min and {BUDGET_GIB} GiB | {'yes' if fits else 'no'} |",
        *(f"| failed | {line} |" for line in failures),
    ]
    body = (f"The README's test command, `.venv/bin/python -m pytest`, from a fresh clone of `{branch}` at "
            f"`{commit}` with an empty Hypothesis database, after `bash scripts/setup.sh --test`.\n\n" + "\n".join(rows))
    s = stamp(command_line(), load_before=load_before, wall_s={"total": wall + setup[1]}, git=(commit, False))
    print(f"wrote {write_results(args.results, 'The test command from a fresh clone', body, s)}")
    if code != 0:
        sys.exit(f"the test command failed (exit {code})")


if __name__ == "__main__":
    main()
