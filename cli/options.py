"""Options every command spells the same way: output layout, progress, figures, overwriting."""

from __future__ import annotations

from typing import Annotated

import typer

from geodrift.cli.choices import Backend

Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress bars, status lines or start-up messages on stderr (results and errors only).")]
Wide = Annotated[bool, typer.Option(
    "--wide", help="Print every table whole at its full width, whatever the terminal (default: tables that do not "
    "fit the terminal - 80 columns when piped - are split by columns; no value is ever cut).")]
Dpi = Annotated[int, typer.Option(
    "--dpi", help="Resolution of PNG figures, dots per inch (and of any raster part of a PDF/SVG).")]
Force = Annotated[bool, typer.Option(
    "--force", help="Delete the earlier results in --out (and the figures under --plot) before running.")]
MaxMemory = Annotated[str, typer.Option(
    "--max-memory", help="Refuse to start a run whose memory estimate exceeds this (e.g. 8G, 512M); raise it to "
    "allow larger --null-draws/--k.")]
ScanBackend = Annotated[Backend, typer.Option(
    "--backend", help="local (this process) or ray: the checkpoints (drift, compare) or ranges of layers (scan) as Ray "
    "tasks (Ray comes with the sweep extra of geodrift); the numbers are the local run's, bitwise.")]
RayAddress = Annotated[str | None, typer.Option(
    "--address", help="With --backend ray: an existing Ray cluster (auto or HOST:PORT); every node must read the "
    "checkpoints at the same paths. Default: a local cluster of this machine's CPUs.")]
SweepBackend = Annotated[Backend | None, typer.Option(
    "--backend", help="local: a process pool (the default of a sweep); ray: the optional extra geodrift[sweep]. "
    "With simulate, giving --backend or --workers runs the preset as a sweep.")]
Workers = Annotated[int | None, typer.Option("--workers", help="Runs at a time (local pool size; Ray: the CPUs of the "
                                             "local cluster it starts, times --threads). Default 1.")]
SweepAddress = Annotated[str | None, typer.Option("--address", help="An existing Ray cluster (auto or HOST:PORT); "
                                                  "--out must then be a folder every node can reach.")]
GpusPerRun = Annotated[float, typer.Option("--gpus-per-run", help="GPUs each run requests (Ray resource; 0.5 = two "
                                           "runs share one GPU).")]
