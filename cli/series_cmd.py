"""`geodrift drift CKPT1 CKPT2 ...` (a training series) and `geodrift compare A B` (two models).

``drift`` is its own command rather than ``scan`` with several arguments: its output is a different
report (each checkpoint's continuity plus every layer's rotation from the first checkpoint), with its
own JSON kind, CSV columns and figures, and ``scan``'s one-model table, verdict summary and figure
would change meaning with the number of arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, MaxMemory, Quiet, RayAddress, ScanBackend, Wide

app = typer.Typer()

Roles = Annotated[str | None, typer.Option("--roles", help="Projections, e.g. q,k,v,o,gate,up,down; in a mixture "
                                            "of experts also router, expert_gate, experts (default all).")]
Layers = Annotated[str | None, typer.Option("--layers", help="Layers, e.g. 0-9,20 (default all).")]
View = Annotated[choices.View | None, typer.Option("--view", help="raw weights (the paper's metric), folded (norm gains folded in), or canonical (folded, each layer at the canonical point of its gauge orbit: numbers and verdicts exact reparametrisations leave unchanged). Default: canonical where geodrift has derived the model's gauge group, else raw with a note.")]
NullDraws = Annotated[int, typer.Option("--null-draws", help="Permutation-null draws per statistic.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the permutation nulls.")]
Names = Annotated[Path | None, typer.Option("--names", help="JSON mapping of tensor-name regex -> role, "
                                            "roles named as in --roles.")]
Json = Annotated[bool, typer.Option("--json", help="Print the full report as JSON on stdout.")]
JsonOut = Annotated[Path | None, typer.Option("--json-out", help="Also write the JSON report here.")]
Ov = Annotated[bool, typer.Option("--ov/--no-ov", help="Also measure the OV composite W_O W_V per layer.")]
Align = Annotated[bool, typer.Option("--align", help="Bring the models into the first one's gauge first (gains "
                                     "folded; residual rotation, hidden permutations and scalings, V/O and Q/K maps "
                                     "recovered); llama/mistral.")]
HeadMaps = Annotated[choices.HeadMaps, typer.Option(
    "--head-maps", help="--align's per-head V/O and Q/K maps: orthogonal (default: never distorts two unrelated "
    "models), general (least squares: recovers any exact reparametrisation, e.g. AWQ's V/O scales) or none.")]


@app.command("drift", short_help="A training series: each layer's rotation from the first.")
def drift_command(
    checkpoints: Annotated[list[str], typer.Argument(help="Two or more checkpoints of one training run, in order "
                                                     "(.gguf, .safetensors, Hugging Face folders, .pt pickles).")],
    roles: Roles = None, layers: Layers = None,
    k: Annotated[int, typer.Option("--k", help="Singular vectors per space kept per checkpoint.")] = 4,
    view: View = None, null_draws: NullDraws = 100, seed: Seed = 0, names: Names = None,
    as_json: Json = False, json_out: JsonOut = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write continuity per checkpoint here and the "
                                                 "per-layer rotation to NAME.rotation.csv beside it.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Figures NAME_rotation.EXT and NAME_continuity.EXT "
                                              "(.png, .pdf or .svg).")] = None,
    ov: Ov = True, align: Align = False, head_maps: HeadMaps = choices.HeadMaps.orthogonal,
    backend: ScanBackend = choices.Backend.local, address: RayAddress = None,
    dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False, max_memory: MaxMemory = "8G",
) -> None:
    """A training series: each layer's v1/u1 rotation from the first checkpoint and continuity per checkpoint,
    with noise floors (the paper's Fig. 2 on real checkpoints). Each checkpoint is read once."""
    from geodrift.jobs.series import DriftRequest, run_drift
    from geodrift.render.files import write_drift_outputs
    from geodrift.render.results import announce_written, show_drift, working

    request = DriftRequest(checkpoints, roles=roles, layers=layers, k=k, view=view.value if view else None, null_draws=null_draws,
                           seed=seed, names=names, ov=ov, align=align, head_maps=head_maps.value, backend=backend.value, address=address,
                           max_memory=max_memory, json_out=json_out, csv_out=csv_out, plot=plot, dpi=dpi)
    with working(f"reading {len(checkpoints)} checkpoints", "matrices", quiet=quiet) as bar:
        rep = run_drift(request, bar.advance)
    written = write_drift_outputs(rep, request)
    show_drift(rep, as_json=as_json, wide=wide)
    announce_written(written, quiet=quiet)


@app.command("compare", short_help="Two models: the angles between their top-k subspaces.")
def compare_command(
    a: Annotated[str, typer.Argument(help="The first model (e.g. the base).")],
    b: Annotated[str, typer.Argument(help="The second model (e.g. its fine-tune or compressed copy).")],
    roles: Roles = None, layers: Layers = None,
    k: Annotated[int, typer.Option("--k", help="Dimension of the top-k subspaces compared.")] = 8,
    view: View = None, null_draws: NullDraws = 100, seed: Seed = 0, names: Names = None,
    as_json: Json = False, json_out: JsonOut = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write one row per projection, space and layer "
                                                 "here.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Figure of the subspace overlap across layers "
                                              "(.png, .pdf or .svg).")] = None,
    ov: Ov = True, align: Align = False, head_maps: HeadMaps = choices.HeadMaps.orthogonal,
    backend: ScanBackend = choices.Backend.local, address: RayAddress = None,
    dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False, max_memory: MaxMemory = "8G",
) -> None:
    """Two models: per projection, space and layer, the principal angles between their top-k subspaces, with a
    permutation null and the random k/d."""
    from geodrift.jobs.series import CompareRequest, run_compare
    from geodrift.render.files import write_compare_outputs
    from geodrift.render.results import announce_written, show_compare, working

    request = CompareRequest(a, b, roles=roles, layers=layers, k=k, view=view.value if view else None, null_draws=null_draws, seed=seed,
                             names=names, ov=ov, align=align, head_maps=head_maps.value, backend=backend.value, address=address,
                             max_memory=max_memory, json_out=json_out, csv_out=csv_out, plot=plot, dpi=dpi)
    with working("reading 2 models", "matrices", quiet=quiet) as bar:
        rep = run_compare(request, bar.advance)
    written = write_compare_outputs(rep, request)
    show_compare(rep, as_json=as_json, wide=wide)
    announce_written(written, quiet=quiet)
