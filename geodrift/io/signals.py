"""The one signal policy of every geodrift command: SIGINT and SIGTERM end a run in one line.

The console entry point (``geodrift.cli.entry``) calls :func:`install` as its first instruction,
before typer or any command module is imported, so an interrupt during start-up is handled the
same way as one during the work:

- SIGINT (Ctrl-C) -> ``interrupted`` on stderr, exit status 130 (128 + 2);
- SIGTERM -> ``interrupted (SIGTERM)``, exit status 143 (128 + 15);
- both first remove the temporary files of atomic writes in progress
  (:func:`geodrift.io.atomic.remove_pending_temp_files`); a finished file is never partial, because
  atomic writes rename complete files only;
- a command that can be resumed registers how (:func:`resume_hint`), and the line says it.

The handler raises :class:`Interrupted` (a ``BaseException``, so no ``except Exception`` swallows
it) in the main thread; the entry point catches it, cleans up, prints, and ends the process with
``os._exit`` so a reader thread busy on a large tensor cannot delay the exit. A second signal
during that clean-up exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
_state: dict[str, str | None] = {"resume": None}


class Interrupted(BaseException):  # noqa: N818 - the name is what the user reads
    """Raised in the main thread by the handler; ``signum`` is the signal received."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def install() -> None:
    """Install the handlers for SIGINT and SIGTERM (main thread only; call it once, first)."""
    for signum in EXIT_CODES:
        signal.signal(signum, _raise_interrupted)


def resume_hint(text: str | None) -> None:
    """Say how to resume the running command (e.g. ``"geodrift simulate mlp --out runs --resume"``), or clear it."""
    _state["resume"] = text


def message(signum: int) -> str:
    """The one line printed for ``signum``, with the resume hint when one is registered.

    Example:
        >>> resume_hint(None)  # no resumable command registered
        >>> message(signal.SIGINT)
        'interrupted'
    """
    text = "interrupted" if signum == signal.SIGINT else f"interrupted ({signal.Signals(signum).name})"
    if _state["resume"]:
        from geodrift.io.literal import visible

        text += f"; to continue, run: {visible(_state['resume'])}"
    return text


def finish(signum: int) -> None:
    """Clean up after an interrupt and end the process with the policy's exit status (never returns)."""
    for other in EXIT_CODES:  # a second Ctrl-C while cleaning up exits at once
        signal.signal(other, _exit_now)
    from geodrift.io.atomic import remove_pending_temp_files

    remove_pending_temp_files()
    _flush_quietly()
    try:
        os.write(2, (message(signum) + "\n").encode())
    except OSError:
        pass
    os._exit(EXIT_CODES.get(signal.Signals(signum), 128 + signum))


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    from geodrift.io.atomic import defer_signal

    if defer_signal(signum):  # temp-file bookkeeping in progress: raised again when it ends
        return
    raise Interrupted(signum)


def _exit_now(signum: int, frame: FrameType | None) -> None:
    os._exit(EXIT_CODES.get(signal.Signals(signum), 128 + signum))


def _flush_quietly() -> None:
    # What was printed before the signal is kept (reports are written in one call at the end, so
    # stdout holds nothing partial); a closed pipe must not turn the interrupt into a traceback.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
