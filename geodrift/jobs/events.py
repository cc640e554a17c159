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
    """The callbacks of one job (see the module docstring)."""

    def stage(self, text: str) -> None:
        """A start-up message (``loading the corpus``), before or between the counted work."""

    def begin(self, title: str, total: int, unit: str) -> None:
        """A counted piece of work starts: ``total`` ``unit`` (0: not known yet) under ``title``."""

    def advance(self, done: int, total: int | None = None, description: str | None = None) -> None:
        """``done`` units of the current work are finished (the total may be corrected)."""

    def training(self, status: StepStatus) -> None:
        """A training step of a simulator run finished (the current work counts steps over every run)."""

    def sweep(self, status: SweepStatus) -> None:
        """A sweep run started or ended (the current work counts runs)."""

    def end(self) -> None:
        """The current counted work finished (its display ends at n/n)."""


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
