"""The signal policy, with real signals sent to a real `geodrift` subprocess.

SIGINT -> one line ``interrupted``, exit 130; SIGTERM -> ``interrupted (SIGTERM)``, exit 143; from
the first instruction of the entry point on; temporary files of atomic writes removed; a run with
``--out`` says how to resume. Each test waits for a stage it can see (a file, a line on stderr)
rather than guessing a delay where it can.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

GEODRIFT = [sys.executable, "-m", "geodrift"]


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([*GEODRIFT, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the process did not exit after the signal (hang); stderr: {err[-500:]}")
    return process.returncode, out, err


def _wait_for(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    pytest.fail("the stage to interrupt was never reached")


def _last_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize("stage", ["typer", "geodrift.cli.main"])
def test_sigint_during_start_up_prints_one_line_and_exits_130(tmp_path: Path, stage: str) -> None:
    # -X importtime reports each import on stderr as it completes: the signal is sent in the middle of the
    # CLI's start-up, once typer (imported right after the policy is installed) or the command modules are in.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-X", "importtime", *GEODRIFT[1:], "scan", "--layers", "0-3",
                                "--null-draws", "20", "--quiet"], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    for line in process.stderr:
        if line.split("|")[-1].strip() == stage:
            break
    process.send_signal(signal.SIGINT)
    code, out, err = _finish(process)
    assert code == 130, err
    assert "Traceback" not in err and _last_line(err) == "interrupted", err[-2000:]
    assert out == ""


@pytest.mark.parametrize(("signum", "code", "line"), [(signal.SIGINT, 130, "interrupted"),
                                                      (signal.SIGTERM, 143, "interrupted (SIGTERM)")])
def test_signal_during_the_scan_exits_with_the_policy_code_and_writes_nothing(
        tmp_path: Path, signum: int, code: int, line: str) -> None:
    out_file = tmp_path / "scan.json"
    process = _start(["scan", "--null-draws", "20", "--json-out", str(out_file)], tmp_path)
    time.sleep(3.0)  # start-up and the first matrices; the whole scan takes longer
    process.send_signal(signum)
    got, out, err = _finish(process)
    if got == 0:
        pytest.skip("the scan finished before the signal arrived")
    assert got == code, err
    assert _last_line(err) == line and "Traceback" not in err, err
    assert not out_file.exists() and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("signum", [pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGTERM])
def test_interrupted_training_leaves_no_temp_files_and_says_how_to_resume(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "runs"
    process = _start(["simulate", "mlp", "--preset", "smoke", "--steps", "100000", "--track-every", "0",
                      "--checkpoint-every", "1", "--out", str(out), "--quiet"], tmp_path)
    _wait_for(lambda: any(out.rglob("*.pt")) or process.poll() is not None)  # checkpoints are being written
    time.sleep(0.3)
    process.send_signal(signum)
    code, stdout, err = _finish(process)
    assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], err
    line = _last_line(err)
    assert line.startswith("interrupted") and "Traceback" not in err, err
    assert "to continue, run: geodrift simulate mlp" in line and "--resume" in line and str(out) in line
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_native_writes_to_fd_1_are_kept_off_stdout_under_report_only_stdout(tmp_path: Path) -> None:
    # A BLAS/LAPACK library printing a warning writes to file descriptor 1 directly, past sys.stdout.
    code = ("import os, sys\nfrom geodrift.io.stdio import report_only_stdout\n"
            "with report_only_stdout():\n    os.write(1, b'native noise\\n')\n    print('python noise')\n"
            "sys.stdout.write('{\"report\": 1}\\n')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout == '{"report": 1}\n'
    assert "native noise" in result.stderr and "python noise" in result.stderr


def test_atomic_write_interrupted_midway_leaves_no_temp_file(tmp_path: Path) -> None:
    # The writer is killed by SIGTERM while the temporary file exists; the handler removes it.
    script = tmp_path / "writer.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from geodrift.io import signals\nfrom geodrift.io.atomic import atomic_path\n"
        "signals.install()\n"
        "try:\n"
        f"    with atomic_path({str(tmp_path / 'out.bin')!r}) as tmp:\n"
        "        tmp.write_bytes(b'x' * 1000)\n"
        "        print('writing', flush=True)\n"
        "        time.sleep(60)\n"
        "except signals.Interrupted as interrupt:\n"
        "    signals.finish(interrupt.signum)\n")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "writing"
    assert list(tmp_path.glob(".out.bin.*.tmp"))
    process.send_signal(signal.SIGTERM)
    code, _, err = _finish(process)
    assert code == 143 and err.strip() == "interrupted (SIGTERM)"
    assert not list(tmp_path.glob(".out.bin.*.tmp")) and not (tmp_path / "out.bin").exists()


def test_a_signal_during_temp_file_bookkeeping_is_deferred_then_delivered(tmp_path: Path) -> None:
    # The bookkeeping of an atomic write (create + register, unregister + remove) is never cut in half:
    # a SIGTERM sent inside it is held, the block completes, then the interrupt ends the process as usual.
    script = tmp_path / "held.py"
    script.write_text(
        "import os, signal, sys\n"
        "from geodrift.io import atomic, signals\n"
        "signals.install()\n"
        "try:\n"
        "    with atomic._signals_held():\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        print('block completed', flush=True)\n"
        "    print('not reached', flush=True)\n"
        "except signals.Interrupted as interrupt:\n"
        "    signals.finish(interrupt.signum)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 143, result.stderr
    assert result.stdout == "block completed\n"
    assert result.stderr.strip().splitlines()[-1] == "interrupted (SIGTERM)"
