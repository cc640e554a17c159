"""Test configuration: Hypothesis profiles.

- ``default``: fast, unseeded (each run draws new examples; a failure is a bug found, not a flake);
- ``ci`` (env ``CI`` set): derandomized, so CI runs are reproducible;
- ``thorough`` (env ``GEODRIFT_HYPOTHESIS=thorough``): every property test with a 40x example budget
  (1,000 where a test sets none), unseeded - the long job of docs/testing.md.
"""

from __future__ import annotations

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
