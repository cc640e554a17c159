"""The one progress helper: every long command reports on stderr with its rate and ETA.

- On a terminal: a live bar (done/total, %, rate, elapsed, ETA) with an optional status line
  below it (training: step, loss, the latest continuity and its null); removed when done.
- Elsewhere (a pipe, a notebook's ``!``, CI logs): one plain line every ``every`` seconds once
  the job has run that long, and a last line when it ends - nothing for a quick job.
- ``quiet``: nothing at all. Start-up messages (:func:`announce`, :meth:`JobProgress.note`) follow
  the same rule.

stdout is never touched, so ``--json`` output stays parseable.

Example:
    >>> with JobProgress("scanning", total=3, unit="matrices", quiet=True) as bar:
    ...     bar.update(advance=1, description="attn_q[0]")
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TimeElapsedColumn,
)
from rich.text import Text

from geodrift.render import err_console, lit

if TYPE_CHECKING:
    from geodrift.sim.run import StepStatus
    from geodrift.sweep.execute import SweepStatus

# Seconds between plain progress lines when stderr is not a terminal.
PLAIN_EVERY_S = 10.0
# The rate (and so the ETA) is measured over the last this-many seconds of updates, so that
# start-up work (first-step compilation, data loading) does not distort it.
RATE_WINDOW_S = 30.0
# An ETA is shown only once it is stable: a known total, at least this many units done after the first one
# (which carries the start-up) and at least this share of the total.
ETA_MIN_UNITS = 3
ETA_MIN_SHARE = 0.05


def announce(message: str, *, quiet: bool = False, console: Console | None = None) -> None:
    """Print a start-up message (``… loading the corpus``) on stderr unless ``quiet``."""
    if not quiet:
        (console or err_console).print(lit(f"… {message}", "dim"), highlight=False, soft_wrap=True)


def clock(seconds: float | None) -> str:
    """``h:mm:ss`` (or ``-:--:--`` when unknown).

    Example:
        >>> clock(3725.2)
        '1:02:05'
    """
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-:--:--"
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class _RateColumn(ProgressColumn):
    # Units per second over rich's sliding window (or per unit when slower than one a second).
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        return Text(rate_text(task.speed, self.unit), style="progress.data.speed")


# Plurals whose singular is not the plural less its "s".
_SINGULAR = {"matrices": "matrix", "indices": "index", "vertices": "vertex", "batches": "batch"}


def singular(unit: str) -> str:
    """The singular of a plural unit.

    Example:
        >>> singular("matrices"), singular("steps"), singular("claims")
        ('matrix', 'step', 'claim')
    """
    return _SINGULAR.get(unit, unit[:-1] if unit.endswith("s") else unit)


def rate_text(per_second: float | None, unit: str) -> str:
    """``12.3 steps/s``, or ``4.2 s/step`` for slow jobs (``unit`` plural, :func:`singular` per unit).

    Example:
        >>> rate_text(0.25, "steps"), rate_text(0.125, "matrices")
        ('4.0 s/step', '8.0 s/matrix')
    """
    if not per_second:
        return f"– {unit}/s"
    if per_second >= 1:
        return f"{per_second:.1f} {unit}/s"
    return f"{1 / per_second:.1f} s/{singular(unit)}"


class _CountColumn(ProgressColumn):
    # done/total and the percentage; with no total yet (a spinner), the units done alone.
    def render(self, task: Task) -> Text:
        done = int(task.completed)
        if not task.total:
            return Text(f"{done} {task.fields.get('unit', '')}".rstrip(), style="progress.download")
        return Text(f"{done}/{int(task.total)} {100 * done / task.total:>3.0f}%", style="progress.download")


class _EtaColumn(ProgressColumn):
    # The ETA once it is stable (JobProgress.eta), else nothing: never a guess from the first unit.
    def render(self, task: Task) -> Text:
        eta = task.fields.get("eta")
        return Text("" if eta is None else f"ETA {clock(eta)}", style="progress.remaining")


class _TitleColumn(ProgressColumn):
    # The job's title in bold and what is being worked on, both printed literally (names come from files).
    def __init__(self, title: str) -> None:
        super().__init__()
        self.title = title

    def render(self, task: Task) -> Text:
        return Text.assemble(lit(self.title, "bold"), " ", lit(task.description))


class _BarWithStatus(Progress):
    status: str = ""

    def get_renderables(self) -> list[RenderableType]:  # type: ignore[override]
        out: list[RenderableType] = [self.make_tasks_table(self.tasks)]
        if self.status:
            status = lit(self.status, "dim")
            status.overflow = "fold"
            out.append(status)
        return out


class JobProgress:
    """Progress of one job of ``total`` units (see the module docstring); a context manager.

    Args:
        title: what the job does (``scanning``, ``training``, ``proving``).
        total: units of work; unit: their name, plural (``matrices``, ``steps``, ``claims``).
        quiet: print nothing.
        every: seconds between plain lines when stderr is not a terminal.
        console: where to write (stderr by default).
    """

    def __init__(self, title: str, total: int, unit: str = "steps", *, quiet: bool = False,
                 every: float = PLAIN_EVERY_S, console: Console | None = None) -> None:
        self.title, self.total, self.unit, self.quiet, self.every = title, max(0, total), unit, quiet, every
        self.console = console or err_console
        self.live = not quiet and self.console.is_terminal
        self.completed, self.description, self.status_text = 0, "", ""
        self._start = self._last_line = time.monotonic()
        self._lines = 0
        self._samples: deque[tuple[float, int]] = deque()
        self._first_done = 0  # units done at the first update (the start-up is in it)
        self._bar: _BarWithStatus | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> JobProgress:
        self._start = self._last_line = time.monotonic()
        if self.live:
            self._bar = _BarWithStatus(
                _TitleColumn(self.title), BarColumn(bar_width=24), _CountColumn(), _RateColumn(self.unit),
                TimeElapsedColumn(), _EtaColumn(), console=self.console, transient=True)
            self._bar.__enter__()
            # total None: rich draws a pulsing bar (a spinner), our count shows the units done alone
            self._task = self._bar.add_task("", total=self.total or None, unit=self.unit, eta=None)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is None:  # the job finished: its last line ends at n/n (a stage counted coarsely, or a total never set)
            self.total = max(self.total, self.completed) if self.total > 0 else self.completed
            self.completed = self.total
            if self._bar is not None and self._task is not None:
                self._bar.update(self._task, completed=self.completed, total=self.total or None, eta=None)
        if self._bar is not None:
            self._bar.__exit__(kind, error, trace)
        elif not self.quiet and self._lines and kind is None:
            self.console.print(lit(self._plain_line(final=True)), highlight=False, soft_wrap=True)

    def update(self, completed: int | None = None, advance: int = 0, description: str | None = None,
               total: int | None = None) -> None:
        """Set or advance the units done, and optionally what is being worked on (and the total, once known)."""
        if total is not None:
            self.total = total
        self.completed = completed if completed is not None else self.completed + advance
        now = time.monotonic()
        if not self._samples:
            self._first_done = self.completed
        self._samples.append((now, self.completed))
        while len(self._samples) > 2 and now - self._samples[1][0] > RATE_WINDOW_S:
            self._samples.popleft()
        if description is not None:
            self.description = description
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.completed, description=self.description,
                             total=self.total or None, eta=self.eta())
        elif not self.quiet:
            self._maybe_line()

    def advance(self, label: str) -> None:
        """One unit done, ``label`` being worked on: the ``progress`` callback of a job (``run_scan`` ...)."""
        self.update(advance=1, description=label)

    def set_total(self, total: int) -> None:
        """The units of work, once the job knows them: the ``on_total`` callback of a job."""
        self.update(total=total)

    def status(self, text: str) -> None:
        """Set the status line (training: step, loss, latest continuity); shown under the bar or in each line."""
        self.status_text = text
        if self._bar is not None:
            self._bar.status = text

    def note(self, message: str) -> None:
        """A start-up message while the job runs (e.g. tokenizer training), printed above the bar."""
        announce(message, quiet=self.quiet, console=self.console)

    def _maybe_line(self) -> None:
        now = time.monotonic()
        if now - self._start >= self.every and now - self._last_line >= self.every:
            self._last_line = now
            self._lines += 1
            self.console.print(lit(self._plain_line()), highlight=False, soft_wrap=True)

    def rate(self) -> float | None:
        """Units per second over the last :data:`RATE_WINDOW_S` seconds of updates (None until two updates)."""
        if len(self._samples) < 2:
            return None
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 and c1 >= c0 else None

    def eta(self) -> float | None:
        """Seconds left, once stable (else None): the total is known, at least :data:`ETA_MIN_UNITS` units were
        done after the first update (the first unit carries the start-up) and at least :data:`ETA_MIN_SHARE` of
        the total; at the rate of the last :data:`RATE_WINDOW_S` seconds."""
        if not self.total or not self._samples:
            return None
        since_first = self.completed - self._first_done
        if since_first < ETA_MIN_UNITS or self.completed < ETA_MIN_SHARE * self.total:
            return None
        rate = self.rate()
        return max(0.0, self.total - self.completed) / rate if rate else None

    def _plain_line(self, final: bool = False) -> str:
        elapsed = time.monotonic() - self._start
        rate = self.completed / elapsed if final and elapsed > 0 else self.rate()
        what = f" {self.description}" if self.description else ""
        if final:
            return f"{self.title} done: {self.completed}/{self.total} {self.unit} in {clock(elapsed)} ({rate_text(rate, self.unit)})"
        status = f" · {self.status_text}" if self.status_text else ""
        if not self.total:  # no total yet: the count alone, no percentage and no ETA
            return (f"{self.title}{what}: {self.completed} {self.unit} · {rate_text(rate, self.unit)} · "
                    f"elapsed {clock(elapsed)}{status}")
        eta = self.eta()
        return (f"{self.title}{what}: {self.completed}/{self.total} ({100 * self.completed / self.total:.0f}%) · "
                f"{rate_text(rate, self.unit)} · elapsed {clock(elapsed)}"
                + (f" · ETA {clock(eta)}" if eta is not None else "") + status)


def training_reporter(bar: JobProgress) -> Callable[[StepStatus], None]:
    """An ``on_step`` callback for ``geodrift.sim.reproduce.reproduce`` that drives ``bar`` across all runs.

    The bar counts steps over every run (configuration x seed); its description names the run; its
    status line shows the step, the loss and the latest tracked continuity with its null mean.
    ``float(loss)`` waits for the device, so the status is refreshed at most ~4 times a second.
    """
    state: dict[str, Any] = {"base": 0, "last": 0, "run": ("", ()), "shown": 0.0}

    def on_step(status: StepStatus) -> None:
        run = (status.label, status.seeds)
        if run != state["run"]:
            state["base"] += state["last"]
            state["last"], state["run"] = 0, run
        state["last"] = status.done
        bar.update(completed=state["base"] + status.done,
                   description=f"{status.label} seed {','.join(str(s) for s in status.seeds)}")
        now = time.monotonic()
        if now - state["shown"] >= 0.25 or status.done == status.steps:
            state["shown"] = now
            text = f"step {status.done}/{status.steps} · loss {float(status.loss):.4f}"
            if status.latest is not None:
                latest = status.latest
                text += f" · {latest.label} {latest.value:.3f} (null {latest.null_mean:.3f}) at step {latest.step}"
            bar.status(text)

    return on_step


def sweep_reporter(bar: JobProgress) -> Callable[[Any], None]:
    """An ``on_status`` callback for ``geodrift.sweep.runner.run_sweep`` that drives ``bar`` (unit: runs).

    The bar counts finished runs (done + failed) with the rate and ETA; the status line shows runs
    done, running and failed; each failed run is printed above the bar with its error, once.
    """
    def on_status(status: Any) -> None:  # geodrift.sweep.runner.SweepStatus
        bar.update(completed=status.done + status.failed, total=status.total,
                   description=f"{status.running} running")
        bar.status(f"done {status.done} · running {status.running} · failed {status.failed} of {status.total}")
        latest = status.latest
        if latest is not None and latest.error is not None:
            bar.console.print(Text.assemble(lit("run failed", "red"), " ", lit(f"{latest.job.key}: {latest.error}")),
                              highlight=False, soft_wrap=True)

    return on_status


class ConsoleEvents:
    """The CLI's ``geodrift.jobs.events.Events``: start-up messages and one :class:`JobProgress` at a time on
    stderr; a context manager (a bar still running when the job raises is closed without its n/n line).

    Args:
        quiet: print nothing.
        reserve_stdout: the job's native output goes to stderr (``--json``: stdout holds the document only;
            :func:`geodrift.io.stdio.report_only_stdout`).

    Example:
        >>> with ConsoleEvents(quiet=True) as events:
        ...     events.stage("loading"); events.begin("pruning", 2, "evaluations"); events.advance(2); events.end()
    """

    def __init__(self, *, quiet: bool = False, reserve_stdout: bool = False) -> None:
        from contextlib import ExitStack

        self.quiet, self.reserve_stdout = quiet, reserve_stdout
        self._stack = ExitStack()
        self._bar: JobProgress | None = None
        self._on_step: Callable[[StepStatus], None] | None = None
        self._on_status: Callable[[Any], None] | None = None

    def __enter__(self) -> ConsoleEvents:
        from geodrift.io.stdio import report_only_stdout

        self._stack.enter_context(report_only_stdout(self.reserve_stdout))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        try:
            self._close(kind, error, trace)
        finally:
            self._stack.close()

    def stage(self, text: str) -> None:
        """Above the running bar, or alone."""
        if self._bar is not None:
            self._bar.note(text)
        else:
            announce(text, quiet=self.quiet)

    def begin(self, title: str, total: int, unit: str) -> None:
        """A new bar (the previous one ends)."""
        self.end()
        self._bar = JobProgress(title, total, unit, quiet=self.quiet).__enter__()
        self._on_step, self._on_status = training_reporter(self._bar), sweep_reporter(self._bar)

    def advance(self, done: int, total: int | None = None, description: str | None = None) -> None:
        """Move the bar."""
        if self._bar is not None:
            self._bar.update(completed=done, total=total, description=description)

    def training(self, status: StepStatus) -> None:
        """As :func:`training_reporter`."""
        if self._on_step is not None:
            self._on_step(status)

    def sweep(self, status: SweepStatus) -> None:
        """As :func:`sweep_reporter`."""
        if self._on_status is not None:
            self._on_status(status)

    def end(self) -> None:
        """The bar ends at n/n."""
        self._close(None, None, None)

    def _close(self, kind: type[BaseException] | None, error: BaseException | None,
               trace: TracebackType | None) -> None:
        bar, self._bar, self._on_step, self._on_status = self._bar, None, None, None
        if bar is not None:
            bar.__exit__(kind, error, trace)


class PythonProgress:
    """The Python face's progress (``geodrift.scan(..., progress=True)``): a bar that counts ``unit`` for ``title``.

    tqdm's bar where tqdm is installed (``tqdm.auto``: the notebook widget in Jupyter with ipywidgets, text
    elsewhere; tqdm is not a dependency of geodrift - ``gguf`` brings it - and is only used when present), else
    geodrift's own bar on stderr (:class:`JobProgress`, which rich also draws in a notebook). Either way the ETA
    follows :meth:`JobProgress.eta`'s rule (shown once stable). A context manager; :meth:`advance` and
    :meth:`set_total` are a job's callbacks.

    Example:
        >>> with PythonProgress("scanning", "matrices", use_tqdm=False, quiet=True) as bar:
        ...     bar.set_total(2); bar.advance("attn_q[0]"); bar.advance("attn_q[1]")
    """

    def __init__(self, title: str, unit: str, *, use_tqdm: bool | None = None, quiet: bool = False) -> None:
        self._tqdm: Any = None
        if use_tqdm is not False and not quiet:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:  # no ETA of tqdm's own (it guesses from the first unit): ours, in the postfix
                self._tqdm = tqdm(total=None, desc=title, unit=singular(unit), leave=True,
                                  bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]")
        # geodrift's bar: drawn when tqdm is not, else kept silent for its ETA rule
        self._bar = JobProgress(title, 0, unit, quiet=quiet or self._tqdm is not None)

    def __enter__(self) -> PythonProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
        self._bar.__exit__(kind, error, trace)

    def advance(self, label: str) -> None:
        """One unit done (``label`` being worked on)."""
        self._bar.advance(label)
        if self._tqdm is not None:
            eta = self._bar.eta()
            self._tqdm.set_postfix_str(label + ("" if eta is None else f", ETA {clock(eta)}"), refresh=False)
            self._tqdm.update(1)

    def set_total(self, total: int) -> None:
        """The units of work, once known."""
        self._bar.set_total(total)
        if self._tqdm is not None:
            self._tqdm.total = total
            self._tqdm.refresh()
