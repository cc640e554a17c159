"""The type check of the jobs whose requests mirror a command one to one (prune, share, simulate, sweep,
prove, reproduce): each field of the request has the type its annotation names.

(The measuring jobs - scan, drift, compare - check their shared options in ``geodrift.jobs.request``,
field by field, because the Python face re-words those messages as its keywords.)

From the shell Typer has converted every option already; from Python a ``k=2.5`` or ``methods=["a", 3]``
would otherwise end in a TypeError deep inside the work. Paths may be given as ``str`` or any
``os.PathLike``; a ``float`` field takes an ``int``; ``bool`` is never taken for a number.
"""

from __future__ import annotations

import os
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError


def check_request(request: Any) -> None:
    """Refuse a request (a dataclass instance) whose fields do not have their annotated types.

    Raises:
        GeodriftError: one line naming the request, the keyword, the expected type and the value.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class Demo:
        ...     k: int = 8
        ...     names: tuple[str, ...] | None = None
        >>> check_request(Demo(k=8, names=("q",)))
        >>> check_request(Demo(k=2.5))
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: Demo(k=2.5): k must be int, got float
    """
    hints = typing.get_type_hints(type(request))
    for field in fields(request):
        value, kind = getattr(request, field.name), hints[field.name]
        if not _matches(value, kind):
            raise GeodriftError(f"{type(request).__name__}({field.name}={_short(value)}): {field.name} must be "
                                f"{_describe(kind)}, got {type(value).__name__}")


def _matches(value: Any, kind: Any) -> bool:
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
