"""The ``geodrift prove`` job: each claim derived with sympy, then cross-checked numerically.

Example:
    >>> run_prove(ProveRequest(claims=("nothing",), seed=-1))
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --seed: must be an integer in [0, 2**64 - 1], got -1
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from geodrift.jobs.events import SILENT, Events
from geodrift.jobs.options import check_fields

if TYPE_CHECKING:
    from geodrift.prove import ProveReport


@dataclass(frozen=True)
class ProveRequest:
    """Every option of ``geodrift prove`` that changes what is run or written (``--json``, ``--wide`` and
    ``--quiet`` only change what the face prints). ``claims`` None: every claim."""

    claims: tuple[str, ...] | None = None
    seed: int = 0
    markdown: Path | None = None
    plot: Path | None = None
    dpi: int = 300


def run_prove(request: ProveRequest, events: Events = SILENT) -> ProveReport:
    """Check the options and claim the output files, then verify the claims (one progress unit each).

    Args:
        request: the options; events: where progress goes.

    Returns:
        The report (a claim whose status is ``failed`` is the face's to signal: ``geodrift prove`` exits 1).

    Raises:
        GeodriftError: a bad seed, figure name or dpi, an output file that cannot be written, an unknown claim.
    """
    from geodrift.io.checks import check_dpi, check_seed, figure_format
    from geodrift.io.outdir import claim_outputs
    from geodrift.prove import run_claims
    from geodrift.prove.runner import select

    r = request
    check_fields(r)
    check_seed(r.seed)
    if r.plot is not None:  # fail before the work, not after it
        figure_format(r.plot)
        check_dpi(r.dpi)
    claim_outputs([(option, Path(path)) for option, path in (("--markdown", r.markdown), ("--plot", r.plot))
                   if path is not None])
    names = list(r.claims) if r.claims else None
    events.begin("proving", len(select(names)), "claims")
    report = run_claims(names, seed=r.seed, on_claim=lambda name, i, n: events.advance(i, description=name))
    events.advance(len(report.results))
    events.end()
    return report
