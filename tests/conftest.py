"""Test configuration: hypothesis profiles ('default' fast, 'ci' derandomized when env CI is set)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

# tests/strategies.py is imported as `strategies` by the test modules.
sys.path.insert(0, str(Path(__file__).parent))

settings.register_profile("default", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=50, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "default")
