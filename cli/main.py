"""The geodrift command line: each command parses options, makes one library call, renders.

Errors a user can cause (GeodriftError) are printed on one line and exit with status 2.
"""

from __future__ import annotations

import sys

import typer

from geodrift.errors import GeodriftError

app = typer.Typer(
    name="geodrift",
    help="Geometric continuity of weight singular vectors across depth: scan checkpoints, "
    "simulate training, prove the symmetry claims.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
simulate_app = typer.Typer(help="Train small networks with the paper's ablations and track continuity.",
                           no_args_is_help=True)
app.add_typer(simulate_app, name="simulate")


def _register() -> None:
    # Each command lives in its own module and registers itself on the shared apps.
    from geodrift.cli import prove_cmd, scan_cmd, sim_mlp_cmd, sim_transformer_cmd  # noqa: F401


def main() -> None:
    """Console-script entry point."""
    _register()
    try:
        app()
    except GeodriftError as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
