"""The one progress-bar helper: a rich bar on stderr with rate and ETA, off under --json or when piped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from geodrift.render import err_console


@contextmanager
def progress_bar(total: int, title: str, *, disable: bool = False) -> Iterator[Callable[..., None]]:
    """Yield ``update(completed=None, advance=0, description=None)`` for a bar of ``total`` units.

    The bar is drawn only on a terminal (never into a pipe or a JSON stream) and removed when done.
    """
    bar = Progress(TextColumn(f"[bold]{title}[/bold] {{task.description}}"), BarColumn(), MofNCompleteColumn(),
                   TaskProgressColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                   console=err_console, transient=True, disable=disable or not err_console.is_terminal)
    with bar:
        task = bar.add_task("", total=total)

        def update(completed: int | None = None, advance: int = 0, description: str | None = None) -> None:
            bar.update(task, completed=completed, advance=advance or None,
                       description=description if description is not None else bar.tasks[0].description)

        yield update
