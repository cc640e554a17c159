"""An option declared once: a request's field, with what every face needs to offer and check it.

A measuring request (``ScanRequest``, ``DriftRequest``, ``CompareRequest``) declares each option as a dataclass
field whose default comes from :func:`option`. From that one declaration:

- the command line's Typer option (flag, help, default, choices) is generated (``geodrift.cli.options.command``);
- the Python keyword of ``geodrift.scan`` / ``drift`` / ``compare`` (default, help) is generated
  (``geodrift.api.face``), with its argument checked the same way;
- the check before any work runs (:func:`check_declared`: the annotation's type, the choices, the option's own
  ``check``), and its error names the option as the command line spells it (``--k: ...``), which the Python face
  re-words as the keyword with its value (``k=2.5: ...``) from the same table (:func:`flags`).

Every job checks its request with :func:`check_fields`: its declared options so, its other fields by their
annotations (the jobs whose requests mirror a command one to one: prune, share, simulate, sweep, prove,
reproduce). One check, in one module.

Adding an option to ``scan`` is one ``option(...)`` field in :class:`~geodrift.jobs.scan.ScanRequest` plus the code
that uses it (docs/architecture.md shows the recipe).

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Demo:
    ...     k: int = option(8, "--k", "Vectors per space.", example="8")
    >>> declared(Demo)["k"].flag, flags(Demo)
    ('--k', {'k': '--k'})
    >>> check_declared(Demo(k=2.5))
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --k: must be an integer (e.g. --k 8), got a float
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError

Check = Callable[[str, Any], None]


@dataclass(frozen=True)
class Option:
    """What the faces need of one option (the field's name, type and default are the dataclass's).

    Attributes:
        flag: the command line's flag (``--null-draws``); also names the option in every error.
        help: the ``--help`` text, and the Python keyword's description.
        example: the value an error suggests (``--k 8``).
        choices: the closed set of values (``--help`` lists them; anything else is refused).
        check: the option's own check, ``check(field, value)``, instead of the one its type implies.
        cli_type: the type the command line parses, where the field's annotation is wider (a path option that
            Python also takes as a list of rules).
        cli, python: whether the command line and the Python face offer it.
        cli_decls: the command line's declarations when not just ``flag`` (``--ov/--no-ov``; ``--full/--brief``,
            ``--detail``).
    """

    flag: str
    help: str
    example: str | None = None
    choices: tuple[str, ...] | None = None
    check: Check | None = None
    cli_type: Any = None
    cli: bool = True
    python: bool = True
    cli_decls: tuple[str, ...] = ()


def option(default: Any, flag: str, help: str, **more: Any) -> Any:
    """A request field declared as an option (see the module docstring): ``k: int = option(8, "--k", "...")``."""
    return dataclasses.field(default=default, metadata={"option": Option(flag, help, **more)}, kw_only=True)


def declared(request_type: type) -> dict[str, Option]:
    """``field -> Option`` of a request type's declared options, in field order."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(request_type) if "option" in f.metadata}


def flags(*request_types: type) -> dict[str, str]:
    """``field -> flag`` over request types (the error wording's table)."""
    return {name: opt.flag for t in request_types for name, opt in declared(t).items()}


# Names the requests import for type checkers only (the scanner's NameRule would import torch): read as Any.
_TYPE_CHECKING_ONLY = {"NameRule": Any}


def field_types(request_type: type) -> dict[str, Any]:
    """The resolved annotations of a request type's fields (names imported only for type checkers read as Any:
    resolving them must not import torch before the options are checked)."""
    return typing.get_type_hints(request_type, localns=_TYPE_CHECKING_ONLY)


def check_declared(request: Any) -> None:
    """Check every declared option of ``request`` before any work: its own ``check`` where it has one, else its
    choices and its annotation's type (an integer, a flag, a text, a path; None where the annotation allows it).

    Raises:
        GeodriftError: one line naming the option as the command line spells it (``--k: must be ...``).
    """
    hints = field_types(type(request))
    for name, opt in declared(type(request)).items():
        value = getattr(request, name)
        if opt.check is not None:
            opt.check(name, value)
            continue
        if opt.choices is not None and value is not None and value not in opt.choices:
            raise GeodriftError(f"{named(name, opt, value)}: {shown(value)} is not one of {', '.join(opt.choices)}")
        expect(name, opt, hints[name], value)


def check_fields(request: Any) -> None:
    """Refuse a request (a dataclass instance) whose fields do not have their annotated types: the one check of
    every job. A declared option (:func:`option`) is checked by :func:`check_declared` (worded by its flag); any
    other field by its annotation, worded by the request and the keyword.

    Paths may be given as ``str`` or any ``os.PathLike``; a ``float`` field takes an ``int``; ``bool`` is never
    taken for a number.

    Raises:
        GeodriftError: one line naming the request, the keyword, the expected type and the value.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class Demo:
        ...     k: int = 8
        ...     names: tuple[str, ...] | None = None
        >>> check_fields(Demo(k=8, names=("q",)))
        >>> check_fields(Demo(k=2.5))
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: Demo(k=2.5): k must be int, got float
    """
    hints = field_types(type(request))
    check_declared(request)
    for field in dataclasses.fields(request):
        if "option" in field.metadata:
            continue
        value, kind = getattr(request, field.name), hints[field.name]
        if not _matches(value, kind):
            raise GeodriftError(f"{type(request).__name__}({field.name}={_short(value)}): {field.name} must be "
                                f"{_describe(kind)}, got {type(value).__name__}")


def _matches(value: Any, kind: Any) -> bool:
    if kind is Any:
        return True
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(item, args[0]) for item in value)
        return len(args) == len(value) and all(_matches(v, a) for v, a in zip(value, args, strict=True))
    if origin is typing.Literal:
        return value in args
    if kind is type(None):
        return value is None
    if kind is Path:
        return isinstance(value, (str, os.PathLike))
    if kind in (int, float):
        return not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
    return isinstance(value, origin or kind)


def _describe(kind: Any) -> str:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in args)
    if origin is tuple:
        return f"a tuple of {_describe(args[0])}" if len(args) == 2 and args[1] is Ellipsis else "a tuple"
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    return "None" if kind is type(None) else "a path" if kind is Path else getattr(kind, "__name__", str(kind))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def expect(name: str, opt: Option, kind: Any, value: Any) -> None:
    """``value`` has the type ``kind`` (a field's annotation) names, or an error in the option's words."""
    if value is None and _optional(kind):
        return
    base = _base(kind)
    said = named(name, opt, value)
    if base is bool:
        if not isinstance(value, bool):
            raise GeodriftError(f"{said}: must be True or False, got {kind_of(value)}")
    elif base is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            example = f"{opt.flag} {opt.example or '1'}" if opt.cli else f"{name}={opt.example or '1'}"
            raise GeodriftError(f"{said}: must be an integer (e.g. {example}), got {kind_of(value)}")
    elif base is Path:
        if not isinstance(value, (str, Path)):
            raise GeodriftError(f"{said}: must be a file name, got {kind_of(value)}")
        if not str(value) or not Path(value).name:
            raise GeodriftError(f"{said}: must be a file name, got {str(value)!r}")
        if "\x00" in str(value):
            raise GeodriftError(f"{said}: a path cannot hold a NUL character")
    elif base is str and not isinstance(value, str):
        raise GeodriftError(f"{said}: must be a string such as {opt.example or 'x'!r}, got {kind_of(value)}")


def named(name: str, opt: Option, value: Any) -> str:
    """How an error names an option: its flag (``--k``; the Python face re-words it), or, for an option only Python
    has, the keyword with the value given (``architecture=3``)."""
    return opt.flag if opt.cli else f"{name}={shown(value)}"


def shown(value: Any) -> str:
    """An argument as a call would show it: short reprs as they are, long ones cut, long lists elided, other
    objects by their type.

    Example:
        >>> shown(list(range(94))), shown(Path("m.gguf")), shown(object())
        ('[0, 1, 2, ... (94 in all)]', "'m.gguf'", '<object>')
    """
    if isinstance(value, (list, tuple)) and len(value) > 6:
        return f"[{', '.join(map(repr, value[:3]))}, ... ({len(value)} in all)]"
    if value is None or isinstance(value, (str, int, float, bool, list, tuple)):
        text = repr(value)
        return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"
    if isinstance(value, Path):
        return repr(str(value))
    return f"<{type(value).__name__}>"


def kind_of(value: Any) -> str:
    """``a float``, ``an int``: the type of a wrong value, for a message."""
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _optional(kind: Any) -> bool:
    return type(None) in typing.get_args(kind)


def _base(kind: Any) -> Any:
    # The type a check looks at: the annotation without None; a path where a str or a Path is taken.
    args = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
    if Path in args:
        return Path
    return args[0] if len(args) == 1 else None
