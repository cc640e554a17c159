"""`geodrift reproduce [--quick]`: the whole reproduction through the sweep runner, into one report folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli.options import Dpi, Force, Quiet
from geodrift.cli.options import SweepAddress as Address
from geodrift.cli.options import SweepBackend as Backend

app = typer.Typer()


@app.command("reproduce", short_help="The whole paper, reproduced into one stamped report.")
def reproduce_command(
    quick: Annotated[bool, typer.Option("--quick", help="Shorter runs, one seed (about 30 minutes on a shared "
                                        "2-core CPU); default: the README's full-length commands (hours).")] = False,
    smoke: Annotated[bool, typer.Option("--smoke", help="Seconds per run (tiny presets; for tests).")] = False,
    out: Annotated[Path, typer.Option("--out", help="The report folder: report.md, report.json, figures/, and the "
                                      "run records under runs/ (a checkout's docs/results holds the committed "
                                      "--quick report).")] = Path("reproduction"),
    resume: Annotated[bool, typer.Option("--resume", help="Reuse finished runs in --out, continue interrupted "
                                         "ones.")] = False,
    backend: Backend = None,
    workers: Annotated[int, typer.Option("--workers", help="Runs at a time.")] = 2,
    address: Address = None,
    threads: Annotated[int, typer.Option("--threads", help="torch threads per run.")] = 1,
    force: Force = False, dpi: Dpi = 150, quiet: Quiet = False,
) -> None:
    """Proofs, the embedded scan, the MLP tables, drift, App. F, the data-size experiment, the transformer
    ablations and the compression experiments, every claim with its verdict, criterion and command."""
    from geodrift.jobs.reproduce import ReproduceRequest, run_reproduce
    from geodrift.render.paper_report import reproduce_summary, write_report
    from geodrift.render.progress import ConsoleEvents, announce

    request = ReproduceRequest(quick=quick, smoke=smoke, out=out, resume=resume,
                               backend=None if backend is None else backend.value, workers=workers, address=address,
                               threads=threads, force=force, dpi=dpi)
    with ConsoleEvents(quiet=quiet) as events:
        rep = run_reproduce(request, events)
    written = write_report(rep, out, dpi)
    announce(f"wrote {written[0]} ({len(written)} files)", quiet=quiet)
    typer.echo(reproduce_summary(rep, written[0]))
