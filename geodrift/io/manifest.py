"""The manifest of a folder geodrift writes into: which files there geodrift wrote, unchanged since.

A folder holds ``.geodrift-written`` when geodrift manages it (an ``--out`` folder, a ``--save``
folder, a folder an output file went to). Every atomic write (:mod:`geodrift.io.atomic`) appends one
JSON line - path relative to the folder, size, mtime, sha256 - to the manifest of the nearest folder
above the file that has one, from any process (a sweep's workers too), under an exclusive lock. A
file is geodrift's when that manifest lists it with its current size and either its mtime or its
content hash (a copied folder keeps its files). :mod:`geodrift.io.outdir` builds the output-folder
policy on this.

Example:
    >>> managed_root("/") is None
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

MANIFEST = ".geodrift-written"
# What an atomic write killed by SIGKILL leaves (tempfile.mkstemp's 8 random characters): geodrift's.
TEMP_LEFTOVER = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")
# Output files the command line checked (geodrift.cli.checks.check_outputs), absolute: see expect_output.
_EXPECTED: set[Path] = set()

Entry = dict[str, object]


def record_written(path: str | Path) -> None:
    """List ``path`` in the manifest of the nearest folder above it that has one (no manifest: nothing).

    Called by every atomic write once the file is in place; appends one line under an exclusive
    lock, so the processes of a sweep can record into one folder at the same time. An output file
    the command line expects (:func:`expect_output`) gets a manifest in its own folder first.
    """
    path = Path(path)
    root = managed_root(path)
    if root is None and path.absolute() in _EXPECTED:
        root = create(path.parent).absolute()
    if root is None or path.name == MANIFEST:
        return
    info = path.stat()
    entry = {"path": path.absolute().relative_to(root).as_posix(), "size": info.st_size, "mtime_ns": info.st_mtime_ns,
             "sha256": _sha256(path)}
    _append(root / MANIFEST, json.dumps(entry) + "\n")


def expect_output(path: str | Path) -> None:
    """Mark ``path`` as an output file of this command: once written, it is recorded in a manifest (created in
    its folder if no folder above has one), so that a later run may replace it - and nothing else there.
    Nothing is created before the write."""
    _EXPECTED.add(Path(path).absolute())


def managed_root(path: str | Path) -> Path | None:
    """The nearest folder above ``path`` holding a manifest, or None.

    Example:
        >>> managed_root("/nonexistent-folder/x.json") is None
        True
    """
    for folder in Path(path).absolute().parents:
        if (folder / MANIFEST).is_file():
            return folder
    return None


def create(folder: str | Path) -> Path:
    """Create ``folder`` and an empty manifest in it if it has none; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(folder / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except FileExistsError:
        pass
    return folder


def entries(folder: Path) -> dict[str, Entry]:
    """The manifest's last line per path; unreadable lines are skipped (their files count as foreign)."""
    listed: dict[str, Entry] = {}
    manifest = folder / MANIFEST
    if not manifest.is_file() or manifest.is_symlink():
        return listed
    with open(manifest, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                listed[entry["path"]] = entry
    return listed


def is_owned(path: Path, entry: Entry) -> bool:
    """``path`` is the file ``entry`` describes: a regular file of that size, with its mtime or its content."""
    try:
        info = path.lstat()
    except OSError:
        return False
    if not path.is_file() or path.is_symlink() or info.st_size != entry.get("size"):
        return False
    return info.st_mtime_ns == entry.get("mtime_ns") or _sha256(path) == entry.get("sha256")


class Manifests:
    """Each manifest read once per walk: does it list a file as written by geodrift, unchanged since?"""

    def __init__(self) -> None:
        self._read: dict[Path, dict[str, Entry]] = {}

    def owns(self, path: Path, root: Path | None) -> bool:
        """``path`` is geodrift's by the manifest of ``root`` (the nearest managed folder above it)."""
        if path.is_symlink() or not path.is_file():
            return False
        if path.name == MANIFEST or TEMP_LEFTOVER.fullmatch(path.name):
            return True  # geodrift's bookkeeping, an atomic write's leftover
        if root is None:
            return False
        if root not in self._read:
            self._read[root] = entries(root)
        entry = self._read[root].get(path.absolute().relative_to(root.absolute()).as_posix())
        return entry is not None and is_owned(path, entry)


def _append(manifest: Path, line: str) -> None:
    import fcntl

    fd = os.open(manifest, os.O_WRONLY | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
