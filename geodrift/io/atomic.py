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

import errno
import io
import json
import math
import numbers
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from geodrift.errors import GeodriftError
from geodrift.io import signals
from geodrift.io.manifest import (
    Manifests,
    create,
    is_expected,
    list_token,
    make_folders,
    managed_root,
    record_folder,
    record_written,
    temp_prefix,
)

# "MAJOR.MINOR": a MINOR bump only adds fields; a MAJOR bump renames, removes or changes one.
SCHEMA_VERSION = "1.2"
# Top-level keys of a document that are about the file, not the payload (see :func:`payload_of`).
ENVELOPE_KEYS = ("schema_version", "kind", "nonfinite")
NONFINITE_NOTE = (
    "NaN and +-Infinity are not valid JSON (RFC 8259), so these values were written as null. NaN means the "
    "number could not be computed (e.g. a standard deviation over a single seed, a mean over nothing); "
    "+-Infinity means it overflowed or divided by zero (e.g. a z-score against a null without spread, "
    "weights beyond float32's range). 'path' is a JSON Pointer (RFC 6901) to each value, 'was' its value."
)


# Temporary files of atomic writes in progress: a signal handler (geodrift.io.signals) removes them
# before the process exits, so an interrupted write never leaves a ``.name.xxxx.tmp`` behind.
_PENDING: set[Path] = set()
# The bookkeeping of those files (create + register, unregister + remove) must not be cut in half by
# an interrupt - a file created but not yet registered would outlive the handler's clean-up. While it
# runs, geodrift.io.signals' handler only records the signal (signals.held); it is raised after.
_signals_held = signals.held


class _OutputSet:
    """An output set being written (:func:`output_set`): its files wait, as temporary files, to be renamed together;
    ``stale`` are the set's members this run does not write (:func:`retire`)."""

    def __init__(self) -> None:
        self.renames: list[tuple[Path, Path]] = []
        self.stale: list[Path] = []


_BATCH: list[_OutputSet] = []


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success give it the umask's mode and rename it onto ``target``.

    An OS error while writing (permission denied, disk full, a folder in the way) is raised as a
    GeodriftError that names ``target`` - the user's path - never the temporary file; so is a
    writer's own error that reports one (torch's and safetensors' writers, see :func:`write_with`).
    A file written below a folder with a manifest is recorded there (:mod:`geodrift.io.manifest`).

    Example:
        >>> with atomic_path("out.txt") as tmp:  # doctest: +SKIP
        ...     _ = tmp.write_text("complete or absent")
    """
    target = Path(target)
    try:
        _prepare_folder(target)
        with _signals_held():
            fd, name = tempfile.mkstemp(prefix=temp_prefix(target.name), suffix=".tmp", dir=target.parent)
            tmp = Path(name)
            _PENDING.add(tmp)
    except OSError as error:
        raise GeodriftError(_write_error(target, error)) from None
    batch = _BATCH[-1].renames if _BATCH else None
    try:
        os.close(fd)
        try:
            yield tmp
            os.chmod(tmp, 0o666 & ~current_umask())
            if batch is not None:  # renamed with the rest of the set (output_set)
                batch.append((tmp, target))
                return
            os.replace(tmp, target)
            record_written(target)
        except GeodriftError:
            raise
        except Exception as error:
            cause = os_error_of(error)
            if cause is None:
                raise
            raise GeodriftError(_write_error(target, cause)) from None
    finally:
        if batch is None or (tmp, target) not in batch:
            with _signals_held():
                _PENDING.discard(tmp)
                if tmp.exists():
                    tmp.unlink()


@contextmanager
def output_set() -> Iterator[None]:
    """Replace a run's output files as a whole: every atomic write inside the block goes to its temporary file,
    and all of them are renamed into place together when the block ends, with signals held - and the set's
    members this run did not write (:func:`retire`) are removed then, each only if the manifest proves it
    geodrift's.

    An error or an interrupt before the end leaves every earlier file as it was (the previous run's JSON,
    CSV and figures stay one set) and removes the temporary files; a new set never lies beside half of an
    old one, nor beside an old member it did not replace.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> try:
        ...     with output_set():
        ...         write_text(folder / "a.txt", "new")
        ...         raise KeyboardInterrupt
        ... except KeyboardInterrupt:
        ...     pass
        >>> sorted(p.name for p in folder.iterdir())
        []
    """
    batch = _OutputSet()
    _BATCH.append(batch)
    try:
        yield
        _BATCH.pop()
        with _signals_held():
            for tmp, target in batch.renames:
                try:
                    os.replace(tmp, target)
                except OSError as error:
                    raise GeodriftError(_write_error(target, error)) from None
                _PENDING.discard(tmp)
                record_written(target)
            _remove_stale(batch)
    finally:
        if _BATCH and _BATCH[-1] is batch:
            _BATCH.pop()
        with _signals_held():
            for tmp, _ in batch.renames:
                _PENDING.discard(tmp)
                if tmp.exists():
                    tmp.unlink()


def retire(paths: Iterable[str | Path]) -> None:
    """Inside :func:`output_set`: members of the set this run does not write (an earlier run's ``f_gauge.png``
    beside a scan without ``--full``). When the set is renamed into place, each one the manifest proves
    geodrift's is removed; a user's file of that name is left alone.

    Raises:
        RuntimeError: outside an :func:`output_set` block.
    """
    if not _BATCH:
        raise RuntimeError("retire() is for the members of an output_set")
    _BATCH[-1].stale.extend(Path(p) for p in paths)


def _remove_stale(batch: _OutputSet) -> None:
    written = {target.absolute() for _, target in batch.renames}
    manifests = Manifests()
    for path in batch.stale:
        if path.absolute() not in written and manifests.owns(path, managed_root(path)):
            try:
                path.unlink()
            except OSError as error:
                raise GeodriftError(_write_error(path, error)) from None


@contextmanager
def atomic_folder(target: str | Path, option: str) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``target``; on success it replaces ``target`` (old contents deleted).

    The swap (old folder renamed aside, new one renamed into place) runs with signals held, so an
    interrupt leaves either the old folder or the new one at ``target``, never neither; an error or
    a signal while the folder is being written removes it and leaves ``target`` as it was.
    Callers check first that ``target`` may be replaced (:func:`geodrift.io.outdir.replace_folder`).

    Raises:
        GeodriftError: an OS error, naming ``option`` and ``target``, never the temporary folder.
    """
    target = Path(target)
    try:
        _prepare_folder(target)
        with _signals_held():
            tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target.name), suffix=".tmp", dir=target.parent))
            _PENDING.add(tmp)
    except OSError as error:
        raise GeodriftError(f"{option} {_write_error(target, error)}") from None
    old: Path | None = None
    try:
        try:
            yield tmp
        except GeodriftError as error:
            raise GeodriftError(f"{option} {str(error).replace(str(tmp), str(target))}") from None
        except OSError as error:
            raise GeodriftError(f"{option} {_write_error(target, error)}") from None
        try:
            os.chmod(tmp, 0o777 & ~current_umask())
            with _signals_held():
                if target.exists():
                    old = Path(tempfile.mkdtemp(prefix=temp_prefix(target.name), suffix=".old", dir=target.parent))
                    _PENDING.add(old)
                    os.replace(target, old)  # an empty folder is replaced by the old one
                os.replace(tmp, target)
                record_folder(target)
        except OSError as error:
            raise GeodriftError(f"{option} {_write_error(target, error)}") from None
    finally:
        with _signals_held():
            for leftover in (tmp, old):
                if leftover is not None:
                    _PENDING.discard(leftover)
                    _remove(leftover)


def os_error_of(error: BaseException) -> OSError | None:
    """The OS error behind a writer's exception: an OSError itself, or one a native writer reported as text.

    torch's zip writer raises ``RuntimeError('[enforce fail at inline_container.cc] ...')`` and
    keeps the OS error only in the file object's ``write`` (see :func:`write_with`); safetensors
    raises ``SafetensorError('... I/O error: No space left on device (os error 28)')``.

    Example:
        >>> os_error_of(RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")).errno
        28
    """
    if isinstance(error, OSError):
        return error
    seen = getattr(error, "geodrift_os_error", None)
    if isinstance(seen, OSError):
        return seen
    match = re.search(r"\(os error (\d+)\)", str(error))
    if match:
        number = int(match.group(1))
        return OSError(number, os.strerror(number))
    return None


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
    _probe(target.parent, target.name, PROBE_FILE_BYTES, option, target)
    return target


# Space an output file (a report, a figure) and an output folder (runs, checkpoints) must find free now,
# before the work: a full disk is refused before the first status line, not after the run.
PROBE_FILE_BYTES = 64 << 10
PROBE_FOLDER_BYTES = 1 << 20


def check_free_space(folder: str | Path, option: str, size: int = PROBE_FOLDER_BYTES) -> None:
    """Fail now if ``folder`` (which exists) cannot take ``size`` bytes: a full disk is one line before any work.

    Raises:
        GeodriftError: naming the option and the folder (``No space left on device``).
    """
    _probe(Path(folder), "space", size, option, Path(folder))


def _probe(folder: Path, prefix: str, size: int, option: str, named: Path) -> None:
    # A temporary file in ``folder`` with ``size`` bytes allocated, then removed - with signals held, so an interrupt
    # never leaves it behind; an OS error names ``named``.
    try:
        list_token(folder)
        with _signals_held():
            fd, name = tempfile.mkstemp(prefix=temp_prefix(prefix), suffix=".tmp", dir=folder)
            try:
                _reserve(fd, size)
            finally:
                os.close(fd)
                os.unlink(name)
    except OSError as error:
        raise GeodriftError(f"{option} {_write_error(named, error)}") from None


def _reserve(fd: int, size: int) -> None:
    # Allocate ``size`` bytes for real (ENOSPC now, not at the write); a file system without fallocate passes.
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return
        raise


def _prepare_folder(target: Path) -> None:
    # The target's folder (each folder created listed in the manifest above it), the manifest an expected output
    # gets, and this run's token listed there - all before the first temporary name exists.
    make_folders(target.parent)
    if is_expected(target) and managed_root(target) is None:
        try:
            create(target.parent)
        except FileExistsError:  # the user's file of the manifest's name: nothing recorded, nothing changed
            pass
    list_token(target.parent)


def remove_pending_temp_files() -> list[Path]:
    """Delete the temporary files and folders of atomic writes still in progress (the signal handler calls it).

    Returns:
        The paths removed.
    """
    removed = []
    for tmp in list(_PENDING):
        if _remove(tmp):
            removed.append(tmp)
        _PENDING.discard(tmp)
    return removed


def _remove(path: Path) -> bool:
    # A temporary file, or a temporary folder and everything in it; False when it was already gone.
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        return True
    except OSError:
        return False


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
        {'schema_version': '1.2', 'kind': 'proofs', 'seed': 0}
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
        # every one listed: a reader puts each back (geodrift.io.documents.restore_nonfinite)
        clean["nonfinite"] = {"note": NONFINITE_NOTE, "count": len(replaced), "values": replaced}
    return json.dumps(clean, indent=indent, allow_nan=False, default=str)


def write_json(target: str | Path, payload: Any) -> None:
    """Atomically write ``payload`` as indented strict JSON (see :func:`to_json`)."""
    write_text(target, to_json(payload, indent=2) + "\n")


def write_with(target: str | Path, writer: Callable[[Path], None]) -> None:
    """Atomically create ``target`` by calling ``writer(tmp_path)`` (e.g. ``savefig``, safetensors' ``save_file``)."""
    with atomic_path(target) as tmp:
        writer(tmp)


def write_stream(target: str | Path, writer: Callable[[Any], None]) -> None:
    """Atomically create ``target`` by calling ``writer(file)`` on an open binary file (e.g. ``torch.save``).

    A writer that turns the file's OSError into its own exception (torch's zip writer does) still
    ends in the one-line error naming ``target``: the file object keeps the OS error it raised.

    Example:
        >>> write_stream("state.pt", lambda f: torch.save(state, f))  # doctest: +SKIP
    """
    with atomic_path(target) as tmp, open(tmp, "wb") as raw:
        stream = _RememberingFile(raw)
        try:
            writer(stream)
        except Exception as error:
            interrupt = _interrupt_behind(error)
            if interrupt is not None:  # a signal inside the writer's callback, wrapped by the writer: re-raise it
                raise interrupt from None
            if stream.os_error is not None and not isinstance(error, OSError):
                error.geodrift_os_error = stream.os_error  # type: ignore[attr-defined]
            raise


def _interrupt_behind(error: BaseException) -> BaseException | None:
    # geodrift.io.signals.Interrupted (a BaseException) raised in the file's write and replaced by the writer's
    # own error (torch's "[enforce fail at inline_container.cc]"): found in the exception's context chain.
    seen = error.__context__ or error.__cause__
    for _ in range(16):
        if seen is None:
            return None
        if not isinstance(seen, Exception):
            return seen
        seen = seen.__context__ or seen.__cause__
    return None


class _RememberingFile(io.RawIOBase):
    """A binary file that remembers the OSError of a failed write before re-raising it."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw
        self.os_error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            return self._raw.write(data)
        except OSError as error:
            self.os_error = error
            raise

    def flush(self) -> None:
        try:
            self._raw.flush()
        except OSError as error:
            self.os_error = error
            raise


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
