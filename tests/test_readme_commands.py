"""Every `geodrift ...` command line in README.md parses, and names presets, data sets and options that exist.

Commands are taken from fenced code blocks and inline code spans. Each is parsed by the real Typer
app (click's own parser: unknown options, missing values and bad types fail) without running it,
then its names are checked against the library: presets, ``--data`` names, ``--roles``,
``--layers``, ``--view``, claims, figure suffixes. ``a|b|c`` in an argument is expanded into each
alternative; ``[MODEL]``-style placeholders are dropped.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from geodrift.cli.main import app
from geodrift.errors import GeodriftError

README = Path(__file__).resolve().parent.parent / "README.md"
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "readme_numbers.sh"


def commands_in_markdown(text: str) -> list[str]:
    """The `geodrift ...` command lines of fenced blocks and inline code spans.

    Leading ``VAR=value`` assignments, a path before ``geodrift`` (``.venv/bin/``) or ``$G`` (the
    script's alias), and shell redirections or pipes after the command are dropped.
    """
    lines: list[str] = []
    for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S):
        lines += block.replace("\\\n", " ").splitlines()
    lines += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))]
    out = []
    for line in lines:
        for part in re.split(r"&&|;", line):
            part = re.split(r"\s(?:\d?>|\||#)", part)[0]  # cut at a redirection, a pipe (not a|b in a word), a comment
            words = part.replace("$G", "geodrift").split()
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # OMP_NUM_THREADS=1 ...
                words.pop(0)
            if len(words) > 1 and re.fullmatch(r"(?:\S*/)?geodrift", words[0]):
                out.append(" ".join(["geodrift", *words[1:]]))
    return list(dict.fromkeys(out))


def expand(command: str) -> list[list[str]]:
    """``geodrift a --x p|q`` -> ``[[a, --x, p], [a, --x, q]]`` without placeholders like ``[MODEL]``."""
    words = [w for w in shlex.split(command)[1:] if not re.fullmatch(r"\[[A-Z_ .]+\]", w)]
    choices = [w.split("|") if "|" in w and not w.startswith("|") else [w] for w in words]
    return [list(c) for c in itertools.product(*choices)]


def parse(args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Parse ``args`` with the app's click commands without running them: ``(command path, params)``."""
    command = get_command(app)
    ctx = command.make_context("geodrift", list(args))
    path: list[str] = []
    while hasattr(command, "resolve_command"):
        rest = list(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])) + list(ctx.args)
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        path.append(name)
        ctx = sub.make_context(name, rest, parent=ctx)
        command = sub
    return path, dict(ctx.params)


def _click_exception() -> type[Exception]:
    # typer >= 0.20 vendors click and raises its own exceptions even when click is installed too (Ray needs it)
    try:
        from typer._click.exceptions import ClickException
    except ImportError:
        from click.exceptions import ClickException  # type: ignore[assignment,no-redef,unused-ignore]
    return ClickException


def check_names(path: list[str], params: dict[str, Any]) -> None:
    """What the parser cannot know: presets, data set names, roles, layers, views, claims, figure suffixes."""
    from geodrift.render.figures import figure_format
    from geodrift.scan.scan import parse_layers, parse_roles
    from geodrift.sim.data import DATASET_NAMES
    from geodrift.sim.experiment import Overrides, build_specs

    if path[0] == "simulate":
        build_specs(path[1], params["preset"], Overrides(ablations=tuple(params["ablation"] or ())))  # unknown ablation
        assert not (params["resume"] and params["force"]), "--resume with --force"
        data = params.get("data")
        if path[1] == "mlp" and data is not None and "/" not in data and not data.endswith(".npz"):
            assert data in DATASET_NAMES, f"--data {data}: not one of {DATASET_NAMES}"
    if path[0] == "scan":
        parse_roles(params.get("roles"))
        parse_layers(params.get("layers"))
        assert params["view"] in ("raw", "folded")
    if path[0] == "prove" and params.get("claims"):
        from geodrift.prove.runner import select

        select(list(params["claims"]))
    plot = params.get("plot")
    if plot is not None and Path(plot).suffix:  # simulate --plot may also be a folder (no suffix)
        figure_format(plot)


def test_the_readme_shows_geodrift_commands():
    # The extraction itself: the README's main commands must be found, or the test below checks nothing.
    found = commands_in_markdown(README.read_text(encoding="utf-8"))
    assert any(c.startswith("geodrift scan") for c in found)
    assert any(c.startswith("geodrift simulate mlp --preset") for c in found)
    assert any(c.startswith("geodrift prove") for c in found)


def test_extraction_handles_env_paths_redirections_and_alternatives():
    text = ("run `OMP_NUM_THREADS=1 .venv/bin/geodrift simulate mlp --preset table1|drift > /dev/null`\n"
            "```bash\nbash scripts/setup.sh && COLUMNS=230 $G scan --k 4 | tee out.txt  # the scan\n```\n")
    found = commands_in_markdown(text)
    assert found == ["geodrift scan --k 4", "geodrift simulate mlp --preset table1|drift"]
    assert expand(found[1]) == [["simulate", "mlp", "--preset", "table1"], ["simulate", "mlp", "--preset", "drift"]]


@pytest.mark.parametrize("command", commands_in_markdown(README.read_text(encoding="utf-8")))
def test_every_readme_command_parses_and_names_things_that_exist(command: str):
    for args in expand(command):
        # --help / -h / --version are eager: click exits on them before parsing the rest, so the rest
        # is parsed without them (`geodrift --help` itself is run by tests/test_layering.py).
        args = [a for a in args if a not in ("--help", "-h", "--version")]
        if not args:
            continue
        path, params = parse(args)
        check_names(path, params)


def _script_commands() -> list[str]:
    # The script's commands with its loop variables expanded (for abl in "" "--ablation none" ...; seed in 42 43).
    text = SCRIPT.read_text(encoding="utf-8")
    loops = {name: re.findall(r'"([^"]*)"|(\S+)', values) for name, values in
             re.findall(r"for (\w+) in ([^;]+); do", text)}
    out = []
    for command in commands_in_markdown(f"```\n{text}\n```"):
        variants = [command]
        for name, values in loops.items():
            if f"${name}" in command:
                variants = [v.replace(f"${name}", a or b) for v in variants for a, b in values]
        out += variants
    return out


@pytest.mark.parametrize("command", _script_commands())
def test_every_command_of_the_reproduce_everything_script_parses(command: str):
    for args in expand(command):
        path, params = parse(args)
        check_names(path, params)


@pytest.mark.parametrize("line", [
    "geodrift simulate mlp --data sklearn-digits",  # the old README example: the name is `digits`
    "geodrift scan --no-such-option",
    "geodrift simulate mlp --preset table2",
    "geodrift simulate transformer --ablation no_such_ablation",
    "geodrift scan --plot scan.jpg",
])
def test_the_checker_rejects_what_a_user_would_trip_over(line: str):
    with pytest.raises((GeodriftError, AssertionError, _click_exception())):
        for args in expand(line):
            check_names(*parse(args))
