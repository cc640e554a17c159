"""The console entry point: the signal policy first, then the command line.

``geodrift.io.signals.install`` runs before typer or any command module is imported, so Ctrl-C at any
moment - even while the CLI is still starting - prints one ``interrupted`` line and exits 130
(SIGTERM: 143), with the temporary files of atomic writes removed (see ``geodrift/io/signals.py``).
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """Run ``geodrift`` under the signal policy (the ``[project.scripts]`` target)."""
    from geodrift.io import signals

    signals.install()
    try:
        from geodrift.cli.main import main as run

        run(argv)
    except signals.Interrupted as interrupt:
        signals.finish(interrupt.signum)


if __name__ == "__main__":
    main()
