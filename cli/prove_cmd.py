"""`geodrift prove [CLAIM ...]`: verify the symmetry claims symbolically and numerically."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli.options import Dpi, Quiet, Wide

app = typer.Typer()


@app.command("prove")
def prove(
    claims: Annotated[list[str] | None, typer.Argument(help="Claims to verify (default: all): equivariance, "
                                                      "breaking, commutants, gauge, noether, residual, attention, "
                                                      "mlp, experts.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Write the derivations as Markdown (LaTeX) "
                                                  "here.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the numeric cross-checks.")] = 0,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the figure of the numeric cross-checks; the "
                                              "suffix gives the format: .png, .pdf or .svg.")] = None,
    dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False,
) -> None:
    """Verify each claim with sympy, then cross-check it numerically in torch (the simulator's models, the
    embedded SmolLM2, small transformers models); list the gauge group of each architecture family."""
    from geodrift.cli.checks import check_outputs
    from geodrift.io.atomic import document, to_json, write_text
    from geodrift.io.checks import check_seed
    from geodrift.io.stdio import report_only_stdout
    from geodrift.prove import run_claims
    from geodrift.prove.runner import select
    from geodrift.render.figures import check_dpi, figure_format
    from geodrift.render.progress import JobProgress, announce
    from geodrift.render.proofs import proofs_markdown, render_proofs

    check_seed(seed)
    if plot is not None:  # fail before the work, not after it
        figure_format(plot)
        check_dpi(dpi)
    check_outputs({"--markdown": markdown, "--plot": plot})
    with JobProgress("proving", len(select(claims or None)), "claims", quiet=quiet) as bar, \
            report_only_stdout(as_json):
        report = run_claims(claims or None, seed=seed,
                            on_claim=lambda name, i, n: bar.update(completed=i, description=name))
        bar.update(completed=len(report.results))
    written: list[Path] = []
    if markdown is not None:
        write_text(markdown, proofs_markdown(report, f"geodrift prove --markdown {markdown}"))
        written.append(markdown)
    if plot is not None:
        from geodrift.render.proofs import write_proofs_plot

        figure = write_proofs_plot(report, plot, dpi)
        if figure is None:
            announce(f"--plot {plot}: no claim reached its numeric cross-check; no figure written", quiet=quiet)
        else:
            written.append(figure)
    if as_json:
        sys.stdout.write(to_json(document("proofs", report.to_dict()), indent=2) + "\n")
    else:
        render_proofs(report, wide=wide)
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)
    if any(r.status == "failed" for r in report.results):
        raise typer.Exit(1)
