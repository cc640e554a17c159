"""The geodrift command line: ``cli/main.py`` only composes the command modules' Typer apps.

Each command module (``scan_cmd``, ``series_cmd``, ``prove_cmd``, ``simulate_cmd``) owns its app; its commands parse
options, call one job (``geodrift.jobs``, the one the Python API calls too) and render. Heavy imports (torch, rich tables, matplotlib) happen
inside command bodies, so ``geodrift --help`` and ``--version`` stay fast. Errors a user can cause
(GeodriftError, bad options, OS errors) print one line and exit with status 2.
"""

from __future__ import annotations

import sys
import warnings
from typing import Annotated

import typer

from geodrift import __version__
from geodrift.cli import (
    compress_cmd,
    explain_cmd,
    finetune_cmd,
    inspect_cmd,
    merge_cmd,
    prove_cmd,
    reproduce_cmd,
    scan_cmd,
    series_cmd,
    simulate_cmd,
    sweep_cmd,
)
from geodrift.errors import GeodriftError
from geodrift.io.literal import visible

app = typer.Typer(
    name="geodrift",
    help="Geometric continuity of weight singular vectors across depth: scan checkpoints, "
    "simulate training, prove the symmetry claims.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    # Help printed literally and whole: no rich markup ("pip install 'geodrift[hf]'" keeps its extra) and no
    # "…" cuts (click's formatter wraps long words instead); tests/test_help_texts.py checks every command.
    rich_markup_mode=None,
)
app.add_typer(scan_cmd.app)
app.add_typer(series_cmd.app)
app.add_typer(inspect_cmd.app)
app.add_typer(prove_cmd.app)
app.add_typer(simulate_cmd.app, name="simulate")
app.add_typer(compress_cmd.app, name="compress")
app.add_typer(sweep_cmd.app)
app.add_typer(finetune_cmd.app)
app.add_typer(reproduce_cmd.app)
app.add_typer(explain_cmd.app)
app.add_typer(merge_cmd.app)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"geodrift {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Geometric continuity of weight singular vectors across depth."""


def _click_exception() -> type[Exception]:
    # Typer >= 0.20 vendors click as typer._click and raises its exceptions even when click itself is
    # installed too (Ray depends on click); older releases use click itself. Try the vendored one first.
    try:
        from typer._click.exceptions import ClickException
    except ImportError:
        from click.exceptions import ClickException  # type: ignore[assignment,no-redef,unused-ignore]
    return ClickException


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors print one line and exit 2, never a traceback.

    Library warnings (torch's UserWarnings) are held back: after an error only the error line is
    printed; after success each distinct warning follows as one ``warning:`` line on stderr.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        code = _run(argv)
        for line in dict.fromkeys(f"warning: {w.category.__name__}: {str(w.message).splitlines()[0]}"
                                  for w in caught if str(w.message)):
            typer.echo(visible(line), err=True)
    sys.exit(code)


def _run(argv: list[str] | None) -> int:
    from geodrift.io.signals import resume_hint

    click_exception = _click_exception()
    resume_hint(None)  # an earlier in-process command's hint is not this one's
    try:
        code = app(args=argv, standalone_mode=False)
    except GeodriftError as error:
        typer.echo(f"error: {visible(str(error))}", err=True)  # names from files and options, shown literally
        sys.exit(2)
    except click_exception as error:
        if type(error).__name__ == "NoArgsIsHelpError":
            error.show()  # type: ignore[attr-defined]
            sys.exit(0)
        # Typer words a refused choice as pydantic does ("Value error, 'x' is not one of ..."): keep the sentence.
        message = error.format_message().replace(": Value error, ", ": ", 1)  # type: ignore[attr-defined]
        typer.echo(f"error: {visible(message)}", err=True)
        sys.exit(2)
    except OSError as error:
        # Disk full, permission denied, a folder where a file was expected: the environment's, not a bug.
        where = f"{error.filename}: " if error.filename else ""
        typer.echo(visible(f"error: {where}{error.strerror or error}; check the path, its permissions and free space"),
                   err=True)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):  # in-process callers without geodrift.io.signals installed
        typer.echo("interrupted", err=True)
        sys.exit(130)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":  # the console script and `python -m geodrift` go through geodrift.cli.entry
    main()
