"""Run the declared claims: symbolic derivation (sympy), then the numeric cross-check (torch).

A claim's status is ``verified`` only if sympy verified it *and* the torch check agrees;
``unproven`` if sympy could not settle it (with why); ``failed`` if a step was refuted or the
numeric check disagrees.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.proofs.claim import Claim, Derivation
from geodrift.proofs.registry import CLAIMS, claim_names


@dataclass
class ClaimResult:
    """One claim's outcome (JSON-able via ``to_dict``)."""

    name: str
    title: str
    statement: str
    assumptions: list[str]
    method: str
    verdict: str  # symbolic: verified | unproven | refuted
    reason: str
    status: str  # verified | unproven | failed
    symbolic_s: float
    numeric_passed: bool | None
    numeric_summary: str
    numeric_s: float
    steps: list[dict[str, Any]] = field(default_factory=list)
    numeric_metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProveReport:
    """All claim results and the total wall time."""

    results: list[ClaimResult]
    total_s: float
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the claims' results and the gauge groups of each architecture family."""
        from geodrift.prove.groups_report import gauge_groups

        return {"seed": self.seed, "total_s": self.total_s, "results": [asdict(r) for r in self.results],
                "gauge_groups": gauge_groups(self)}


def select(names: list[str] | None) -> list[Claim]:
    """The claims named (all if none), in report order.

    Raises:
        GeodriftError: on an unknown claim name.
    """
    if not names:
        return list(CLAIMS)
    unknown = [n for n in names if n not in claim_names()]
    if unknown:
        raise GeodriftError(f"unknown claim {', '.join(unknown)}: choose from {', '.join(claim_names())}")
    return [c for c in CLAIMS if c.name in names]


def run_claim(claim: Claim, seed: int = 0) -> ClaimResult:
    """Derive one claim symbolically, then cross-check it numerically with a seeded generator."""
    import torch

    from geodrift.prove import dimension_check, gauge, gauge_twins, symmetry

    numeric_checks = {
        "equivariance": symmetry.check_equivariance, "breaking": symmetry.check_breaking,
        "commutants": symmetry.check_commutants, "gauge": gauge.check_gauge, "noether": gauge.check_noether,
        **gauge_twins.CHECKS, "dimension": dimension_check.check_dimension,
    }

    t0 = time.perf_counter()
    try:
        deriv = claim.derive()
    except Exception as exc:  # a derivation that crashes proves nothing: report it unproven
        deriv = Derivation()
        deriv.check(f"derivation raised {type(exc).__name__}: {exc}", None)
    t1 = time.perf_counter()
    numeric_passed: bool | None = None
    summary, metrics = "skipped (symbolic derivation not verified)", {}
    if deriv.verdict == "verified":
        torch.set_num_threads(1)
        res = numeric_checks[claim.numeric](deriv.facts, torch.Generator().manual_seed(seed))
        numeric_passed, summary, metrics = res.passed, res.summary, res.metrics
    t2 = time.perf_counter()
    if deriv.verdict == "unproven":
        status = "unproven"
    elif deriv.verdict == "verified" and numeric_passed:
        status = "verified"
    else:
        status = "failed"
    return ClaimResult(
        name=claim.name, title=claim.title, statement=claim.statement, assumptions=list(claim.assumptions),
        method=claim.method, verdict=deriv.verdict, reason=deriv.reason, status=status, symbolic_s=t1 - t0,
        numeric_passed=numeric_passed, numeric_summary=summary, numeric_s=t2 - t1,
        steps=[{"text": s.text, "ok": s.ok} for s in deriv.steps], numeric_metrics=metrics,
    )


def run_claims(names: list[str] | None = None, seed: int = 0,
               on_claim: Callable[[str, int, int], None] | None = None) -> ProveReport:
    """Run the named claims (all if None).

    Args:
        names: claim names (see ``geodrift.proofs.registry``), None for all.
        seed: seeds the numeric cross-checks.
        on_claim: called with ``(name, index, total)`` before each claim (progress displays).

    Example:
        >>> report = run_claims(["breaking"]); report.results[0].status  # doctest: +SKIP
        'verified'
    """
    chosen = select(names)
    t0 = time.perf_counter()
    results = []
    for i, claim in enumerate(chosen):
        if on_claim is not None:
            on_claim(claim.name, i, len(chosen))
        results.append(run_claim(claim, seed))
    return ProveReport(results, time.perf_counter() - t0, seed)
