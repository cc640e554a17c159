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


# Issue 39, item 7: Ctrl-C is clean at any moment - never swallowed by a finalizer, never raised inside an import.
_POLICY = ("import os, signal, sys, time\nfrom geodrift.io import signals\nsignals.install()\ntry:\n{body}\n"
           "except signals.Interrupted as interrupt:\n    signals.finish(interrupt.signum)\n")


def _indented(code: str) -> str:
    return "\n".join("    " + line for line in code.splitlines())


def test_an_interrupt_landing_in_a_finalizer_still_ends_the_process(tmp_path: Path) -> None:
    # It printed "Exception ignored in: <finalize object ...>" with a traceback, and the run carried on.
    body = ("import weakref\n"
            "class Held:\n    pass\n"
            "def callback():\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    deadline = time.monotonic() + 0.3\n"
            "    while time.monotonic() < deadline:\n        pass\n"
            "held = Held()\nweakref.finalize(held, callback)\ndel held\n"
            "time.sleep(5)\nprint('carried on', flush=True)\n")
    script = tmp_path / "finalizer.py"
    script.write_text(_POLICY.format(body=_indented(body)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 130 and result.stderr.strip() == "interrupted", result.stderr[-2000:]
    assert "carried on" not in result.stdout


def test_an_interrupt_during_an_import_waits_for_the_import_to_finish(tmp_path: Path) -> None:
    # Raised inside the import machinery, an interrupt could leave a half-initialised module behind: numpy's lazy
    # attributes then recursed into a RecursionError (exit 1, a traceback). It is delivered once the import is over.
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\n"
        "deadline = time.monotonic() + 0.3\nwhile time.monotonic() < deadline:\n    pass\n"
        "print('module body complete', flush=True)\n")
    script = tmp_path / "importer.py"
    script.write_text(_POLICY.format(body=_indented(f"sys.path.insert(0, {str(tmp_path)!r})\nimport slow_module\n"
                                                    "time.sleep(5)\nprint('carried on', flush=True)\n")))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 130 and result.stderr.strip() == "interrupted", result.stderr[-2000:]
    assert result.stdout == "module body complete\n"


def test_an_interrupt_that_something_swallows_still_ends_the_process(tmp_path: Path) -> None:
    # A library's bare `except:` (or C code clearing errors) swallowing the Interrupted: the watchdog ends the run.
    body = ("signals.WATCHDOG_S = 0.5\n"
            "try:\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(5)\nexcept BaseException:\n    pass\n"
            "time.sleep(10)\nprint('carried on', flush=True)\n")
    script = tmp_path / "swallowed.py"
    script.write_text(_POLICY.format(body=_indented(body)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 130 and result.stderr.strip() == "interrupted", result.stderr[-2000:]
    assert "carried on" not in result.stdout


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3, 0.7, 1.2, 1.7, 2.4, 3.2])
def test_sigint_at_any_moment_of_a_scan_writing_a_set_is_one_line_and_no_partial_set(tmp_path: Path,
                                                                                   delay: float) -> None:
    # Real signals at several delays: start-up, the lazy imports of the scan (numpy, scipy, torch, matplotlib), the
    # work, the figures. Each ends in `interrupted` and exit 130 with none of the set written, or completes whole.
    # The delays count from the moment geodrift's own code runs (-X importtime reports geodrift.io.signals' import on
    # stderr): before it, Python itself is starting, which no Python code can handle (docs/robustness.md).
    names = {"--json-out": "r.json", "--csv": "s.csv", "--plot": "f.png"}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-X", "importtime", *GEODRIFT[1:], "scan", "--layers", "0-4",
                                "--null-draws", "8", "--quiet",
                                *[x for option, name in names.items() for x in (option, str(tmp_path / name))]],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    for line in process.stderr:
        if line.split("|")[-1].strip() == "geodrift.io.signals":
            break
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    code, out, err = _finish(process)
    err = "\n".join(line for line in err.splitlines() if not line.startswith("import time:"))
    written = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]
    if code == 0:  # finished before the signal: the whole set
        assert set(written) >= {"r.json", "s.csv", "s.pairs.csv", "f.png"}, written
    else:
        assert code == 130 and err.strip() == "interrupted" and written == [], (code, err[-2000:], written)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
