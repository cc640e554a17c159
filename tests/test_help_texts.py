"""Every command's ``--help`` prints its texts literally and whole: no rich markup eats a pip extra
(``pip install 'geodrift[hf]'``), no option text is cut with "…" at 80 or 100 columns, no line is wider
than the terminal."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from geodrift.cli.main import app

runner = CliRunner()
CHOICES = re.compile(r"^ +--[a-z-]+ <[^ >]+>$")
BRACKETED = re.compile(r"\[[^\]\s]+\]")  # [hf], [frame], [/bold]: what rich markup would take as a tag


def _commands(command: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out = {path: command}
    for name, sub in getattr(command, "commands", {}).items():
        out.update(_commands(sub, (*path, name)))
    return out


COMMANDS = _commands(typer.main.get_command(app))


def _texts(command: Any) -> list[str]:
    return [text for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)] if text]


def test_the_help_of_some_command_holds_a_pip_extra():
    # the case the test is about exists (compress prune/share name pip install 'geodrift[hf]')
    assert any("'geodrift[hf]'" in text for command in COMMANDS.values() for text in _texts(command))


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "geodrift")
def test_help_is_literal_whole_and_fits(path: tuple[str, ...], width: int):
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)})
    assert result.exit_code == 0, result.output
    text = result.output
    assert "…" not in text
    # wider lines: only an option with its list of choices, printed whole (the terminal wraps it; nothing is cut)
    assert [line for line in text.splitlines() if len(line) > width and not CHOICES.match(line)] == []
    flat = " ".join(text.split())
    for source in _texts(COMMANDS[path]):
        for token in BRACKETED.findall(source):
            assert token in flat, f"{' '.join(path)} --help lost {token!r} of {source!r}"


@pytest.mark.parametrize("path", [p for p, c in sorted(COMMANDS.items()) if getattr(c, "commands", None)],
                         ids=lambda p: " ".join(p) or "geodrift")
def test_every_command_summary_in_a_list_is_whole_at_80_columns(path: tuple[str, ...]):
    # click cuts a summary it derives from the help with "..."; each command states a short one that fits
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    listed = result.output.split("Commands:", 1)[1].splitlines()
    assert [line for line in listed if line.rstrip().endswith("...") or len(line) > 80] == [], result.output
    assert all(len(line.split()) > 2 for line in listed if line.strip())  # each on one line, with its summary
