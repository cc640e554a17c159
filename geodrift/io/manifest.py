"""The manifest of a folder geodrift writes into: which files and folders there geodrift made, unchanged since.

A folder holds ``.geodrift-written`` when geodrift manages it (an ``--out`` folder, a ``--save`` folder, a
folder an output file went to). Its first line is :data:`HEADER`; then one JSON line per thing geodrift made
below it, appended by any process (a sweep's workers too) under an exclusive lock:

- a file an atomic write put in place (:mod:`geodrift.io.atomic`): path relative to the folder, size, mtime,
  sha256;
- a folder geodrift created (``{"folder": "runs/seed42"}``);
- the random token of a run (``{"token": "..."}``), recorded before the run makes its first temporary file
  there: a temporary name holds it (``.report.json.gd-<token>.<8 characters>.tmp``), so a file left by a run
  killed midway is known to be geodrift's by that token - never by a name a user could also have chosen.

A file is geodrift's when the nearest manifest above it lists it with its current size and either its mtime or
its content hash (a copied folder keeps its files), or when it bears a token that manifest lists; a folder is
geodrift's when the manifest above it lists it (or it bears a listed token). Anything else - a user's file or
folder, whatever its name, a file edited since, a symbolic link, a ``.geodrift-written`` that is not a manifest
- is the user's. :mod:`geodrift.io.outdir` builds the output-folder policy on this.

Example:
    >>> managed_root("/") is None
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from geodrift.io.signals import held

MANIFEST = ".geodrift-written"
HEADER = json.dumps({"geodrift_manifest": 2})
# This process's token; temporary names hold it (temp_prefix) and each manifest above them lists it first.
TOKEN = secrets.token_hex(8)
# A temporary file or folder of an atomic write (the OS adds 8 random characters): geodrift's if its token is listed.
TEMP_NAME = re.compile(r"\..*\.gd-([0-9a-f]{16})\.[a-z0-9_]{8}\.(?:tmp|old)", re.DOTALL)
# A manifest written before the header existed: every line a file entry (read, then upgraded by outdir.manage).
_LEGACY_KEYS = {"path": str, "size": int, "mtime_ns": int, "sha256": str}
# Output files the command line checked (geodrift.cli.checks.check_outputs), absolute: see expect_output.
_EXPECTED: set[Path] = set()
# Manifests this process's token is listed in: (folder, device, inode) of the manifest.
_TOKEN_LISTED: set[tuple[Path, int, int]] = set()

Entry = dict[str, object]


@dataclass
class Listing:
    """What one manifest lists: file entries by relative path, created folders, run tokens."""

    files: dict[str, Entry] = field(default_factory=dict)
    folders: set[str] = field(default_factory=set)
    tokens: set[str] = field(default_factory=set)


def temp_prefix(name: str) -> str:
    """The start of a temporary name for ``name`` (``.report.json.gd-<token>.``): see :data:`TEMP_NAME`.

    Example:
        >>> TEMP_NAME.fullmatch(temp_prefix("r.json") + "abcd_123.tmp") is not None
        True
    """
    return f".{name}.gd-{TOKEN}."


def is_manifest(path: str | Path) -> bool:
    """``path`` is a manifest geodrift wrote: a regular file (not a link) starting with :data:`HEADER`, or a
    manifest of an earlier geodrift (every line a file entry). A user's file of that name is not one."""
    path = Path(path)
    try:
        if path.is_symlink() or not path.is_file():
            return False
        with open(path, encoding="utf-8", errors="replace") as lines:
            first = lines.readline()
            if first.rstrip("\n") == HEADER:
                return True
            rest = [first, *lines] if first else []
    except OSError:
        return False
    # a legacy manifest a newer geodrift has listed its run token in (list_token appends, it never rewrites) is one
    return any(_legacy_entry(line) for line in rest) and all(_legacy_entry(line) or _token_entry(line)
                                                             for line in rest)


def _token_entry(line: str) -> bool:
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and set(entry) == {"token"} and isinstance(entry["token"], str)


def _legacy_entry(line: str) -> bool:
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and set(entry) == set(_LEGACY_KEYS) and all(
        isinstance(entry[k], t) and not isinstance(entry[k], bool) for k, t in _LEGACY_KEYS.items())


def record_written(path: str | Path) -> None:
    """List ``path`` in the manifest of the nearest folder above it that has one (no manifest: nothing).

    Called by every atomic write once the file is in place; appends one line under an exclusive
    lock, so the processes of a sweep can record into one folder at the same time. An output file
    the command line expects (:func:`expect_output`) gets a manifest in its own folder first.
    """
    path = Path(path)
    root = managed_root(path)
    if root is None and path.absolute() in _EXPECTED:
        try:
            root = create(path.parent).absolute()
        except FileExistsError:  # the user's file of the manifest's name: left alone, nothing recorded
            return
    if root is None or path.name == MANIFEST:
        return
    info = path.stat()
    entry = {"path": _relative(path, root), "size": info.st_size, "mtime_ns": info.st_mtime_ns,
             "sha256": _sha256(path)}
    _append(root / MANIFEST, json.dumps(entry) + "\n")


def record_folder(path: str | Path) -> None:
    """List the folder ``path``, which geodrift has just created, in the manifest above it (none: nothing)."""
    path = Path(path)
    root = managed_root(path)
    if root is not None:
        _append(root / MANIFEST, json.dumps({"folder": _relative(path, root)}) + "\n")


def make_folders(folder: str | Path) -> Path:
    """``mkdir -p folder``, listing each folder it creates in the manifest above it (a later ``--force`` may
    remove those once empty, and never a folder the user made). Returns ``folder``."""
    folder = Path(folder)
    missing: list[Path] = []
    for step in [folder, *folder.parents]:
        if step.exists() or step.is_symlink():
            break
        missing.append(step)
    for step in reversed(missing):
        with held():  # made and listed, or neither: an interrupt never leaves a folder no manifest lists
            try:
                step.mkdir()
            except FileExistsError:
                continue  # another process made it first: not this run's
            record_folder(step)
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)  # raises the OS error (a file in the way)
    return folder


def list_token(folder: str | Path) -> None:
    """List this process's :data:`TOKEN` in the manifest above a temporary name about to be made in ``folder``
    (before the name exists, so a run killed at any moment leaves only files a manifest can prove are geodrift's)."""
    root = managed_root(Path(folder) / MANIFEST)
    if root is None:
        return
    manifest = root / MANIFEST
    try:
        info = manifest.stat()
    except OSError:
        return
    key = (root.absolute(), info.st_dev, info.st_ino)
    if key not in _TOKEN_LISTED:
        _append(manifest, json.dumps({"token": TOKEN}) + "\n")
        _TOKEN_LISTED.add(key)


def expect_output(path: str | Path) -> None:
    """Mark ``path`` as an output file of this command: once written, it is recorded in a manifest (created in
    its folder if no folder above has one), so that a later run may replace it - and nothing else there.
    Nothing is created before the write."""
    _EXPECTED.add(Path(path).absolute())


def is_expected(path: str | Path) -> bool:
    """``path`` was marked by :func:`expect_output`."""
    return Path(path).absolute() in _EXPECTED


def managed_root(path: str | Path) -> Path | None:
    """The nearest folder above ``path`` holding a manifest, or None.

    Example:
        >>> managed_root("/nonexistent-folder/x.json") is None
        True
    """
    for folder in Path(path).absolute().parents:
        if (folder / MANIFEST).is_file() and is_manifest(folder / MANIFEST):
            return folder
    return None


def create(folder: str | Path) -> Path:
    """Create ``folder`` and a manifest in it if it has none; returns the folder.

    Raises:
        OSError: a file named like the manifest that is not one is in the way (FileExistsError).
    """
    folder = make_folders(folder)
    manifest = folder / MANIFEST
    with held():  # created with its header, or not at all: an empty one would be nobody's
        try:
            fd = os.open(manifest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            if not is_manifest(manifest):
                raise FileExistsError(17, "a file named like geodrift's manifest is there and is not one",
                                      str(manifest)) from None
            return folder
        try:
            os.write(fd, (HEADER + "\n").encode())
        finally:
            os.close(fd)
    return folder


def listing(folder: Path) -> Listing:
    """The manifest of ``folder``: each path's last file entry, the folders, the tokens (unreadable lines are
    skipped: their files count as the user's)."""
    listed = Listing()
    manifest = folder / MANIFEST
    if not is_manifest(manifest):
        return listed
    with open(manifest, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            if isinstance(entry.get("path"), str):
                listed.files[entry["path"]] = entry
            elif isinstance(entry.get("folder"), str):
                listed.folders.add(entry["folder"])
            elif isinstance(entry.get("token"), str):
                listed.tokens.add(entry["token"])
    return listed


def entries(folder: Path) -> dict[str, Entry]:
    """The manifest's last file entry per path (see :func:`listing`)."""
    return listing(folder).files


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
    """Each manifest read once per walk: does it list a file or a folder as geodrift's, unchanged since?"""

    def __init__(self) -> None:
        self._read: dict[Path, Listing] = {}

    def listing(self, root: Path) -> Listing:
        """The manifest of ``root``, read once."""
        if root not in self._read:
            self._read[root] = listing(root)
        return self._read[root]

    def owns(self, path: Path, root: Path | None) -> bool:
        """The file ``path`` is geodrift's by the manifest of ``root`` (the nearest managed folder above it)."""
        if path.is_symlink() or not path.is_file():
            return False
        if path.name == MANIFEST:
            return is_manifest(path)  # geodrift's bookkeeping; a user's file of that name is the user's
        if root is None:
            return False
        listed = self.listing(root)
        if self._temporary(path, listed):
            return True  # a temporary file of a run killed midway
        entry = listed.files.get(_relative(path, root))
        return entry is not None and is_owned(path, entry)

    def owns_folder(self, path: Path) -> bool:
        """The folder ``path`` (not a link) was created by geodrift: listed in the manifest above it."""
        if path.is_symlink() or not path.is_dir():
            return False
        root = managed_root(path)
        if root is None:
            return False
        listed = self.listing(root)
        return _relative(path, root) in listed.folders or self._temporary(path, listed)

    @staticmethod
    def _temporary(path: Path, listed: Listing) -> bool:
        match = TEMP_NAME.fullmatch(path.name)
        return match is not None and match.group(1) in listed.tokens


def _relative(path: Path, root: Path) -> str:
    return path.absolute().relative_to(root.absolute()).as_posix()


def _append(manifest: Path, line: str) -> None:
    import fcntl

    fd = os.open(manifest, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
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
