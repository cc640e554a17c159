"""Fuzzing the commands (bounded, fixed seed): hostile command lines for inspect, drift, compare, compress and
sweep give exit 0 or one `error:` line - never a traceback, a hang, or a user's file changed.

The harness is tests/_fuzz_commands.py (issue 39's classes: tests/_fuzz_classes.py); benchmarks/fuzz_commands.py
runs it on >= 5,000 cases and reports the counts (benchmarks/RESULTS_fuzz.md).
"""

from __future__ import annotations

from pathlib import Path

from _fuzz_commands import build_area, run_cases

CASES = 60  # a few tens of seconds on the shared 2-core machine; benchmarks/fuzz_commands.py runs thousands
CASE_TIMEOUT_S = 60
FINDINGS = ("traceback:", "exit:", "multiline-error", "nonfinite-success", "collision-accepted", "readback-failed",
            "user-file-changed", "hang")


def test_hostile_command_lines_give_exit_0_or_one_error_line_and_change_no_user_file(tmp_path: Path) -> None:
    area = build_area(tmp_path / "area")
    lookalikes = set(tmp_path.rglob("*.tmp"))  # the user's files named like temporary files (tests/_fuzz_classes.py)
    (tmp_path / "scratch").mkdir()
    outcomes, changed, _ = run_cases(area, CASES, seed=23, scratch=tmp_path / "scratch", timeout_s=CASE_TIMEOUT_S)
    found = {k: n for k, n in outcomes.counts.items() if k.startswith(FINDINGS)}
    assert not found and changed == 0, (found, outcomes.findings[:5])
    assert outcomes.counts["error"] > 0 and outcomes.counts["ok"] > 0, dict(outcomes.counts)
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp") and p not in lookalikes]
