"""Options every command spells the same way (output layout, progress, figures, overwriting), and the Typer
options generated from a request's declared options (:mod:`geodrift.jobs.options`): :func:`declared_command`
gives a command the signature its request declares, so an option is written once, in the request."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any, TypeVar

import typer

from geodrift.cli.choices import Backend, Choice
from geodrift.jobs.options import declared, field_types
from geodrift.jobs.request import MeasureOptions

Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress bars, status lines or start-up messages on stderr (results and errors only).")]
Wide = Annotated[bool, typer.Option(
    "--wide", help="Print every table whole at its full width, whatever the terminal (default: tables that do not "
    "fit the terminal - 80 columns when piped - are split by columns; no value is ever cut).")]
Dpi = Annotated[int, typer.Option(
    declared(MeasureOptions)["dpi"].flag, help=declared(MeasureOptions)["dpi"].help)]
Force = Annotated[bool, typer.Option(
    "--force", help="Delete the earlier results in --out (and the figures under --plot) before running.")]
MaxMemory = Annotated[str, typer.Option(
    declared(MeasureOptions)["max_memory"].flag, help=declared(MeasureOptions)["max_memory"].help)]
SweepBackend = Annotated[Backend | None, typer.Option(
    "--backend", help="local: a process pool (the default of a sweep); ray: the optional extra geodrift[sweep]. "
    "With simulate, giving --backend or --workers runs the preset as a sweep.")]
Workers = Annotated[int | None, typer.Option("--workers", help="Runs at a time (local pool size; Ray: the CPUs of the "
                                             "local cluster it starts, times --threads). Default 1.")]
SweepAddress = Annotated[str | None, typer.Option("--address", help="An existing Ray cluster (auto or HOST:PORT); "
                                                  "--out must then be a folder every node can reach.")]
GpusPerRun = Annotated[float, typer.Option("--gpus-per-run", help="GPUs each run requests (Ray resource; 0.5 = two "
                                           "runs share one GPU).")]

# The options of a measuring command that change what it prints, not what its job computes.
Json = Annotated[bool, typer.Option("--json", help="Print the full report as JSON on stdout.")]
RENDERING = {"as_json": (Json, False), "wide": (Wide, False), "quiet": (Quiet, False)}
REQUIRED = inspect.Parameter.empty  # an argument without a default
Command = TypeVar("Command", bound=Callable[..., Any])


def declared_command(request_type: type, arguments: dict[str, Any]) -> Callable[[Command], Command]:
    """Give a command (``def command(**given)``) the signature ``request_type`` declares: its ``arguments``
    (``name -> Annotated[type, typer.Argument(...)]`` with a default, as ``(annotation, default)``), then one
    Typer option per declared option the command line has (:func:`typer_parameter`), then ``--json``, ``--wide``
    and ``--quiet``. Typer reads the command's parameters from that signature."""
    def apply(command: Command) -> Command:
        params = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=a, default=d)
                  for name, (a, d) in arguments.items()]
        params += [typer_parameter(request_type, name) for name, opt in declared(request_type).items() if opt.cli]
        params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=d)
                   for name, (a, d) in RENDERING.items()]
        command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        return command
    return apply


def typer_parameter(request_type: type, name: str) -> inspect.Parameter:
    """The Typer option of one declared option: its flag(s), help and default; its choices as a closed choice
    (``--help`` lists them, click refuses anything else)."""
    opt = declared(request_type)[name]
    default = next(f.default for f in dataclasses.fields(request_type) if f.name == name)
    kind = opt.cli_type if opt.cli_type is not None else field_types(request_type)[name]
    if opt.choices is not None:
        choice = _choice(name, opt.choices)
        kind = choice | None if default is None else choice
        default = None if default is None else choice(default)
    annotation = Annotated[kind, typer.Option(*(opt.cli_decls or (opt.flag,)), help=opt.help)]  # type: ignore[valid-type]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def request_values(given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A declared command's parsed values split into the request's (closed choices as their plain names) and the
    rendering's (``as_json``, ``wide``, ``quiet``)."""
    rendering = {name: given.pop(name) for name in RENDERING}
    return {name: value.value if isinstance(value, Enum) else value for name, value in given.items()}, rendering


_CHOICES: dict[tuple[str, tuple[str, ...]], type[Choice]] = {}


def _choice(name: str, values: tuple[str, ...]) -> type[Choice]:
    # One Choice enum per declared option's values (Typer lists them in --help and refuses any other).
    key = (name, values)
    if key not in _CHOICES:
        _CHOICES[key] = Choice(name.title().replace("_", ""), {v: v for v in values})  # type: ignore[call-overload]
    return _CHOICES[key]
