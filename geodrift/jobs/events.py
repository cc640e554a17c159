"""What a job tells its face while it works: start-up stages, counted work, training steps, sweep runs.

Every job takes one (the one progress protocol of ``geodrift.jobs``). A job never prints: it calls an
:class:`Events` object. The CLI passes ``geodrift.render.progress.ConsoleEvents`` (stderr messages and one
progress bar at a time); the Python face passes :data:`SILENT` by default, a bar with ``progress=True``
(``geodrift.render.progress.PythonEvents``) or :class:`Labels` around a function of one string. The order of calls is: any number of
:meth:`Events.stage`, then for each counted piece of work :meth:`Events.begin`, its updates
(:meth:`Events.advance`, :meth:`Events.training`, :meth:`Events.sweep`) and :meth:`Events.end`.

Example:
    >>> SILENT.begin("pruning", 3, "evaluations"); SILENT.advance(1, description="rank"); SILENT.end()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from geodrift.errors import GeodriftError

if TYPE_CHECKING:
    from geodrift.sim.run import StepStatus
    from geodrift.sweep.execute import SweepStatus


class Events(Protocol):
    """The callbacks of one job (see the module docstring).

    - ``stage(text)``: a start-up message (``loading the corpus``), before or between the counted work;
    - ``begin(title, total, unit)``: a counted piece of work starts (``total`` 0: not known yet);
    - ``advance(done, total=None, description=None)``: ``done`` units of it are finished (the total may change);
    - ``training(status)``: a training step of a simulator run finished (the work counts steps over every run);
    - ``sweep(status)``: a sweep run started or ended (the work counts runs);
    - ``end()``: the counted work finished (its display ends at n/n).
    """

    def stage(self, text: str) -> None: ...

    def begin(self, title: str, total: int, unit: str) -> None: ...

    def advance(self, done: int, total: int | None = None, description: str | None = None) -> None: ...

    def training(self, status: StepStatus) -> None: ...

    def sweep(self, status: SweepStatus) -> None: ...

    def end(self) -> None: ...


class Silent:
    """:class:`Events` that show nothing: the Python face's default."""

    def stage(self, text: str) -> None:
        """Ignored."""

    def begin(self, title: str, total: int, unit: str) -> None:
        """Ignored."""

    def advance(self, done: int, total: int | None = None, description: str | None = None) -> None:
        """Ignored."""

    def training(self, status: StepStatus) -> None:
        """Ignored."""

    def sweep(self, status: SweepStatus) -> None:
        """Ignored."""

    def end(self) -> None:
        """Ignored."""


SILENT: Events = Silent()


class Labels(Silent):
    """:class:`Events` that call ``report(description)`` after each unit (the Python face's ``progress=print``).

    Example:
        >>> seen = []
        >>> events = Labels(seen.append); events.begin("scanning", 2, "matrices"); events.advance(1, description="q[0]")
        >>> seen
        ['q[0]']
    """

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report

    def advance(self, done: int, total: int | None = None, description: str | None = None) -> None:
        """``report(description)``."""
        self.report(description or "")


def counter(events: Events) -> Callable[[str], None]:
    """A per-unit callback (``label -> None``: what the scanner calls after each matrix) that advances ``events``
    by one unit each time, naming the unit.

    Example:
        >>> seen = []
        >>> tick = counter(Labels(seen.append)); tick("attn_q[0]"); tick("attn_q[1]")
        >>> seen
        ['attn_q[0]', 'attn_q[1]']
    """
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        events.advance(done, description=label)

    return tick


def check_events(events: Any) -> None:
    """An :class:`Events` object (``begin``, ``advance``, ``end`` ...) as a job's progress.

    Raises:
        GeodriftError: ``progress='x': must be geodrift.jobs.events.Events (...), got a str``.
    """
    if not all(callable(getattr(events, name, None)) for name in ("stage", "begin", "advance", "end")):
        from geodrift.jobs.options import kind_of, shown

        raise GeodriftError(f"progress={shown(events)}: must be a function taking one string (e.g. print), True, "
                            f"None, or geodrift.jobs.events.Events, got {kind_of(events)}")
