"""`geodrift prove [CLAIM ...]`: verify the symmetry claims symbolically and numerically."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli.options import Dpi, Quiet, Wide

app = typer.Typer()


@app.command("prove", short_help="The symmetry claims: sympy proofs, checked numerically.")
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
    from geodrift.jobs.prove import ProveRequest, run_prove
    from geodrift.render.files import print_document
    from geodrift.render.progress import ConsoleEvents, announce
    from geodrift.render.proofs import proofs_document, render_proofs, write_proof_files

    request = ProveRequest(claims=tuple(claims) if claims else None, seed=seed, markdown=markdown, plot=plot, dpi=dpi)
    with ConsoleEvents(quiet=quiet, reserve_stdout=as_json) as events:
        report = run_prove(request, events)
    written = write_proof_files(report, markdown, plot, dpi, quiet=quiet)
    if as_json:
        print_document(proofs_document(report), indent=2)
    else:
        render_proofs(report, wide=wide)
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)
    if any(r.status == "failed" for r in report.results):
        raise typer.Exit(1)
