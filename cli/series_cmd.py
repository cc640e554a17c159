"""`geodrift drift CKPT1 CKPT2 ...` (a training series) and `geodrift compare A B` (two models).

``drift`` is its own command rather than ``scan`` with several arguments: its output is a different
report (each checkpoint's continuity plus every layer's rotation from the first checkpoint), with its
own JSON kind, CSV columns and figures, and ``scan``'s one-model table, verdict summary and figure
would change meaning with the number of arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, MaxMemory, Quiet, RayAddress, ScanBackend, Wide

app = typer.Typer()

Roles = Annotated[str | None, typer.Option("--roles", help="Projections, e.g. q,k,v,o,gate,up,down; in a mixture "
                                            "of experts also router, expert_gate, experts (default all).")]
Layers = Annotated[str | None, typer.Option("--layers", help="Layers, e.g. 0-9,20 (default all).")]
View = Annotated[choices.View, typer.Option("--view", help="raw weights, folded (norm gains folded in), or canonical (folded, each layer at the canonical point of its gauge orbit: numbers exact reparametrisations leave unchanged).")]
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


@app.command("drift")
def drift_command(
    checkpoints: Annotated[list[str], typer.Argument(help="Two or more checkpoints of one training run, in order "
                                                     "(.gguf, .safetensors, Hugging Face folders, .pt pickles).")],
    roles: Roles = None, layers: Layers = None,
    k: Annotated[int, typer.Option("--k", help="Singular vectors per space kept per checkpoint.")] = 4,
    view: View = choices.View.raw, null_draws: NullDraws = 100, seed: Seed = 0, names: Names = None,
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
    from geodrift.cli.checks import check_outputs
    from geodrift.continuity import MeasureSpec
    from geodrift.io.atomic import document, output_set, to_json, write_json
    from geodrift.io.checks import parse_size
    from geodrift.render.figures import check_dpi, figure_format
    from geodrift.render.files import csv_text
    from geodrift.render.progress import JobProgress, announce
    from geodrift.render.series import render_drift, write_drift_plot, write_series_continuity_plot
    from geodrift.scanner.scan import parse_layers, parse_roles
    from geodrift.scanner.series import drift

    spec = MeasureSpec(k=k, null_draws=null_draws, seed=seed)
    options = {"roles": parse_roles(roles), "layers": parse_layers(layers), "view": view.value, "ov": ov, "names": names,
               "max_memory": parse_size(max_memory)}
    if plot is not None:
        figure_format(plot)
        check_dpi(dpi)
    check_outputs({"--json-out": json_out, "--csv": csv_out},
                  *([("--csv", _beside(csv_out, "rotation", ".csv"))] if csv_out else []),
                  *([("--plot", _beside(plot, kind, plot.suffix, "_")) for kind in ("rotation", "continuity")]
                    if plot else []))
    with JobProgress(f"reading {len(checkpoints)} checkpoints", 0, "matrices", quiet=quiet) as bar:
        rep = drift(list(checkpoints), spec, progress=lambda label: bar.update(advance=1, description=label),
                    backend=backend.value, address=address, align=align, head_maps=head_maps.value, **options)
    written: list[Path] = []
    with output_set():  # the files replace the previous run's together, or not at all
        if json_out:
            write_json(json_out, document("drift_report", rep.to_dict()))
            written.append(json_out)
        if csv_out:
            from geodrift.io.atomic import write_text

            rotation = _beside(csv_out, "rotation", ".csv")
            write_text(csv_out, csv_text(rep.continuity_rows()))
            write_text(rotation, csv_text(rep.rotation_rows()))
            written += [csv_out, rotation]
        if plot:
            written.append(write_drift_plot(rep, _beside(plot, "rotation", plot.suffix, "_"), dpi))
            written.append(write_series_continuity_plot(rep, _beside(plot, "continuity", plot.suffix, "_"), dpi))
    if as_json:
        sys.stdout.write(to_json(document("drift_report", rep.to_dict())) + "\n")
    else:
        render_drift(rep, wide=wide)
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)


@app.command("compare")
def compare_command(
    a: Annotated[str, typer.Argument(help="The first model (e.g. the base).")],
    b: Annotated[str, typer.Argument(help="The second model (e.g. its fine-tune or compressed copy).")],
    roles: Roles = None, layers: Layers = None,
    k: Annotated[int, typer.Option("--k", help="Dimension of the top-k subspaces compared.")] = 8,
    view: View = choices.View.raw, null_draws: NullDraws = 100, seed: Seed = 0, names: Names = None,
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
    from geodrift.cli.checks import check_outputs
    from geodrift.continuity import MeasureSpec
    from geodrift.io.atomic import document, output_set, to_json, write_json, write_text
    from geodrift.io.checks import parse_size
    from geodrift.render.figures import check_dpi, figure_format
    from geodrift.render.files import csv_text
    from geodrift.render.progress import JobProgress, announce
    from geodrift.render.series import render_compare, write_compare_plot
    from geodrift.scanner.scan import parse_layers, parse_roles
    from geodrift.scanner.series import compare

    spec = MeasureSpec(k=k, null_draws=null_draws, seed=seed)
    options = {"roles": parse_roles(roles), "layers": parse_layers(layers), "view": view.value, "ov": ov, "names": names,
               "max_memory": parse_size(max_memory)}
    if plot is not None:
        figure_format(plot)
        check_dpi(dpi)
    check_outputs({"--json-out": json_out, "--csv": csv_out, "--plot": plot})
    with JobProgress("reading 2 models", 0, "matrices", quiet=quiet) as bar:
        rep = compare(a, b, spec, progress=lambda label: bar.update(advance=1, description=label),
                      backend=backend.value, address=address, align=align, head_maps=head_maps.value, **options)
    written: list[Path] = []
    with output_set():  # the files replace the previous run's together, or not at all
        if json_out:
            write_json(json_out, document("compare_report", rep.to_dict()))
            written.append(json_out)
        if csv_out:
            write_text(csv_out, csv_text(rep.subspace_rows()))
            written.append(csv_out)
        if plot:
            written.append(write_compare_plot(rep, plot, dpi))
    if as_json:
        sys.stdout.write(to_json(document("compare_report", rep.to_dict())) + "\n")
    else:
        render_compare(rep, wide=wide)
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)


def _beside(path: Path, kind: str, suffix: str, sep: str = ".") -> Path:
    # scan.csv -> scan.rotation.csv; figs/s.png -> figs/s_rotation.png
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    return path.with_name(f"{stem}{sep}{kind}{suffix}")
