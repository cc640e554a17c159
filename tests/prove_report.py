"""One ``geodrift prove`` run (all claims, seed 0) shared by the test modules of one pytest process."""

from __future__ import annotations

import functools

from geodrift.prove import ProveReport, run_claims


@functools.lru_cache(maxsize=1)
def full_report() -> ProveReport:
    """``run_claims()`` once: the symbolic derivations and every numeric twin (SmolLM2 loads once)."""
    return run_claims()


# The claim whose numeric twin measures the Jacobian of every architecture (minutes): the default run checks the
# others here and that one on qwen3 alone (tests/test_architectures.py); -m heavy checks it whole
# (tests/test_gauge_groups.py).
MEASURED_ON_EVERY_ARCHITECTURE = "dimension"


@functools.lru_cache(maxsize=1)
def report_but_the_jacobian() -> ProveReport:
    """``run_claims`` of every claim but :data:`MEASURED_ON_EVERY_ARCHITECTURE`, seed 0."""
    from geodrift.proofs.registry import CLAIMS

    return run_claims([c.name for c in CLAIMS if c.name != MEASURED_ON_EVERY_ARCHITECTURE])
