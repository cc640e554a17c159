"""One continuity package for the scan, for tracking during training, and for final reports.

``measure(weightset, MeasureSpec(...)) -> Report``; verdicts (``geodrift.continuity.verdicts``)
print the criterion beside every outcome.
"""

from geodrift.continuity.measure import (
    MeasureSpec,
    PermutationBank,
    assemble,
    decompose,
    measure,
    vector_continuity,
)
from geodrift.continuity.report import Report, RoleReport, SpaceContinuity, VectorContinuity
from geodrift.continuity.verdicts import Judge, Stat, Verdict, projection_verdict

__all__ = [
    "MeasureSpec", "PermutationBank", "assemble", "decompose", "measure", "vector_continuity", "Report", "RoleReport",
    "SpaceContinuity", "VectorContinuity", "Judge", "Stat", "Verdict", "projection_verdict",
]
