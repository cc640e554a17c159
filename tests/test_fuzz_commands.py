"""Fuzzing the commands (bounded, fixed seed): hostile command lines for inspect, drift, compare, compress and
sweep give exit 0 or one `error:` line - never a traceback, a hang, or a user's file changed.

The harness is tests/_fuzz_commands.py; benchmarks/fuzz_commands.py runs it on >= 5,000 cases and reports
the counts (benchmarks/RESULTS_fuzz.md).
"""

from __future__ import annotations

from pathlib import Path

from _fuzz_commands import build_area, run_cases

CASES = 60  # a few tens of seconds on the shared 2-core machine; benchmarks/fuzz_commands.py runs thousands
CASE_TIMEOUT_S = 60


def test_hostile_command_lines_give_exit_0_or_one_error_line_and_change_no_user_file(tmp_path: Path) -> None:
    area = build_area(tmp_path / "area")
    (tmp_path / "scratch").mkdir()
    outcomes, changed, _ = run_cases(area, CASES, seed=23, scratch=tmp_path / "scratch", timeout_s=CASE_TIMEOUT_S)
    assert not outcomes.findings and changed == 0, (dict(outcomes.counts), outcomes.findings[:5])
    assert outcomes.counts["error"] > 0 and outcomes.counts["ok"] > 0, dict(outcomes.counts)
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
