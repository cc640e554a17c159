"""`geodrift scan [MODEL]`: per-projection geometric continuity of a checkpoint."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, MaxMemory, Quiet, RayAddress, ScanBackend, Wide

app = typer.Typer()


@app.command("scan", short_help="Per-projection continuity of a checkpoint, with its verdicts.")
def scan_command(
    model: Annotated[str | None, typer.Argument(help="A .gguf file, a .safetensors file or a Hugging Face model "
                                                "folder. Default: the embedded SmolLM2-135M-Instruct (Q4_1 GGUF).")] = None,
    roles: Annotated[str | None, typer.Option("--roles", help="Projections, e.g. q,k,v,o,gate,up,down; in a "
                                              "mixture of experts also router, expert_gate (every expert's), "
                                              "expert_gate.3, experts, shared_gate (default all).")] = None,
    layers: Annotated[str | None, typer.Option("--layers", help="Layers, e.g. 0-9,20 (default all).")] = None,
    k: Annotated[int, typer.Option("--k", help="Singular vectors per space (k = 1..K); clipped, with a note, for a "
                                   "projection of lower rank.")] = 8,
    view: Annotated[choices.View | None, typer.Option("--view", help="raw weights (the paper's metric), folded (norm gains folded in), or canonical (folded, each layer at the canonical point of its gauge orbit: numbers and verdicts exact reparametrisations leave unchanged). Default: canonical where geodrift has derived the model's gauge group, else raw with a note.")
                    ] = None,
    null_draws: Annotated[int, typer.Option("--null-draws", help="Permutation-null draws per statistic.")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the permutation null.")] = 0,
    names: Annotated[Path | None, typer.Option("--names", help="JSON mapping of tensor-name regex -> role, "
                                               "roles named as in --roles.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full report as JSON on stdout.")] = False,
    json_out: Annotated[Path | None, typer.Option("--json-out", help="Also write the JSON report here.")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write the summary (projection × space × k) to "
                                                 "this CSV, and one row per adjacent layer pair to NAME.pairs.csv "
                                                 "beside it.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the figure of continuity vs depth per "
                                              "projection, and the trajectory-shape figure (|cos| vs layer "
                                              "distance, 3-PC EVR) as NAME_trajectory.EXT beside it (and, for a "
                                              "mixture of experts, the experts' figure as NAME_experts.EXT); the "
                                              "suffix gives the format: .png, .pdf or .svg.")] = None,
    full: Annotated[bool, typer.Option("--full/--brief", "--detail", help="Every table: σ²-WA and both floors, depth "
                                       "profiles, k = 1..K, trajectory shape, each projection's criterion, the gauge diagnosis (default "
                                       "brief: one row per projection, its verdicts beside its numbers; --detail is "
                                       "an older name of --full).")] = False,
    ov: Annotated[bool, typer.Option("--ov/--no-ov", help="Also scan the OV composite W_O W_V per layer.")] = True,
    full_spectrum: Annotated[bool, typer.Option("--full-spectrum", help="Full SVD of every matrix so σ²-WA "
                                                "(Eq. 2) is exact instead of bounded (slower).")] = False,
    device: Annotated[str, typer.Option("--device", help="cpu, or cuda (cuda:N): the large matrices' decompositions on "
                                        "a GPU (block Krylov; the same acceptance rule, so every vector agrees with "
                                        "the CPU's to |cos| >= 0.999, not bitwise).")] = "cpu",
    skip_nonfinite: Annotated[bool, typer.Option("--skip-nonfinite", help="Skip (and list in the report's notes) a "
                                                 "matrix whose values are NaN/Inf or overflow float32's squares, "
                                                 "instead of refusing the model; reads such a model twice.")
                              ] = False,
    backend: ScanBackend = choices.Backend.local, address: RayAddress = None,
    dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False, max_memory: MaxMemory = "8G",
) -> None:
    """Scan a checkpoint: v1/u1 continuity per projection with noise floors and the theory's verdict."""
    from geodrift.jobs.scan import ScanRequest, run_scan
    from geodrift.render.files import write_scan_outputs
    from geodrift.render.results import announce_written, show_scan, working

    request = ScanRequest(model=model, roles=roles, layers=layers, k=k, view=view.value if view else None, null_draws=null_draws,
                          seed=seed, names=names, ov=ov, full_spectrum=full_spectrum, device=device,
                          skip_nonfinite=skip_nonfinite, backend=backend.value, address=address,
                          max_memory=max_memory, full=full, json_out=json_out, csv_out=csv_out, plot=plot, dpi=dpi,
                          call="geodrift " + shlex.join(sys.argv[1:]))
    with working("scanning", "matrices", quiet=quiet, report_on_stdout=as_json) as bar:
        result = run_scan(request, bar.advance, bar.set_total)
    written = write_scan_outputs(result, request)
    show_scan(result, as_json=as_json, full=full, wide=wide)
    announce_written(written, quiet=quiet)
