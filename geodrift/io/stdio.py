"""Keep stdout for the report: anything written to file descriptor 1 during the work goes to stderr.

Under ``--json`` nothing but the JSON document may reach stdout. Native libraries (an OpenBLAS or
LAPACK warning, ARPACK's diagnostics) print straight to file descriptor 1, past Python's
``sys.stdout``, so the command runs its computation inside :func:`report_only_stdout`, which points
fd 1 at stderr and restores it before the report is written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def report_only_stdout(active: bool = True) -> Iterator[None]:
    """Inside the block, file descriptor 1 (and ``sys.stdout``) write to stderr; restored on exit.

    Args:
        active: False makes it a no-op (e.g. without ``--json``).
    """
    if not active:
        yield
        return
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no real fd 1 (an in-process test runner)
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 1)
        os.close(saved)
