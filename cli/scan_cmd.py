"""`geodrift scan [MODEL]`: per-projection geometric continuity of a checkpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from geodrift.atomic import write_json
from geodrift.cli.main import app
from geodrift.render import err_console
from geodrift.render.scan import render_scan, write_csv, write_plot
from geodrift.scan.scan import check_options, load_weights, parse_layers, parse_roles, scan


@app.command("scan")
def scan_command(
    model: str = typer.Argument(None, help="A .gguf file, a .safetensors file or a Hugging Face model "
                                "folder. Default: the embedded SmolLM2-135M-Instruct (Q4_1 GGUF)."),
    roles: str = typer.Option(None, "--roles", help="Projections, e.g. q,k,v,o,gate,up,down (default all)."),
    layers: str = typer.Option(None, "--layers", help="Layers, e.g. 0-9,20 (default all)."),
    k: int = typer.Option(8, "--k", help="Singular vectors per space (k = 1..K)."),
    view: str = typer.Option("raw", "--view", help="raw weights, or folded (norm gains folded in)."),
    null_draws: int = typer.Option(100, "--null-draws", help="Permutation-null draws per statistic."),
    seed: int = typer.Option(0, "--seed", help="Seed of the permutation null."),
    names: Path = typer.Option(None, "--names", help="JSON mapping of tensor-name regex -> role."),
    as_json: bool = typer.Option(False, "--json", help="Print the full report as JSON on stdout."),
    json_out: Path = typer.Option(None, "--json-out", help="Also write the JSON report to this file."),
    csv_out: Path = typer.Option(None, "--csv", help="Write flat rows (role × space × k) to this CSV."),
    plot: Path = typer.Option(None, "--plot", help="Write a PNG of continuity vs depth per projection."),
    detail: bool = typer.Option(True, "--detail/--brief", help="Also show the k = 1..K table."),
    ov: bool = typer.Option(True, "--ov/--no-ov", help="Also scan the OV composite W_O W_V per layer."),
    full_spectrum: bool = typer.Option(False, "--full-spectrum", help="Full SVD of every matrix so "
                                       "σ²-WA (Eq. 2) is exact instead of bounded (slower)."),
) -> None:
    """Scan a checkpoint: v1/u1 continuity per projection with noise floors and the theory's verdict."""
    role_list, layer_list = parse_roles(roles), parse_layers(layers)
    check_options(k, null_draws)
    ws, heads = load_weights(model, view, names, role_list, layer_list)
    with Progress(TextColumn("[bold]scanning[/bold] {task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True, disable=as_json or not err_console.is_terminal) as bar:
        task = bar.add_task("", total=len(ws))
        report = scan(ws, k=k, null_draws=null_draws, seed=seed, full_spectrum=full_spectrum,
                      heads=heads if ov else None,
                      progress=lambda label: bar.update(task, advance=1, description=label))
    if json_out:
        write_json(json_out, report.to_dict())
    if csv_out:
        write_csv(report, csv_out)
    if plot:
        write_plot(report, plot)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict()) + "\n")
    else:
        render_scan(report, detail=detail)
