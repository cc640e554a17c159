"""The ``geodrift sweep GRID`` job: a grid file's runs on a backend, aggregated like ``geodrift simulate``.

Example:
    >>> run_sweep(SweepRequest(grid_file=Path("grid.toml"), workers=0))
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: GRID grid.toml: cannot read the grid file (no such file); check the path
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from geodrift.jobs.events import SILENT, Events
from geodrift.jobs.options import check_fields

if TYPE_CHECKING:
    from geodrift.sim.reproduce import Reproduction


@dataclass(frozen=True)
class SweepRequest:
    """Every option of ``geodrift sweep`` that changes what is run or written (``--json``, ``--wide``, ``--quiet``
    only change what the face prints; ``--dpi`` is accepted for symmetry with simulate and draws nothing).

    ``backend`` None: ``local``; ``workers`` None: 1.
    """

    grid_file: Path
    backend: str | None = None
    workers: int | None = None
    address: str | None = None
    gpus_per_run: float = 0.0
    out: Path | None = None
    resume: bool = False
    threads: int = 1
    device: str = "cpu"
    checkpoint_every: int = 0
    force: bool = False


def run_sweep(request: SweepRequest, events: Events = SILENT) -> Reproduction:
    """Read and check the grid file, then run every configuration x data set x steps x seed and aggregate.

    Args:
        request: the options; events: where progress goes (one bar counting runs).

    Returns:
        The aggregate: the tables and verdicts of ``geodrift simulate`` over the grid's runs.

    Raises:
        GeodriftError: a bad grid file or option (named), or every run failed.
    """
    from geodrift.sweep.grid import load_grid
    from geodrift.sweep.runner import run_grid

    r = request
    check_fields(r)
    grid = load_grid(r.grid_file)
    rep = run_grid(grid, backend=r.backend or "local", workers=1 if r.workers is None else r.workers,
                   address=r.address, gpus=r.gpus_per_run, out=None if r.out is None else Path(r.out),
                   resume=r.resume, force=r.force, threads=r.threads, device=r.device,
                   checkpoint_every=r.checkpoint_every, on_stage=events.stage, on_begin=events.begin,
                   on_status=events.sweep)
    events.end()
    return rep
