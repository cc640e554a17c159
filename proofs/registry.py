"""All declared claims, in report order."""

from __future__ import annotations

from geodrift.proofs import breaking, commutants, equivariance, gauge, noether
from geodrift.proofs.claim import Claim

CLAIMS: tuple[Claim, ...] = (equivariance.CLAIM, breaking.CLAIM, commutants.CLAIM, gauge.CLAIM, noether.CLAIM)


def claim_names() -> list[str]:
    """Names accepted by ``geodrift prove``."""
    return [c.name for c in CLAIMS]
