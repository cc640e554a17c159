"""`geodrift prove [CLAIM ...]`: verify the symmetry claims symbolically and numerically."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from geodrift.cli.main import app


@app.command("prove")
def prove(
    claims: list[str] | None = typer.Argument(None, help="Claims to verify (default: all): "
                                                    "equivariance, breaking, commutants, gauge, noether."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write the derivations as Markdown (LaTeX) here."),
    seed: int = typer.Option(0, help="Seed of the numeric cross-checks."),
) -> None:
    """Verify each claim with sympy, then cross-check it numerically in torch."""
    from geodrift.atomic import write_text
    from geodrift.prove import run_claims
    from geodrift.render.proofs import proofs_markdown, render_proofs

    report = run_claims(claims or None, seed=seed)
    if markdown is not None:
        write_text(markdown, proofs_markdown(report, f"geodrift prove --markdown {markdown}"))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        render_proofs(report)
    if any(r.status == "failed" for r in report.results):
        raise typer.Exit(1)
