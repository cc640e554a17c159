"""Atomic file writes: write to a temporary file in the target folder, then rename over the target.

A crash or an error midway leaves the old file (or nothing) in place, never a half-written one.
"""

from __future__ import annotations

import json
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


def write_json(target: str | Path, payload: Any) -> None:
    """Atomically write ``payload`` as indented JSON (NaN is written as null)."""
    write_text(target, json.dumps(_nan_to_none(payload), indent=2, sort_keys=False) + "\n")


def write_with(target: str | Path, writer: Callable[[Path], None]) -> None:
    """Atomically create ``target`` by calling ``writer(tmp_path)`` (e.g. ``torch.save``, ``savefig``)."""
    with atomic_path(target) as tmp:
        writer(tmp)


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(v) for v in value]
    return value
