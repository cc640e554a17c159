"""Fuzzing the readers (bounded, fixed seed): every mutated file gives a report or a one-line GeodriftError.

The harness is tests/_fuzz.py; benchmarks/fuzz_readers.py runs it on >= 5,000 files and reports the
counts (benchmarks/RESULTS_fuzz.md). Plus Hypothesis: any truncation of a valid file is a one-line
GeodriftError.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from _fuzz import Outcomes, mutants, remove_case, run_case, seed_files
from hypothesis import given
from hypothesis import strategies as st
from strategies import examples

from geodrift.errors import GeodriftError
from geodrift.scanner.readers import open_checkpoint, weightset

CASES = 150  # about 9 s on the shared 2-core machine (load 10); benchmarks/fuzz_readers.py runs thousands
CASE_TIMEOUT_S = 20


class _Hang(BaseException):
    pass


def _alarm(signum, frame):  # type: ignore[no-untyped-def]
    raise _Hang()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return seed_files(tmp_path_factory.mktemp("fuzz_seeds"))


def test_the_seed_files_scan_cleanly(seeds: list[Path], tmp_path: Path) -> None:
    for path in seeds:
        assert run_case(path, tmp_path) == ("report", None), path


def test_mutated_files_give_a_report_or_a_one_line_error_and_nothing_else(seeds: list[Path], tmp_path: Path) -> None:
    outcomes = Outcomes()
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for how, path in mutants(seeds, CASES, seed=11, folder=tmp_path / "cases"):
            signal.alarm(CASE_TIMEOUT_S)
            try:
                outcome, finding = run_case(path, tmp_path)
            except _Hang:
                outcome, finding = "hang", f"{path.name} ({how}): no outcome within {CASE_TIMEOUT_S} s"
            finally:
                signal.alarm(0)
            outcomes.add(outcome, None if finding is None else f"{how}: {finding}")
            remove_case(path)
    finally:
        signal.signal(signal.SIGALRM, previous)
    stale = list(tmp_path.glob(".*.tmp"))
    assert not outcomes.findings and not stale, (dict(outcomes.counts), outcomes.findings[:5], stale)
    assert outcomes.counts["error"] > 0 and outcomes.counts["report"] > 0  # both kinds of file were made


@examples(30, deadline=None)
@given(data=st.data())
def test_any_truncation_of_a_valid_file_is_a_one_line_error(seeds: list[Path], tmp_path_factory, data) -> None:
    path = data.draw(st.sampled_from(seeds), label="seed")
    blob = path.read_bytes()
    cut = data.draw(st.integers(0, len(blob) - 1), label="cut")
    folder = tmp_path_factory.mktemp("cut")
    truncated = folder / f"cut{path.suffix}"
    truncated.write_bytes(blob[:cut])
    with pytest.raises(GeodriftError) as info:
        with open_checkpoint(truncated) as ckpt:
            ws = weightset(ckpt)
            for key in ws:
                ws[key]
    assert "\n" not in str(info.value) and str(truncated) in str(info.value)
