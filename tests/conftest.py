"""Test configuration: Hypothesis profiles.

- ``default``: fast, unseeded (each run draws new examples; a failure is a bug found, not a flake);
- ``ci`` (env ``CI`` set): derandomized, so CI runs are reproducible;
- ``thorough`` (env ``GEODRIFT_HYPOTHESIS=thorough``): every property test with a 40x example budget
  (1,000 where a test sets none), unseeded - the long job of docs/testing.md.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# tests/strategies.py is imported as `strategies` by the test modules.
sys.path.insert(0, str(Path(__file__).parent))

settings.register_profile("default", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=50, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("GEODRIFT_HYPOTHESIS") or ("ci" if os.environ.get("CI") else "default"))



@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A command run in-process (``main([...])``, ``CliRunner``) sets torch's thread count for its work
    (``--threads``); restore it after each test, so that a later test's floating-point reductions run
    with the thread count the process started with (a bitwise determinism test compares two runs)."""
    if "torch" not in sys.modules:
        yield
        return
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _figures_closed():
    """A figure a test drew through the Python face (``report.plot()`` returns it open, as a notebook wants) is
    closed after the test, so a run does not keep hundreds of figures alive (matplotlib warned at 20)."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def _release_freed_memory() -> None:
    # glibc keeps freed heap pages (torch's mid-sized tensors) for reuse, so a process's resident memory only grows:
    # after a module that held a model in float64, every later module would start from its peak (the default run
    # peaked at 6.0 GiB that way). Returning them keeps the run's peak at its largest module's.
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to return
        pass


@pytest.fixture(autouse=True, scope="module")
def _memory_returned_after_each_module():
    """After each test module (its module-scoped fixtures gone), the freed memory goes back to the system."""
    yield
    _release_freed_memory()


_peak = {"kib": 0, "test": ""}


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    """Which test first took this process to its peak resident memory (the figure docs/testing.md budgets)."""
    import resource

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    if kib > _peak["kib"]:
        _peak.update(kib=kib, test=nodeid)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    import resource

    if _peak["test"]:
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        terminalreporter.write_line(f"peak memory {_peak['kib'] / 2**20:.2f} GiB, reached in {_peak['test']} "
                                    f"(largest child process {children / 2**20:.2f} GiB)")
