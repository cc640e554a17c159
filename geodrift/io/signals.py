"""The one signal policy of every geodrift command: SIGINT and SIGTERM end a run in one line, at any moment.

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

An exception raised at an arbitrary instruction can land where Python cannot pass it on, so the handler
raises only where it can:

- while an atomic write's bookkeeping runs, or an output set is renamed into place (:func:`held`), the
  signal is recorded and raised when the block ends;
- inside an import (any frame of ``importlib``'s machinery on the stack: a module's body, a lazy
  ``__getattr__``, an import lock's weakref callback), it is delivered again 20 ms later, until the
  import is over - raised inside one it could leave a half-initialised module behind (numpy's lazy
  attributes then recursed until a RecursionError);
- in a finalizer (a weakref callback, ``__del__``), Python swallows the exception ("Exception ignored");
  the hook :func:`install` sets on ``sys.unraisablehook`` catches it there and delivers the signal again;
- should anything else swallow it, a watchdog thread ends the process the same way 10 s later.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
_state: dict[str, str | None] = {"resume": None}
# Blocks no interrupt may cut in half (held): their depth, and the signal received meanwhile.
_HOLD: dict[str, int | None] = {"depth": 0, "signum": None}
REDELIVER_S = 0.02  # how soon a signal deferred out of an import or a finalizer is delivered again
WATCHDOG_S = 10.0  # how long an Interrupted may take to end the process before the watchdog does


class Interrupted(BaseException):  # noqa: N818 - the name is what the user reads
    """Raised in the main thread by the handler; ``signum`` is the signal received."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def install() -> None:
    """Install the handlers for SIGINT and SIGTERM, and the hook that catches an interrupt a finalizer swallowed
    (main thread only; call it once, first)."""
    for signum in EXIT_CODES:
        signal.signal(signum, _raise_interrupted)
    if not getattr(sys.unraisablehook, "geodrift_interrupts", False):
        sys.unraisablehook = _unraisable_hook(sys.unraisablehook)


@contextmanager
def held() -> Iterator[None]:
    """A block no interrupt cuts in half: a signal received inside it is raised when the outermost block ends.

    Example:
        >>> with held():
        ...     pass
    """
    _HOLD["depth"] = int(_HOLD["depth"] or 0) + 1
    try:
        yield
    finally:
        _HOLD["depth"] = int(_HOLD["depth"] or 0) - 1
        signum = _HOLD["signum"]
        if signum is not None and not _HOLD["depth"]:
            _HOLD["signum"] = None
            signal.raise_signal(signum)  # the handler runs again, now outside the block


def defer_signal(signum: int) -> bool:
    """Record ``signum`` and return True inside a :func:`held` block (else False); it is raised when the block ends."""
    if _HOLD["depth"]:
        _HOLD["signum"] = signum
        return True
    return False


def resume_hint(text: str | None) -> None:
    """Say how to resume the running command (e.g. ``"geodrift simulate mlp --out runs --resume"``), or clear it."""
    if text is not None:
        import geodrift.io.literal  # noqa: F401 - imported now, not while the process is being interrupted
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


def finish(signum: int, flush: bool = True) -> None:
    """Clean up after an interrupt and end the process with the policy's exit status (never returns).

    Args:
        signum: the signal received.
        flush: flush ``sys.stdout``/``sys.stderr`` first (the watchdog does not: the main thread may hold them).
    """
    if threading.current_thread() is threading.main_thread():
        for other in EXIT_CODES:  # a second Ctrl-C while cleaning up exits at once
            signal.signal(other, _exit_now)
    atomic = sys.modules.get("geodrift.io.atomic")  # not imported: no atomic write was ever in progress
    if atomic is not None:
        atomic.remove_pending_temp_files()
    if flush:
        _flush_quietly()
    try:
        os.write(2, (message(signum) + "\n").encode())
    except OSError:
        pass
    os._exit(EXIT_CODES.get(signal.Signals(signum), 128 + signum))


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    if defer_signal(signum):  # temp-file bookkeeping in progress: raised again when it ends
        return
    if _in_import(frame):
        _deliver_again(signum)
        return
    _start_watchdog(signum)
    raise Interrupted(signum)


def _in_import(frame: FrameType | None) -> bool:
    # Any frame of the import machinery on the stack: a module body, a lazy attribute, an import lock's callback.
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _deliver_again(signum: int) -> None:
    timer = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def _start_watchdog(signum: int) -> None:
    # Should the Interrupted be swallowed (a bare except in a library), the process still ends as the policy says.
    def watch() -> None:
        finish(signum, flush=False)

    timer = threading.Timer(WATCHDOG_S, watch)
    timer.daemon = True
    timer.start()


def _unraisable_hook(previous: Any) -> Any:
    # An Interrupted raised inside a finalizer is swallowed there ("Exception ignored"): deliver it again outside.
    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Interrupted):
            _deliver_again(unraisable.exc_value.signum)
            return
        previous(unraisable)

    hook.geodrift_interrupts = True  # type: ignore[attr-defined]
    return hook


def _exit_now(signum: int, frame: FrameType | None) -> None:
    os._exit(EXIT_CODES.get(signal.Signals(signum), 128 + signum))


def _flush_quietly() -> None:
    # What was printed before the signal is kept (reports are written in one call at the end, so
    # stdout holds nothing partial); a closed pipe must not turn the interrupt into a traceback.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe, a closed file, a flush the interrupt cut into (reentrant call)
            pass
