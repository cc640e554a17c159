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


@app.command("scan")
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
    from geodrift.cli.checks import check_outputs
    from geodrift.continuity import MeasureSpec
    from geodrift.io.atomic import document, output_set, to_json, write_json
    from geodrift.io.checks import parse_size
    from geodrift.io.provenance import report_provenance
    from geodrift.io.stdio import report_only_stdout
    from geodrift.render.figures import check_dpi, figure_format
    from geodrift.render.files import scan_outputs, write_csv
    from geodrift.render.gauge import gauge_plot_path, render_gauge, write_gauge_plot
    from geodrift.render.progress import JobProgress, announce
    from geodrift.render.scan import render_scan, summary_line
    from geodrift.scanner.distributed import RaySource, check_backend
    from geodrift.scanner.embedded import embedded_model_path
    from geodrift.scanner.fingerprint import file_fingerprint
    from geodrift.scanner.gauge_diagnosis import diagnose_model
    from geodrift.scanner.preflight import check_plan
    from geodrift.scanner.scan import load_weights, parse_layers, parse_roles, scan
    from geodrift.weights import split_expert_role

    role_list, layer_list = parse_roles(roles), parse_layers(layers)
    check_backend(backend.value, address)
    if backend == choices.Backend.ray and device != "cpu":
        from geodrift.errors import GeodriftError

        raise GeodriftError("--device cuda with --backend ray: the Ray tasks request no GPUs yet; use one of the two")
    if backend == choices.Backend.ray and skip_nonfinite:
        from geodrift.errors import GeodriftError

        raise GeodriftError("--skip-nonfinite with --backend ray: the Ray tasks read the model themselves; scan "
                            "locally to skip corrupt matrices")
    spec = MeasureSpec(k=k, null_draws=null_draws, seed=seed, full_spectrum=full_spectrum, device=device)
    memory_limit = parse_size(max_memory)
    if plot is not None:  # fail before the long job, not after it
        figure_format(plot)
        check_dpi(dpi)
    check_outputs({}, *scan_outputs(json_out, csv_out, plot, experts=False, gauge=full))  # named and derived, before the work
    ws, heads = load_weights(model, view.value if view else None, names, role_list, layer_list)
    if plot is not None and any(split_expert_role(role) for role in ws.roles()):  # NAME_experts: a mixture only
        check_outputs({}, *scan_outputs(None, None, plot))
    check_plan(ws, spec, heads if ov else None, memory_limit)
    skipped: list[str] = []
    if skip_nonfinite:
        ws, skipped = ws.without_bad_tensors()
    with JobProgress("scanning", len(ws), "matrices", quiet=quiet) as bar, report_only_stdout(as_json):
        report = scan(ws, spec, heads=heads if ov else None,
                      progress=lambda label: bar.update(advance=1, description=label),
                      ray=(RaySource(model, ws.view, names, role_list, address)
                           if backend == choices.Backend.ray else None))
    report.notes += skipped
    report.provenance = report_provenance("geodrift " + shlex.join(sys.argv[1:]),
                                          file_fingerprint(model if model is not None else embedded_model_path()))
    gauge = diagnose_model(model, names, layer_list) if full else None  # --full: distance from the balanced point
    payload = report.to_dict() | ({"gauge_diagnosis": gauge.to_dict()} if gauge is not None and
                                  not isinstance(gauge, str) else {})
    written: list[Path] = []
    with output_set():  # the files replace the previous run's together, or not at all
        if json_out:
            write_json(json_out, document("continuity_report", payload))
            written.append(json_out)
        if csv_out:
            written += write_csv(report, csv_out)
        if plot:
            from geodrift.render.scan_plot import trajectory_plot_path, write_plot, write_trajectory_plot

            written.append(write_plot(report, plot, dpi))
            if report.trajectory:
                written.append(write_trajectory_plot(report, trajectory_plot_path(plot), dpi))
            if report.across_experts:
                from geodrift.render.experts_plot import experts_plot_path, write_experts_plot

                written.append(write_experts_plot(report, experts_plot_path(plot), dpi))
            if gauge is not None and not isinstance(gauge, str):
                written.append(write_gauge_plot(gauge, gauge_plot_path(plot), dpi))
    if as_json:
        sys.stdout.write(to_json(document("continuity_report", payload)) + "\n")
    else:
        render_scan(report, full=full, wide=wide, summary=gauge is None)
        if gauge is not None:  # the gauge diagnosis, then the scan's summary line, last as always
            render_gauge(gauge, wide=wide, then=summary_line(report))
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)
