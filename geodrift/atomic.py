"""Atomic file writes, and the one JSON dialect every geodrift file uses.

Writes go to a temporary file in the target folder, then are renamed over the target: a crash or
an error midway leaves the old file (or nothing) in place, never a half-written one. The finished
file gets the mode any Unix tool would give a new file, ``0o666 & ~umask`` (0644 under the usual
umask 022), not the temporary file's private 0600.

JSON is strict (RFC 8259): NaN and +-Infinity, which strict parsers reject, are written as ``null``
and listed, with the reason, under a top-level ``"nonfinite"`` note. Every JSON document geodrift
writes starts with ``schema_version`` and ``kind`` (:func:`document`); docs/output-schema.md
describes each kind field by field.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError

# "MAJOR.MINOR": a MINOR bump only adds fields; a MAJOR bump renames, removes or changes one.
SCHEMA_VERSION = "1.0"
# Top-level keys of a document that are about the file, not the payload (see :func:`payload_of`).
ENVELOPE_KEYS = ("schema_version", "kind", "nonfinite")
NONFINITE_NOTE = (
    "NaN and +-Infinity are not valid JSON (RFC 8259), so these values were written as null. NaN means the "
    "number could not be computed (e.g. a standard deviation over a single seed, a mean over nothing); "
    "+-Infinity means it overflowed or divided by zero (e.g. a z-score against a null without spread, "
    "weights beyond float32's range). 'path' is a JSON Pointer (RFC 6901) to each value, 'was' its value."
)
_NONFINITE_LISTED = 100  # paths listed in the note; 'count' has them all


# Temporary files of atomic writes in progress: a signal handler (geodrift.signals) removes them
# before the process exits, so an interrupted write never leaves a ``.name.xxxx.tmp`` behind.
_PENDING: set[Path] = set()
# The bookkeeping of those files (create + register, unregister + remove) must not be cut in half by
# an interrupt - a file created but not yet registered would outlive the handler's clean-up. While it
# runs, geodrift.signals' handler only records the signal (:func:`defer_signal`); it is re-raised after.
_HOLD: dict[str, int | None] = {"depth": 0, "signum": None}


@contextmanager
def _signals_held() -> Iterator[None]:
    _HOLD["depth"] = int(_HOLD["depth"] or 0) + 1
    try:
        yield
    finally:
        _HOLD["depth"] = int(_HOLD["depth"] or 0) - 1
        signum = _HOLD["signum"]
        if signum is not None and not _HOLD["depth"]:
            _HOLD["signum"] = None
            signal.raise_signal(signum)  # the handler runs again, now outside the bookkeeping


def defer_signal(signum: int) -> bool:
    """Record ``signum`` and return True while temp-file bookkeeping is in progress (else False).

    The signal handler of :mod:`geodrift.signals` calls it first; a deferred signal is raised again
    as soon as the bookkeeping ends, so an interrupt never leaves an unregistered temporary file.
    """
    if _HOLD["depth"]:
        _HOLD["signum"] = signum
        return True
    return False


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success give it the umask's mode and rename it onto ``target``.

    An OS error while writing (permission denied, disk full, a folder in the way) is raised as a
    GeodriftError that names ``target`` - the user's path - never the temporary file.

    Example:
        >>> with atomic_path("out.png") as tmp:  # doctest: +SKIP
        ...     figure.savefig(tmp, format="png")
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _signals_held():
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            tmp = Path(name)
            _PENDING.add(tmp)
    except OSError as error:
        raise GeodriftError(_write_error(target, error)) from None
    try:
        os.close(fd)
        try:
            yield tmp
            os.chmod(tmp, 0o666 & ~current_umask())
            os.replace(tmp, target)
        except OSError as error:
            raise GeodriftError(_write_error(target, error)) from None
    finally:
        with _signals_held():
            _PENDING.discard(tmp)
            if tmp.exists():
                tmp.unlink()


def check_writable(target: str | Path, option: str) -> Path:
    """Fail now, before any work, if ``target`` could not be written atomically later.

    Creates (and removes) a probe file in the target's folder when it exists; when it does not
    yet exist, checks that its nearest existing ancestor is a folder it may create folders in. Nothing
    is created or left behind either way.

    Args:
        target: the output path the user gave.
        option: the option that named it (``--json-out``), for the message.

    Returns:
        ``target`` as a Path.

    Raises:
        GeodriftError: naming the option and the user's path: a folder where a file is expected,
            a file where a folder is expected, or a folder without write permission.
    """
    target = Path(target).expanduser()
    if target.is_dir():
        raise GeodriftError(f"{option} {target}: is a folder; give a file name inside it")
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise GeodriftError(f"{option} {target}: {ancestor} is not a folder; choose another path")
    if ancestor != target.parent:
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise GeodriftError(f"{option} {target}: cannot create folders in {ancestor} (permission denied)")
        return target
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        os.unlink(name)
    except OSError as error:
        raise GeodriftError(f"{option} {_write_error(target, error)}") from None
    return target


def remove_pending_temp_files() -> list[Path]:
    """Delete the temporary files of atomic writes still in progress (the signal handler calls it).

    Returns:
        The paths removed.
    """
    removed = []
    for tmp in list(_PENDING):
        try:
            tmp.unlink()
            removed.append(tmp)
        except OSError:
            pass
        _PENDING.discard(tmp)
    return removed


def _write_error(target: Path, error: OSError) -> str:
    reason = error.strerror or str(error)
    return f"{target}: cannot write here ({reason}); check the path, its permissions and free space"


def current_umask() -> int:
    """The process's umask, read without changing it where the OS allows (Linux ``/proc``).

    Example:
        >>> 0 <= current_umask() <= 0o777
        True
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: read it by setting it, then put it back at once
    os.umask(mask)
    return mask


def write_text(target: str | Path, text: str) -> None:
    """Atomically write ``text`` to ``target``."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def document(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with ``schema_version`` and ``kind`` first: how every JSON file of geodrift starts.

    Example:
        >>> document("proofs", {"seed": 0})
        {'schema_version': '1.0', 'kind': 'proofs', 'seed': 0}
    """
    clash = [k for k in ENVELOPE_KEYS if k in payload]
    if clash:
        raise ValueError(f"document {kind!r}: the payload already has {clash}; nest it under a key of its own")
    return {"schema_version": SCHEMA_VERSION, "kind": kind, **payload}


def payload_of(doc: dict[str, Any]) -> dict[str, Any]:
    """A document without its envelope keys (:data:`ENVELOPE_KEYS`), for ``from_dict`` readers."""
    return {k: v for k, v in doc.items() if k not in ENVELOPE_KEYS}


def to_json(payload: Any, indent: int | None = None) -> str:
    """Strict JSON: NaN and +-Infinity become ``null``, listed under a top-level ``"nonfinite"`` note.

    Numbers of other types (numpy scalars) are written as numbers; other unknown objects as strings.

    Example:
        >>> to_json({"std": float("nan")})  # doctest: +ELLIPSIS
        '{"std": null, "nonfinite": {"note": "NaN and ...", "count": 1, "values": [{"path": "/std", "was": "NaN"}]}}'
    """
    replaced: list[dict[str, str]] = []
    clean = _finite_or_none(payload, "", replaced)
    if replaced and isinstance(clean, dict):
        clean["nonfinite"] = {"note": NONFINITE_NOTE, "count": len(replaced), "values": replaced[:_NONFINITE_LISTED]}
    return json.dumps(clean, indent=indent, allow_nan=False, default=str)


def write_json(target: str | Path, payload: Any) -> None:
    """Atomically write ``payload`` as indented strict JSON (see :func:`to_json`)."""
    write_text(target, to_json(payload, indent=2) + "\n")


@contextmanager
def atomic_folder(target: str | Path, option: str) -> Iterator[Path]:
    """Yield a temporary sibling folder of ``target``; on success rename it to ``target``.

    ``target`` must not exist or be an empty folder (geodrift never writes over files it did not
    create); on an error the temporary folder and everything in it are removed.

    Raises:
        GeodriftError: naming ``option`` and ``target`` when it holds files or cannot be written.
    """
    import shutil

    target = Path(target).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise GeodriftError(f"{option} {target}: already exists and is not an empty folder; choose a new folder")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as error:
        raise GeodriftError(f"{option} {_write_error(target, error)}") from None
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~current_umask())
        if target.is_dir():
            target.rmdir()
        os.replace(tmp, target)
    except OSError as error:
        raise GeodriftError(f"{option} {_write_error(target, error)}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_with(target: str | Path, writer: Callable[[Path], None]) -> None:
    """Atomically create ``target`` by calling ``writer(tmp_path)`` (e.g. ``torch.save``, ``savefig``)."""
    with atomic_path(target) as tmp:
        writer(tmp)


def _finite_or_none(value: Any, path: str, replaced: list[dict[str, str]]) -> Any:
    # Walk the payload; record a JSON Pointer for every non-finite float written as null.
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            replaced.append({"path": path or "/", "was": "NaN" if number != number else
                             ("Infinity" if number > 0 else "-Infinity")})
            return None
        return number
    if isinstance(value, dict):
        return {k: _finite_or_none(v, f"{path}/{_pointer(str(k))}", replaced) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v, f"{path}/{i}", replaced) for i, v in enumerate(value)]
    return value


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
