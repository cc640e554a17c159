"""What a job tells its face while it works: start-up stages, counted work, training steps, sweep runs.

A job never prints: it calls an :class:`Events` object. The CLI passes
``geodrift.render.progress.ConsoleEvents`` (stderr messages and one progress bar at a time); the
Python face passes nothing and gets :data:`SILENT`. The order of calls is: any number of
:meth:`Events.stage`, then for each counted piece of work :meth:`Events.begin`, its updates
(:meth:`Events.advance`, :meth:`Events.training`, :meth:`Events.sweep`) and :meth:`Events.end`.

Example:
    >>> SILENT.begin("pruning", 3, "evaluations"); SILENT.advance(1, description="rank"); SILENT.end()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

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
