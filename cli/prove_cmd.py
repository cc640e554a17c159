"""`geodrift prove [CLAIM ...]`: verify the symmetry claims symbolically and numerically."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer()


@app.command("prove")
def prove(
    claims: Annotated[list[str] | None, typer.Argument(help="Claims to verify (default: all): equivariance, "
                                                      "breaking, commutants, gauge, noether.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Write the derivations as Markdown (LaTeX) "
                                                  "here.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the numeric cross-checks.")] = 0,
) -> None:
    """Verify each claim with sympy, then cross-check it numerically in torch on the simulator's models."""
    from geodrift.atomic import to_json, write_text
    from geodrift.prove import run_claims
    from geodrift.render.proofs import proofs_markdown, render_proofs

    report = run_claims(claims or None, seed=seed)
    if markdown is not None:
        write_text(markdown, proofs_markdown(report, f"geodrift prove --markdown {markdown}"))
    if as_json:
        sys.stdout.write(to_json(report.to_dict(), indent=2) + "\n")
    else:
        render_proofs(report)
    if any(r.status == "failed" for r in report.results):
        raise typer.Exit(1)
