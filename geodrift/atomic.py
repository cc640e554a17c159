"""Atomic file writes: write to a temporary file in the target folder, then rename over the target.

A crash or an error midway leaves the old file (or nothing) in place, never a half-written one.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success rename it onto ``target``.

    Example:
        >>> with atomic_path("out.png") as tmp:  # doctest: +SKIP
        ...     figure.savefig(tmp, format="png")
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(target: str | Path, text: str) -> None:
    """Atomically write ``text`` to ``target``."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def to_json(payload: Any, indent: int | None = None) -> str:
    """Strict JSON (RFC 8259): NaN and +-Infinity, which strict parsers reject, become ``null``."""
    return json.dumps(_finite_or_none(payload), indent=indent, allow_nan=False, default=str)


def write_json(target: str | Path, payload: Any) -> None:
    """Atomically write ``payload`` as indented strict JSON (see :func:`to_json`)."""
    write_text(target, to_json(payload, indent=2) + "\n")


def write_with(target: str | Path, writer: Callable[[Path], None]) -> None:
    """Atomically create ``target`` by calling ``writer(tmp_path)`` (e.g. ``torch.save``, ``savefig``)."""
    with atomic_path(target) as tmp:
        writer(tmp)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value
