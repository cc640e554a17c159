"""One ``geodrift prove`` run (all claims, seed 0) shared by the test modules of one pytest process."""

from __future__ import annotations

import functools

from geodrift.prove import ProveReport, run_claims


@functools.lru_cache(maxsize=1)
def full_report() -> ProveReport:
    """``run_claims()`` once: the symbolic derivations and every numeric twin (SmolLM2 loads once)."""
    return run_claims()
