"""`geodrift sweep GRID`: run a user-written grid (configurations x seeds x data sets) on a backend.

``geodrift simulate mlp|transformer --backend local|ray --workers N`` runs a preset through the same
sweep runner (:func:`run_grid` below).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, Force, Quiet, Wide

if TYPE_CHECKING:
    from geodrift.sim.reproduce import Reproduction
    from geodrift.sweep.grid import Grid

app = typer.Typer(help="Run grids of independent simulator runs on a local process pool or on Ray.")

Backend = Annotated[choices.Backend | None, typer.Option(
    "--backend", help="local: a process pool (the default of a sweep); ray: the optional extra geodrift[sweep]. "
    "With simulate, giving --backend or --workers runs the preset as a sweep.")]
Workers = Annotated[int | None, typer.Option("--workers", help="Runs at a time (local pool size; Ray: the CPUs of the "
                                             "local cluster it starts, times --threads). Default 1.")]
Address = Annotated[str | None, typer.Option("--address", help="An existing Ray cluster (auto or HOST:PORT); --out "
                                             "must then be a folder every node can reach.")]
GpusPerRun = Annotated[float, typer.Option("--gpus-per-run", help="GPUs each run requests (Ray resource; 0.5 = two "
                                           "runs share one GPU).")]


@app.command("sweep")
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
    from geodrift.sweep.grid import load_grid

    grid = load_grid(grid_file)
    rep = run_grid(grid, backend=(backend or choices.Backend.local).value, workers=1 if workers is None else workers,
                   address=address, gpus=gpus_per_run, out=out, resume=resume, force=force, threads=threads,
                   device=device.value, checkpoint_every=checkpoint_every, quiet=quiet)
    show(rep, as_json=as_json, wide=wide)
    del dpi  # accepted for symmetry with simulate; the sweep command writes no figures


def run_grid(grid: Grid, *, backend: str, workers: int, address: str | None, gpus: float, out: Path | None,
             resume: bool, force: bool, threads: int, device: str, checkpoint_every: int, quiet: bool,
             plot: Path | None = None) -> Reproduction:
    """Check the options, prepare --out, run the grid with a progress bar, aggregate (shared with simulate)."""
    from geodrift.errors import GeodriftError
    from geodrift.io.outdir import prepare_out
    from geodrift.render.progress import JobProgress, announce, sweep_reporter
    from geodrift.sweep.runner import check_options, run_sweep, sweep_reproduction

    check_options(backend, workers, threads, gpus)
    if checkpoint_every < 0:
        raise GeodriftError(f"--checkpoint-every: must be >= 0 (0 = none), got {checkpoint_every}")
    if resume and out is None:
        raise GeodriftError("--resume needs --out DIR (where the records and checkpoints are)")
    removed = prepare_out(out, resume=resume, reload=False, force=force, plot=plot)
    if removed:
        announce(f"--force: deleted {len(removed)} earlier result file(s) under {out or plot}", quiet=quiet)
    jobs = grid.jobs
    announce(f"sweep {grid.name}: {len(jobs)} runs on {backend}"
             + (f" at {address}" if address else f" with {workers} worker(s)") + f", {threads} thread(s) each",
             quiet=quiet)
    with JobProgress(f"sweep {grid.name}", len(jobs), "runs", quiet=quiet) as bar:
        outcomes = run_sweep(jobs, backend=backend, workers=workers, address=address,
                             out=str(out) if out is not None else None, device=device, threads=threads, gpus=gpus,
                             checkpoint_every=checkpoint_every, on_status=sweep_reporter(bar))
    return sweep_reproduction(grid, outcomes)


def show(rep: Reproduction, *, as_json: bool, wide: bool) -> None:
    """Print a sweep's aggregate: JSON on stdout, or the reproduction tables."""
    if as_json:
        from geodrift.io.atomic import document, to_json

        sys.stdout.write(to_json(document("reproduction", rep.to_dict())) + "\n")
    else:
        from geodrift.render.sim import render_reproduction

        render_reproduction(rep, None, detail=False, wide=wide)
