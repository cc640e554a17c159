"""Reading back the JSON geodrift writes: the envelope checked, non-finite numbers restored, dataclasses rebuilt.

Every JSON document geodrift writes (:func:`geodrift.io.atomic.document`) starts with ``schema_version`` and
``kind``; NaN and +-Infinity were written as ``null`` and listed, by JSON Pointer, under ``nonfinite``.
:func:`read_document` reads such a file (or takes the parsed object) and puts those numbers back;
:func:`from_jsonable` rebuilds a dataclass - nested dataclasses, lists, tuples, dicts - from its ``asdict`` form,
ignoring keys it does not know (a MINOR schema bump only adds fields, so a reader skips what it does not know).

Example:
    >>> doc = read_document({"schema_version": "1.2", "kind": "x", "std": None,
    ...                      "nonfinite": {"count": 1, "values": [{"path": "/std", "was": "NaN"}]}})
    >>> doc["std"] != doc["std"]
    True
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import stat
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError

# The largest document read back (a drift over many checkpoints of a large model is megabytes).
MAX_DOCUMENT_BYTES = 1 << 30
_WAS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def read_document(source: str | Path | Mapping[str, Any], kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A geodrift JSON document, its non-finite numbers restored.

    Args:
        source: the file's path, or the object ``json.load`` gave.
        kinds: the kinds accepted (None: any).

    Raises:
        GeodriftError: not a regular file, not strict JSON, no ``schema_version``/``kind``, a newer MAJOR schema
            than this geodrift reads, another kind - naming the file.
    """
    from geodrift.io.atomic import SCHEMA_VERSION

    where = str(source) if isinstance(source, (str, Path)) else "the document"
    doc = _load(Path(source)) if isinstance(source, (str, Path)) else source
    if not isinstance(doc, Mapping) or not isinstance(doc.get("kind"), str) or "schema_version" not in doc:
        raise GeodriftError(f"{where}: not a geodrift JSON document (no schema_version and kind); geodrift reads "
                            "back the JSON its commands write (--json-out, --json)")
    major = str(doc["schema_version"]).split(".")[0]
    if major != SCHEMA_VERSION.split(".")[0]:
        raise GeodriftError(f"{where}: schema_version {doc['schema_version']!r}, but this geodrift reads "
                            f"{SCHEMA_VERSION.split('.')[0]}.x; read it with the geodrift that wrote it")
    if kinds is not None and doc["kind"] not in kinds:
        raise GeodriftError(f"{where}: a {doc['kind']!r} document, not {' or '.join(map(repr, kinds))}")
    return restore_nonfinite(copy.deepcopy(dict(doc)))


def _load(path: Path) -> Any:
    try:
        info = os.stat(path)
    except OSError as error:
        raise GeodriftError(f"{path}: cannot read it ({error.strerror or error}); check the path") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_DOCUMENT_BYTES:
        raise GeodriftError(f"{path}: not a geodrift JSON document (not a regular file of at most 1 GiB)")
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise GeodriftError(f"{path}: not strict JSON ({str(error)[:160]}); geodrift reads back the JSON its "
                            "commands write") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259)")


def restore_nonfinite(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with each value its ``nonfinite`` note lists (a JSON Pointer and what it was) put back.

    Raises:
        GeodriftError: a note whose pointer does not lead to a null (a document edited since).
    """
    note = doc.get("nonfinite")
    if not isinstance(note, Mapping):
        return doc
    values = note.get("values")
    for item in values if isinstance(values, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("path"), str) and item.get("was") in _WAS:
            _set(doc, item["path"], _WAS[item["was"]])
    return doc


def _set(doc: Any, pointer: str, value: float) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    target = doc
    try:
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        last = parts[-1]
        if isinstance(target, list):
            if target[int(last)] is None:
                target[int(last)] = value
        elif target.get(last, 0) is None:
            target[last] = value
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        raise GeodriftError(f"nonfinite note: {pointer!r} leads nowhere in the document; it was edited since "
                            "geodrift wrote it") from None


def from_jsonable(cls: Any, data: Any, where: str = "") -> Any:
    """Rebuild ``cls`` (a dataclass, or a type hint: ``list[Row]``, ``dict[str, Space]``, ``tuple[int, ...]``)
    from what ``dataclasses.asdict`` and JSON made of it; keys a dataclass does not have are ignored.

    Raises:
        GeodriftError: a required field missing, or a value of the wrong shape, naming where.

    Example:
        >>> @dataclasses.dataclass
        ... class Row:
        ...     name: str
        ...     shape: tuple[int, ...]
        >>> from_jsonable(list[Row], [{"name": "w", "shape": [2, 3], "added_later": 1}])
        [Row(name='w', shape=(2, 3))]
    """
    if data is None:
        return None
    origin = typing.get_origin(cls)
    if dataclasses.is_dataclass(cls) and isinstance(cls, type):
        if not isinstance(data, Mapping):
            raise GeodriftError(f"{where or cls.__name__}: expected an object, found {type(data).__name__}")
        hints = _hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                values[f.name] = from_jsonable(hints.get(f.name, Any), data[f.name], f"{where}/{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise GeodriftError(f"{where or '/'}: lacks {f.name!r}, which a {cls.__name__} has")
        return cls(**values)
    if origin in (list, tuple) and isinstance(data, list):
        args = typing.get_args(cls)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return tuple(from_jsonable(t, x, f"{where}/{i}") for i, (t, x) in enumerate(zip(args, data, strict=False)))
        item = args[0] if args else Any
        made = [from_jsonable(item, x, f"{where}/{i}") for i, x in enumerate(data)]
        return tuple(made) if origin is tuple else made
    if origin is dict and isinstance(data, Mapping):
        value = typing.get_args(cls)[1] if typing.get_args(cls) else Any
        return {k: from_jsonable(value, v, f"{where}/{k}") for k, v in data.items()}
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(cls):
            if arm is type(None):
                continue
            try:
                return from_jsonable(arm, data, where)
            except (GeodriftError, TypeError):
                continue
        return data
    if cls is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # a hint naming a type only imported for type checking: read those fields as they are
        return {}
