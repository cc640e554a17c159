"""The ``geodrift reproduce`` job: the whole reproduction (proofs, scan, simulators, compression) into one folder.

Example:
    >>> run_reproduce(ReproduceRequest(quick=True, smoke=True))
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --quick and --smoke: pass one of them
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from geodrift.errors import GeodriftError
from geodrift.jobs.events import SILENT, Events
from geodrift.jobs.options import check_fields

if TYPE_CHECKING:
    from geodrift.reproduction import PaperReproduction


@dataclass(frozen=True)
class ReproduceRequest:
    """Every option of ``geodrift reproduce`` that changes what is run or written (``--quiet`` aside).

    ``quick``/``smoke``: the mode (neither: ``full``); ``backend`` None: ``local``; ``dpi``: the report's figures
    (checked here, drawn by the face).
    """

    quick: bool = False
    smoke: bool = False
    out: Path = Path("reproduction")
    resume: bool = False
    backend: str | None = None
    workers: int = 2
    address: str | None = None
    threads: int = 1
    force: bool = False
    dpi: int = 150

    @property
    def mode(self) -> str:
        """``smoke``, ``quick`` or ``full``."""
        return "smoke" if self.smoke else "quick" if self.quick else "full"


def run_reproduce(request: ReproduceRequest, events: Events = SILENT) -> PaperReproduction:
    """Check the options and prepare the report folder, then run every section (runs through the sweep runner).

    Args:
        request: the options; events: where progress goes (one bar counting the runs, stage messages above it).

    Returns:
        Every section's result with the run's provenance (the face writes the report from it).

    Raises:
        GeodriftError: both ``quick`` and ``smoke``, a bad sweep option or dpi, a report folder that holds a
            user's files, or a stage that cannot start.
    """
    from geodrift.io.checks import check_dpi
    from geodrift.io.outdir import prepare_out
    from geodrift.reproduction import reproduce_paper
    from geodrift.sweep.runner import check_options

    r = request
    check_fields(r)
    if r.quick and r.smoke:
        raise GeodriftError("--quick and --smoke: pass one of them")
    backend = r.backend or "local"
    check_options(backend, r.workers, r.threads, 0.0)
    check_dpi(r.dpi)
    prepare_out(r.out, resume=r.resume, reload=False, force=r.force)
    events.begin("reproduce", 0, "runs")
    rep = reproduce_paper(r.mode, r.out, backend=backend, workers=r.workers, address=r.address, threads=r.threads,
                          on_stage=events.stage, on_status=events.sweep)
    events.end()
    return rep
