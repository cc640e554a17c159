"""Checks every command runs on its options before any work: output paths first, then ranges.

Library-level ranges (seeds, counts, sizes) live in ``geodrift.io.checks``; this module adds what only
the command line knows: which option named which output file.
"""

from __future__ import annotations

from pathlib import Path


def check_outputs(outputs: dict[str, Path | None], *more: tuple[str, Path]) -> None:
    """Refuse now an output file that could not be written after the work, or that holds a file geodrift did not
    write (named as the user gave it); once written, each is recorded in its folder's manifest (``geodrift.io.outdir``).

    Args:
        outputs: option -> path (None = not asked for), e.g. ``{"--json-out": Path("r.json")}``.
        more: further ``(option, path)`` files a command writes beside them (``NAME.pairs.csv``).

    Raises:
        GeodriftError: naming the option and the user's path (never a temporary file).
    """
    from geodrift.io.outdir import claim_outputs

    claim_outputs([(option, path) for option, path in [*outputs.items(), *more] if path is not None])


def resume_command(argv: list[str]) -> str:
    """The command line that continues an interrupted run: ``argv`` with ``--resume`` instead of ``--force``.

    Example:
        >>> resume_command(["/x/bin/geodrift", "simulate", "mlp", "--out", "runs", "--force"])
        'geodrift simulate mlp --out runs --resume'
    """
    import shlex

    args = [a for a in argv[1:] if a != "--force"]
    if "--resume" not in args:
        args.append("--resume")
    return " ".join(["geodrift", *(shlex.quote(a) for a in args)])
