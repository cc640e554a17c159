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


def _click_exception() -> type[Exception]:
    # Typer >= 0.20 vendors click as typer._click; older releases use click itself.
    try:
        from click.exceptions import ClickException
    except ImportError:
        from typer._click.exceptions import ClickException  # type: ignore[no-redef]
    return ClickException


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors print one line and exit 2, never a traceback."""
    _register()
    click_exception = _click_exception()
    try:
        code = app(args=argv, standalone_mode=False)
    except GeodriftError as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)
    except click_exception as error:
        if type(error).__name__ == "NoArgsIsHelpError":
            error.show()  # type: ignore[attr-defined]
            sys.exit(0)
        typer.echo(f"error: {error.format_message()}", err=True)  # type: ignore[attr-defined]
        sys.exit(2)
    except OSError as error:
        # Disk full, permission denied, a folder where a file was expected: the environment's, not a bug.
        where = f"{error.filename}: " if error.filename else ""
        typer.echo(f"error: {where}{error.strerror or error}; check the path, its permissions and free space",
                   err=True)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    # Run through the imported module so commands register on the same app object.
    from geodrift.cli.main import main as _main

    _main()
