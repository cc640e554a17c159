"""`geodrift sweep GRID`: run a user-written grid (configurations x seeds x data sets) on a backend.

``geodrift simulate mlp|transformer --backend local|ray --workers N`` runs a preset through the same
sweep runner (``geodrift.sweep.runner.run_grid``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, Force, GpusPerRun, Quiet, Wide, Workers
from geodrift.cli.options import SweepAddress as Address
from geodrift.cli.options import SweepBackend as Backend

app = typer.Typer(help="Run grids of independent simulator runs on a local process pool or on Ray.")


@app.command("sweep", short_help="A grid of simulator runs on a process pool or on Ray.")
def sweep_command(
    grid_file: Annotated[Path, typer.Argument(help="A grid file (.toml or .json; format in the README, 'Sweeps and "
                                              "one-command reproduction').", show_default=False)],
    backend: Backend = None, workers: Workers = None, address: Address = None, gpus_per_run: GpusPerRun = 0.0,
    out: Annotated[Path | None, typer.Option("--out", help="Folder for run records and checkpoints.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Skip finished runs in --out, continue interrupted ones.")] = False,
    threads: Annotated[int, typer.Option("--threads", help="torch threads (and Ray CPUs) per run.")] = 1,
    device: Annotated[choices.Device, typer.Option("--device", help="Where each run trains; auto: CUDA when available.")
                      ] = choices.Device.cpu,
    checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", help="Steps between resumable checkpoints "
                                                  "(0: none).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the aggregate as JSON on stdout.")] = False,
    force: Force = False, dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False,
) -> None:
    """Run every configuration x data set x steps x seed of GRID_FILE as independent runs; print the aggregate."""
    from geodrift.jobs.sweep import SweepRequest, run_sweep
    from geodrift.render.files import print_document
    from geodrift.render.progress import ConsoleEvents
    from geodrift.render.sim import render_reproduction, reproduction_document

    request = SweepRequest(grid_file=grid_file, backend=None if backend is None else backend.value, workers=workers,
                           address=address, gpus_per_run=gpus_per_run, out=out, resume=resume, threads=threads,
                           device=device.value, checkpoint_every=checkpoint_every, force=force)
    with ConsoleEvents(quiet=quiet) as events:
        rep = run_sweep(request, events)
    if as_json:
        print_document(reproduction_document(rep))
    else:
        render_reproduction(rep, None, detail=False, wide=wide)
    del dpi  # accepted for symmetry with simulate; the sweep command writes no figures
