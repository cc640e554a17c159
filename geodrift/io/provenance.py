"""The stamp on every generated results file: which code, which machine, under what load, how long.

A stamp is a plain dict (JSON-ready) taken when the work ends, with the load average read before it
began. ``stamp_markdown`` renders it as the table that opens a generated Markdown file, and
``write_results`` writes such a file atomically, refusing to write over a file geodrift did not
create. The reproduction (``geodrift reproduce``) and every script in ``benchmarks/`` write through
these functions, so every results file says the same things in the same place.

A generated file's first line is :data:`MARKER` plus the command; ``check_results_path`` accepts a
new path or a file that starts with the marker, nothing else. Nothing here imports torch: versions
come from the installed packages' metadata, torch's thread count only when torch is already loaded.

Example:
    >>> before = load_average()
    >>> s = stamp("geodrift prove", load_before=before, wall_s={"proofs": 4.0})
    >>> s["command"], s["wall_s"]
    ('geodrift prove', {'proofs': 4.0})
    >>> stamp_markdown(s).splitlines()[0]
    '<!-- geodrift stamp -->'
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.io.atomic import write_text

# The first line of every results file geodrift writes (and may therefore write over).
MARKER = "<!-- geodrift results file"
# The line that opens the stamp table; a file holding it was generated, not written by hand.
STAMP_MARKER = "<!-- geodrift stamp -->"
# Paths whose changes do not make a checkout "dirty": text and generated results, not code.
NOT_CODE = ("*.md", "docs/results")
# Distributions whose versions every stamp lists ("not installed" where absent).
LIBRARIES = ("geodrift", "torch", "numpy", "scipy", "sympy", "gguf", "safetensors", "tokenizers", "matplotlib",
             "typer", "rich")


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (NaN where the OS does not report them).

    Example:
        >>> len(load_average())
        3
    """
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return (float("nan"),) * 3
    return one, five, fifteen


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    """``{"python": ..., name: version}`` from the installed distributions' metadata (no import).

    Args:
        names: distribution names; an absent one is reported as ``"not installed"``.

    Example:
        >>> library_versions(("no-such-package-here",))["no-such-package-here"]
        'not installed'
    """
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def _git(where: str | Path | None, *args: str) -> str | None:
    # Read-only git in ``where`` (default: the folder geodrift is imported from); None outside a checkout.
    try:
        done = subprocess.run(["git", *args], cwd=where or Path(__file__).resolve().parent, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_revision(where: str | Path | None = None) -> str | None:
    """The checkout's ``HEAD`` commit (read-only ``git rev-parse``), or None outside a git checkout.

    Args:
        where: a folder in the checkout (default: the one geodrift is imported from).

    Example:
        >>> rev = git_revision()
        >>> rev is None or len(rev) == 40
        True
    """
    return _git(where, "rev-parse", "HEAD") or None


def git_dirty(where: str | Path | None = None) -> bool | None:
    """True when the code differs from ``HEAD``: changed files, or new files git does not ignore, other
    than Markdown files and ``docs/results/`` (results and docs, which runs write); None outside a checkout.

    Args:
        where: a folder in the checkout (default: the one geodrift is imported from).

    Example:
        >>> git_dirty() in (True, False, None)
        True
    """
    status = _git(where, "status", "--porcelain", "--", ".", *(f":(exclude){p}" for p in NOT_CODE))
    return None if status is None else bool(status)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`).

    Example:
        >>> isinstance(cpu_model(), str)
        True
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def thread_counts() -> dict[str, int | str | None]:
    """CPUs this process may use, torch's intra-op threads (None when torch is not loaded) and the
    thread variables of the environment.

    Example:
        >>> counts = thread_counts()
        >>> counts["cpus"] >= 1
        True
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    torch = sys.modules.get("torch")
    out: dict[str, int | str | None] = {"cpus": cpus,
                                        "torch": torch.get_num_threads() if torch is not None else None}
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        out[name] = os.environ.get(name)
    return out


def command_line(argv: list[str] | None = None) -> str:
    """This process's command line as a shell line that reruns it (a script's: ``python benchmarks/x.py ...``).

    Example:
        >>> command_line(["benchmarks/bench_sweep.py", "--settings", "local:1,ray:2"])
        'python benchmarks/bench_sweep.py --settings local:1,ray:2'
    """
    return shlex.join(["python", *(sys.argv if argv is None else argv)])


def stamp(command: str, *, load_before: tuple[float, float, float] | None = None,
          wall_s: Mapping[str, float] | None = None, git: tuple[str | None, bool | None] | None = None,
          extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The provenance of a result, taken now (at the end of the work).

    Args:
        command: the exact command that produced the result (printed literally).
        load_before: :func:`load_average` read before the work began (None: not recorded).
        wall_s: seconds per section, in the order to print, e.g. ``{"total": 512.0, "scan": 20.1}``.
        git: ``(commit, dirty)`` read before the work began (default: read now); a run that writes into
            the checkout should read it first, so that its own output does not count as a change.
        extra: more rows for the table (e.g. ``{"workers": "2 x 1 thread"}``), printed as given.

    Returns:
        A JSON-ready dict: ``command``, ``written`` (UTC, ISO 8601), ``git`` (``commit``, ``dirty``),
        ``cpu`` (``model``, ``machine``), ``threads`` (:func:`thread_counts`), ``load_before``,
        ``load_after`` (1/5/15-minute averages or None), ``versions`` (:func:`library_versions`),
        ``wall_s`` and ``extra``.

    Example:
        >>> s = stamp("python benchmarks/bench_x.py", wall_s={"total": 1.5})
        >>> s["wall_s"], s["load_before"]
        ({'total': 1.5}, None)
    """
    commit, dirty = git if git is not None else (git_revision(), git_dirty())
    return {"command": command,
            "written": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git": {"commit": commit, "dirty": dirty},
            "cpu": {"model": cpu_model(), "machine": platform.machine()},
            "threads": thread_counts(),
            "load_before": list(load_before) if load_before is not None else None,
            "load_after": list(load_average()),
            "versions": library_versions(),
            "wall_s": dict(wall_s or {}),
            "extra": dict(extra or {})}


def _load(values: list[float] | None) -> str:
    return "not recorded" if values is None else " / ".join(f"{v:.2f}" for v in values)


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def stamp_markdown(s: Mapping[str, Any]) -> str:
    """The stamp as the Markdown table that opens a generated file (its first line is :data:`STAMP_MARKER`).

    Args:
        s: a :func:`stamp`.

    Example:
        >>> text = stamp_markdown(stamp("geodrift prove", wall_s={"total": 4.25}))
        >>> "| wall time | total 4.2 s |" in text
        True
    """
    git = s["git"]
    state = {True: "dirty: the code differed from this commit", False: "clean", None: "unknown"}[git["dirty"]]
    threads = s["threads"]
    thread_text = f"{threads['cpus']} CPUs usable; torch threads {threads['torch'] or 'not loaded'}" + "".join(
        f"; {k}={threads[k]}" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if threads.get(k) is not None)
    rows = [("command", f"`{s['command']}`"), ("written", f"{s['written']} (UTC)"),
            ("git commit", f"`{git['commit'] or 'not a git checkout'}` ({state})"),
            ("CPU", f"{s['cpu']['model']} ({s['cpu']['machine']})"), ("threads", thread_text),
            ("load average (1/5/15 min)", f"before {_load(s['load_before'])}; after {_load(s['load_after'])}"),
            ("versions", ", ".join(f"{k} {v}" for k, v in s["versions"].items())),
            ("wall time", "; ".join(f"{k} {_seconds(v)}" for k, v in s["wall_s"].items()) or "not recorded"),
            *((str(k), str(v)) for k, v in s.get("extra", {}).items())]
    lines = [STAMP_MARKER, "| provenance | |", "|---|---|"]
    lines += ["| " + k + " | " + str(v).replace("|", "\\|") + " |" for k, v in rows]
    return "\n".join(lines)


def check_results_path(path: str | Path) -> Path:
    """Fail before any work if ``path`` exists and geodrift did not create it (no :data:`MARKER` first line).

    Raises:
        GeodriftError: naming the file and the fix.

    Example:
        >>> check_results_path("no/such/folder/RESULTS.md").name
        'RESULTS.md'
    """
    path = Path(path)
    if path.is_dir():
        raise GeodriftError(f"{path}: is a folder; give a results file name")
    if path.exists():
        try:
            with path.open(encoding="utf-8", errors="replace") as handle:
                first = handle.readline()
        except OSError as error:
            raise GeodriftError(f"{path}: cannot read it ({error.strerror}); check its permissions") from None
        if not first.startswith(MARKER):
            raise GeodriftError(f"{path}: not written by geodrift (its first line is not the results-file marker); "
                                "move it away or choose another path")
    return path


def results_markdown(title: str, body: str, s: Mapping[str, Any]) -> str:
    """A generated results file: the marker line, the title, the stamp table, then ``body``.

    Example:
        >>> text = results_markdown("Sweep throughput", "| a |\\n|---|", stamp("python bench.py"))
        >>> text.splitlines()[0]
        '<!-- geodrift results file: generated by `python bench.py`; re-run it rather than editing this file -->'
    """
    return (f"{MARKER}: generated by `{s['command']}`; re-run it rather than editing this file -->\n"
            f"# {title}\n\n{stamp_markdown(s)}\n\n{body.rstrip()}\n")


def write_results(path: str | Path, title: str, body: str, s: Mapping[str, Any]) -> Path:
    """Atomically write :func:`results_markdown` to ``path`` (see :func:`check_results_path`).

    Args:
        path: the results file (``docs/results/report.md``, ``benchmarks/RESULTS_sweep.md``).
        title: its first heading; body: Markdown after the stamp; s: a :func:`stamp`.

    Returns:
        ``path`` as a Path.

    Raises:
        GeodriftError: ``path`` exists and geodrift did not create it, or cannot be written.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "RESULTS_x.md"
        >>> _ = write_results(target, "X", "body", stamp("python bench_x.py"))
        >>> _ = write_results(target, "X", "again", stamp("python bench_x.py"))  # its own file: rewritten
        >>> target.read_text().rstrip().endswith("again")
        True
    """
    path = check_results_path(path)
    write_text(path, results_markdown(title, body, s))
    return path


class _Tee(io.TextIOBase):
    # Writes to the terminal and keeps a copy.
    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def run_recorded(main: Callable[[], Any], path: str | Path, title: str) -> Path:
    """Run a benchmark's ``main()`` and write what it prints (stdout) to ``path`` as a generated results file.

    For scripts that print their tables: the printed text goes into a fenced block after the stamp
    (command, load before and after, wall time). Nothing is written if ``main`` raises.

    Args:
        main: the script's entry point; path: its results file (see :func:`check_results_path`); title: its heading.

    Returns:
        ``path`` as a Path.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "RESULTS_demo.md"
        >>> _ = run_recorded(lambda: print("| a | 1 |"), target, "Demo")
        | a | 1 |
        >>> target.read_text().splitlines()[-3:]
        ['```text', '| a | 1 |', '```']
    """
    path = check_results_path(path)
    before, start = load_average(), time.perf_counter()
    copy = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, copy)):
        main()
    s = stamp(command_line(), load_before=before, wall_s={"total": time.perf_counter() - start})
    return write_results(path, title, f"```text\n{copy.getvalue().rstrip()}\n```", s)


def report_provenance(call: str, model: Mapping[str, Any] | None) -> dict[str, Any]:
    """The provenance a scan report carries: what made it, when, from which model.

    Args:
        call: the command line (``geodrift scan ...``) or the Python call (``geodrift.scan(...)``).
        model: the model's fingerprint (``geodrift.scanner.fingerprint``), or None.

    Returns:
        ``{"geodrift": version, "call": call, "written": UTC ISO 8601, "model": model}``.

    Example:
        >>> p = report_provenance("geodrift scan", None)
        >>> sorted(p), p["written"].endswith("Z")
        (['call', 'geodrift', 'model', 'written'], True)
    """
    return {"geodrift": library_versions(("geodrift",))["geodrift"], "call": call,
            "written": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "model": dict(model) if model is not None else None}
