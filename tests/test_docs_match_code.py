"""The docs name only what exists: every ``--option`` that README.md and docs/*.md write after a ``geodrift``
command is an option of that command in the Typer app, every other ``--option`` they name is an option of
some command (or of a named other tool on the same line: pip, pytest, scripts/setup.sh, a benchmark
script), and every repository path they name (``geodrift/...``, ``cli/...``, ``tests/...``,
``benchmarks/...``, ``scripts/...``, ``docs/...``, ``proofs/...``) exists in the checkout."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from geodrift.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# `geodrift CMD [SUB] ...` up to the end of the code span, the line or a sentence break.
COMMAND = re.compile(r"geodrift ((?:[a-z]+)(?: [a-z]+)?)([^`\n|;]*)")
# Options of other tools, allowed on a line that names the tool.
OTHER_TOOLS = ("pip", "pytest", "setup.sh", "benchmarks/", "bench_", "python -m", "ruff", "mypy", "gpu_check",
               "readme_numbers", "fuzz_", "compress_tables", ".ci/run", "git ")
PATH = re.compile(r"(?<![\w/.-])((?:geodrift|cli|tests|benchmarks|scripts|docs|proofs)/[A-Za-z0-9_./-]*[A-Za-z0-9_/])")
# Path stems that name a family of files, not one (e.g. "benchmarks/RESULTS_*.md" written as a stem).
FAMILIES = ("benchmarks/RESULTS_", "benchmarks/bench_")
# Paths the docs name that are not in a checkout, each with why.
NOT_COMMITTED = {
    "docs/results/runs/": "the run records of geodrift reproduce, ignored by git (docs/reproduce.md says so)",
    "benchmarks/RESULTS_gpu.md": "written by scripts/gpu_check.sh on a GPU; docs/scan-performance.md says not yet run",
}


def _options(command: Any, path: tuple[str, ...] = ()) -> dict[str, set[str]]:
    out = {" ".join(path): {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}}
    for name, sub in getattr(command, "commands", {}).items():
        out.update(_options(sub, (*path, name)))
    return out


COMMANDS = _options(typer.main.get_command(app))
EVERY_OPTION = set().union(*COMMANDS.values()) | {"--help", "--version"}


def _command_of(words: str) -> str | None:
    # "compress share" -> itself; "scan foo" -> "scan" (the second word is an argument); unknown -> None.
    if words in COMMANDS:
        return words
    first = words.split()[0]
    return first if first in COMMANDS else None


def _lines(page: Path) -> list[tuple[int, str]]:
    return list(enumerate(page.read_text(encoding="utf-8").splitlines(), 1))


def test_the_app_has_the_commands_the_readme_lists():
    assert {"scan", "drift", "compare", "prove", "simulate mlp", "simulate transformer", "compress prune",
            "compress share", "sweep", "reproduce", "inspect", "merge"} <= set(COMMANDS)


def _segment(line: str, at: int) -> str:
    """The code span (`...`) of ``line`` that holds position ``at``, else the line's text outside code spans."""
    spans = [m for m in re.finditer(r"`[^`]*`", line)]
    inside = [m.group(0) for m in spans if m.start() < at < m.end()]
    return inside[0] if inside else re.sub(r"`[^`]*`", " ", line)


def _wrong_options(page: str, lines: list[tuple[int, str]]) -> list[str]:
    wrong = []
    for number, line in lines:
        claimed: set[tuple[int, str]] = set()
        for match in COMMAND.finditer(line):
            command = _command_of(match.group(1))
            if command is None:
                continue
            for option in OPTION.finditer(match.group(2)):
                claimed.add(match.start(2) + option.start())
                name = option.group(0)
                # a group written without its subcommand ("geodrift simulate ... --resume"): any of theirs
                allowed = set().union(*(opts for name_, opts in COMMANDS.items() if name_.startswith(f"{command} ")),
                                      COMMANDS[command])
                if name not in allowed | {"--help"}:
                    wrong.append(f"{page}:{number}: geodrift {command} has no {name}")
        for option in OPTION.finditer(line):
            if option.start() in claimed or option.group(0) in EVERY_OPTION:
                continue
            if not any(tool in _segment(line, option.start()) for tool in OTHER_TOOLS):
                wrong.append(f"{page}:{number}: no geodrift command has {option.group(0)}")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_option_the_docs_name_exists_for_its_command(page: Path):
    assert _wrong_options(page.name, _lines(page)) == []


def test_the_check_finds_an_option_of_another_command_and_one_of_no_command():
    lines = list(enumerate(["`geodrift scan --layers 0-3 --save-format hf`, `geodrift compress share --save-format hf`",
                            "pass `--save-policy keep`; `pip install --no-deps x`; `geodrift simulate ... --resume`"], 1))
    assert _wrong_options("x.md", lines) == ["x.md:1: geodrift scan has no --save-format",
                                             "x.md:2: no geodrift command has --save-policy"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_repository_path_the_docs_name_exists(page: Path):
    missing = []
    for number, line in _lines(page):
        for match in PATH.finditer(line):
            path = match.group(1).rstrip(".")
            if path in NOT_COMMITTED:
                continue
            if path.startswith(FAMILIES) and not (ROOT / path).exists():
                if any(p.name.startswith(Path(path).name) for p in (ROOT / Path(path).parent).iterdir()):
                    continue
            # geodrift.cli is the checkout's cli/ and geodrift.proofs its proofs/ (pyproject's package-dir)
            on_disk = re.sub(r"^geodrift/(cli|proofs)(/|$)", r"\1\2", path)
            if not (ROOT / on_disk).exists() and not (page.parent / path).exists():
                missing.append(f"{page.name}:{number}: {path}")
    assert missing == []
