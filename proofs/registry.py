"""All declared claims, in report order."""

from __future__ import annotations

from geodrift.proofs import (
    attention,
    breaking,
    commutants,
    dimension,
    equivariance,
    experts,
    gauge,
    mlp,
    noether,
    norms,
)
from geodrift.proofs.claim import Claim

CLAIMS: tuple[Claim, ...] = (equivariance.CLAIM, breaking.CLAIM, commutants.CLAIM, gauge.CLAIM, noether.CLAIM,
                             norms.CLAIM, attention.CLAIM, mlp.CLAIM, experts.CLAIM,
                             dimension.CLAIM)


def claim_names() -> list[str]:
    """Names accepted by ``geodrift prove``."""
    return [c.name for c in CLAIMS]
