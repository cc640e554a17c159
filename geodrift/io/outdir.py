"""No silent loss: the one policy of every command that writes a folder (``--out``, ``--save``, ``--plot DIR``).

- **Only geodrift's own files are ever replaced or deleted.** A folder geodrift writes into holds a
  hidden manifest, ``.geodrift-written`` (one JSON line per file written: path, size, mtime, sha256),
  appended by every atomic write below it (:func:`geodrift.io.manifest.record_written`, called by
  :mod:`geodrift.io.atomic`, in any process of a sweep). A file is geodrift's when the manifest lists
  it with its current size and either its mtime or its content hash; anything else - a user's
  file, a file edited since, a symbolic link - is *foreign*. A folder holding a foreign file is
  refused, ``--force`` or not, naming the file, and nothing is changed.
- **Never the input.** A folder that is the model being read, holds it, or lies inside a model
  folder is refused, even with ``--force`` (:func:`check_not_input`).
- **Results are not replaced by accident.** A folder that already holds results needs ``--resume``
  (reuse them) or ``--force`` (delete geodrift's files there, then start again).
- **A save is all or nothing.** :func:`replace_folder` writes into a temporary sibling and renames
  it into place (:func:`geodrift.io.atomic.atomic_folder`): an interrupted or failed save leaves the
  old folder as it was.

Example:
    >>> prepare_out(None, resume=False, reload=False, force=False)
    []
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from geodrift.errors import GeodriftError
from geodrift.io.atomic import check_free_space
from geodrift.io.manifest import (
    HEADER,
    MANIFEST,
    TEMP_NAME,
    TOKEN,
    Manifests,
    create,
    expect_output,
    is_manifest,
    is_owned,
    listing,
    make_folders,
    managed_root,
)

__all__ = ["MANIFEST", "check_distinct", "check_file_target", "claim_outputs", "check_not_input", "check_replace_folder",
           "expect_output", "foreign_files", "manage", "managed_root", "prepare_out", "replace_folder"]

# The endings of the figure names geodrift writes (geodrift.render.sim_plots): <prefix>..._<kind>.<fmt>.
PLOT_KINDS = ("continuity", "rotation", "pca_v1", "training", "depth", "gradient_rank", "datasize")
_FIGURE_EXT = r"\.(?:png|pdf|svg)"
# Cached scans of the embedded SmolLM2 (geodrift.pretrained.smollm2_reference): not results of a run.
_CACHE = re.compile(r"smollm2-135m_scan_k\d+_n\d+_s\d+\.json")


def manage(folder: str | Path) -> Path:
    """Create ``folder`` and its manifest if missing (and drop entries of files and folders no longer there);
    returns it."""
    folder = Path(folder)
    make_folders(folder)
    manifest = folder / MANIFEST
    if not is_manifest(manifest):
        create(folder)
        return folder
    listed = listing(folder)
    tokens = sorted(listed.tokens & (_tokens_left(folder) | {TOKEN}))
    lines = [HEADER, *(json.dumps({"token": t}) for t in tokens),
             *(json.dumps({"folder": f}) for f in sorted(listed.folders) if (folder / f).is_dir()),
             *(json.dumps(listed.files[p]) for p in sorted(listed.files) if is_owned(folder / p, listed.files[p]))]
    from geodrift.io.atomic import write_text

    write_text(manifest, "\n".join(lines) + "\n")
    return folder


def _tokens_left(folder: Path) -> set[str]:
    # The tokens of temporary files and folders still under ``folder`` (a run killed midway): kept listed.
    found = set()
    for _, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            match = TEMP_NAME.fullmatch(name)
            if match:
                found.add(match.group(1))
    return found


def foreign_files(folder: str | Path, limit: int = 1) -> list[Path]:
    """Up to ``limit`` files under ``folder`` that geodrift did not write (the walk stops at the ``limit``-th).

    Each file is judged by the manifest nearest above it (the one its writer recorded it in).

    Example:
        >>> foreign_files("/nonexistent-folder")
        []
    """
    found: list[Path] = []
    if limit < 1:
        return found
    manifests = Manifests()
    for path, root in _iter_walk(Path(folder)):
        if not manifests.owns(path, root):
            found.append(path)
            if len(found) >= limit:
                break
    return found


def check_not_input(folder: str | Path, inputs: Iterable[str | Path | None], option: str) -> None:
    """Refuse ``folder`` when it is an input, holds an input, or lies inside an input folder (``--force`` or not).

    Args:
        folder: the output folder the user gave.
        inputs: the paths being read (model files or folders, corpora); None entries are skipped.
        option: the option naming ``folder``, for the message.

    Raises:
        GeodriftError: naming both paths.

    Example:
        >>> check_not_input("/data/models/llama", ["/data/models/llama"], "--save")
        Traceback (most recent call last):
        ...
        geodrift.errors.GeodriftError: --save /data/models/llama: is the input /data/models/llama; geodrift never writes into what it reads, even with --force - choose another folder
    """
    target = _resolved(Path(folder))
    for item in inputs:
        if item is None:
            continue
        source = _resolved(Path(item))
        if target == source:
            relation = "is the input"
        elif source.is_relative_to(target):
            relation = "holds the input"
        elif source.is_dir() and target.is_relative_to(source):
            relation = "lies inside the input folder"
        else:
            continue
        raise GeodriftError(f"{option} {folder}: {relation} {item}; geodrift never writes into what it reads, even "
                            "with --force - choose another folder")


def prepare_out(out: str | Path | None, *, resume: bool, reload: bool, force: bool, plot: str | Path | None = None,
                inputs: Iterable[str | Path | None] = (), option: str = "--out") -> list[Path]:
    """Check that ``out`` (and the ``--plot`` folder) may be written into; with ``force``, delete geodrift's old files.

    Args:
        out: the folder of a run's records and checkpoints (None: nothing is written there).
        resume, reload: the folder's runs are wanted (nothing is deleted; results are not "in the way").
        force: delete the old results in ``out`` and the old figures under ``plot`` first.
        plot: the ``--plot`` folder, or a file name whose stem prefixes every figure (``figs/t1.pdf``).
        inputs: paths the command reads (see :func:`check_not_input`).
        option: the option naming ``out``, for the messages.

    Returns:
        The files deleted.

    Raises:
        GeodriftError: ``out`` is a file or an input; it holds a file geodrift did not write; it holds
            results and neither ``--resume`` nor ``--force`` was given; ``--force`` with ``--resume``;
            a figure name geodrift would write is taken by a file it did not write.
    """
    if force and (resume or reload):
        raise GeodriftError("--force deletes the runs that --resume/--reload would use; pass one of them")
    folder = Path(out) if out is not None else None
    old: list[Path] = []
    if folder is not None:  # every check first, for both folders; then the deletions
        check_not_input(folder, inputs, option)
        if folder.exists() and not folder.is_dir():
            raise GeodriftError(f"{option} {folder}: is a file, not a folder; choose a folder name")
        if not reload:  # --reload only reads the folder
            _refuse_foreign(folder, option)
        old = _walk(folder)
        results = [p for p in old if not _CACHE.fullmatch(p.name)]
        if results and not (resume or reload or force):
            raise GeodriftError(
                f"{option} {folder}: already holds {len(results)} result file(s) (e.g. {results[0]}); add --resume to "
                "reuse and continue them, or --force to delete them and start again")
    figures = _old_figures(Path(plot)) if plot is not None else []
    removed: list[Path] = []
    if folder is not None and not reload:
        existing = next(p for p in [folder, *folder.absolute().parents] if p.is_dir())
        check_free_space(existing, option)  # a full disk is refused before any deletion or status line
        removed += _delete(old, folder) if force else []
        manage(folder)
    if plot is not None:
        manage(_figure_folder(Path(plot))[0])
        removed += _delete(figures, None) if force else []
    return removed


def replace_folder(target: str | Path, write: Callable[[Path], object], *, force: bool,
                   inputs: Iterable[str | Path | None] = (), option: str = "--save") -> Path:
    """Write a whole folder with ``write(tmp)`` into a temporary sibling, then rename it onto ``target``.

    The old ``target`` (geodrift's files only, checked first) is replaced only once the new folder
    is complete; an error or a signal before that leaves it as it was, and removes the sibling.

    Args:
        target: the folder the user named.
        write: fills the (empty) folder it is given, e.g. ``lambda d: save_hf(model, d)``.
        force: replace a ``target`` that holds geodrift's earlier output.
        inputs, option: as for :func:`prepare_out`.

    Returns:
        ``target``.

    Raises:
        GeodriftError: as :func:`check_replace_folder`; a failed write names ``target``, never the sibling.
    """
    from geodrift.io.atomic import atomic_folder

    target = Path(target)
    check_replace_folder(target, force=force, inputs=inputs, option=option)
    with atomic_folder(target, option) as tmp:
        manage(tmp)
        write(tmp)
    return target


def check_replace_folder(target: str | Path, *, force: bool, inputs: Iterable[str | Path | None] = (),
                         option: str = "--save") -> None:
    """Refuse now what :func:`replace_folder` would refuse later (run it before the work).

    Raises:
        GeodriftError: ``target`` is an input or holds one, is a file or a symbolic link, holds a file
            geodrift did not write, or holds geodrift's earlier output without ``force``.
    """
    target = Path(target)
    check_not_input(target, inputs, option)
    if target.is_symlink():
        raise GeodriftError(f"{option} {target}: is a symbolic link; give the folder it points to, or a new name")
    if target.exists() and not target.is_dir():
        raise GeodriftError(f"{option} {target}: is a file, not a folder; choose a folder name")
    _refuse_foreign(target, option)
    _refuse_foreign_folders(target, option)
    old = _walk(target)
    if old and not force:
        raise GeodriftError(f"{option} {target}: already holds geodrift's earlier output ({len(old)} file(s), e.g. "
                            f"{old[0]}); add --force to replace it, or choose another folder")


def check_file_target(path: str | Path, option: str,
                      fix: str = "choose another name or move it away (nothing was written)") -> None:
    """Refuse an output file that exists and was not written by geodrift (no command writes over the user's files).

    Args:
        path: the file a command or a Python call would write.
        option: what named it, for the message (``--json-out``, ``plot(path='fig.png')``).
        fix: what the user can do, ending the message.

    Raises:
        GeodriftError: naming the option and the file; nothing is written.

    Example:
        >>> check_file_target("/nonexistent-folder/report.json", "--json-out")
    """
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not Manifests().owns(path, managed_root(path)):
        raise GeodriftError(f"{option} {path}: the file exists and geodrift did not write it; {fix}")


def check_distinct(targets: Iterable[tuple[str, str | Path]], named: Mapping[str, str | Path | None] | None = None,
                   inputs: Iterable[str | Path | None] = ()) -> None:
    """Refuse two outputs of one run - named, or derived from a name - that resolve to the same file, and an output
    that is an input file: one of them would silently replace the other.

    Args:
        targets: ``(what named it, path)`` pairs, every file the run may write (derived names included).
        named: what the user gave each option (``{"--plot": "f.png"}``), to say which name a derived file comes from.
        inputs: the files the run reads.

    Raises:
        GeodriftError: naming both outputs (or the output and the input) and the file.

    Example:
        >>> check_distinct([("--csv", "r.csv"), ("--json-out", "r.csv")])
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: --csv r.csv and --json-out r.csv would write the same file; give each output its own name (nothing was written)
    """
    given = {option: Path(value) for option, value in (named or {}).items() if value is not None}

    def described(option: str, path: Path) -> str:
        origin = given.get(option)
        if origin is not None and _resolved(origin) != _resolved(path):
            return f"{option} {origin} (which also writes {path})"
        return f"{option} {path}"

    read = {_resolved(Path(item)): Path(item) for item in inputs if item is not None and Path(item).is_file()}
    seen: dict[Path, tuple[str, Path]] = {}
    for option, target in targets:
        path = Path(target)
        key = _resolved(path)
        if key in read:
            raise GeodriftError(f"{described(option, path)} is the input {read[key]}; geodrift never writes over what it "
                                "reads - choose another name (nothing was written)")
        if key in seen:
            raise GeodriftError(f"{described(*seen[key])} and {described(option, path)} would write the same file; "
                                "give each output its own name (nothing was written)")
        seen[key] = (option, path)


def claim_outputs(targets: Iterable[tuple[str, str | Path]], *, overwrite: bool = False,
                  fix: str = "choose another name or move it away (nothing was written)",
                  named: Mapping[str, str | Path | None] | None = None, inputs: Iterable[str | Path | None] = ()) -> None:
    """The one output-file policy, for every file a command or a Python call writes - the named ones and the
    names derived from them (``NAME.pairs.csv``, ``NAME_trajectory.png``, ``NAME_experts.png``): run it on the
    whole list before the work. Each must be writable and, unless ``overwrite``, absent or geodrift's own
    (listed unchanged in its folder's manifest); once written, each is recorded in a manifest, so the next run
    may replace it and nothing else.

    Args:
        targets: ``(what named it, path)`` pairs, e.g. ``[("--plot", "fig.png"), ("--plot", "fig_trajectory.png")]``.
        overwrite: replace a file geodrift did not write (the Python API's ``overwrite=True``).
        fix: the end of the refusal's message.
        named, inputs: as :func:`check_distinct`, run first.

    Raises:
        GeodriftError: two outputs resolving to one file, or an output that is an input (:func:`check_distinct`);
            naming what named the file and the user's path (never a temporary file).

    Example:
        >>> claim_outputs([("--json-out", "/nonexistent-folder/r.json")])
    """
    from geodrift.io.atomic import check_writable

    listed = [(option, Path(path)) for option, path in targets]
    check_distinct(listed, named, inputs)
    for option, path in listed:
        check_writable(path, option)
        if not overwrite:
            check_file_target(path, option, fix)
    for _, path in listed:
        expect_output(path)


def _refuse_foreign(folder: Path, option: str) -> None:
    foreign = foreign_files(folder)
    if foreign:
        raise GeodriftError(f"{option} {folder}: holds {foreign[0]}, which geodrift did not write; geodrift writes only "
                            f"into a new folder or one of its own outputs - move it out or choose another folder "
                            "(nothing was changed)")


def _refuse_foreign_folders(target: Path, option: str) -> None:
    # A whole-folder save replaces ``target`` and all below it: a folder the user made there (empty or not) is kept
    # only by refusing.
    manifests = Manifests()
    for root, dirs, _ in os.walk(target):
        for name in sorted(dirs):
            sub = Path(root) / name
            if not sub.is_symlink() and not manifests.owns_folder(sub):
                raise GeodriftError(f"{option} {target}: holds the folder {sub}, which geodrift did not create; a "
                                    "save replaces the whole folder - move it out or choose another folder (nothing "
                                    "was changed)")
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]


def _figure_folder(plot: Path) -> tuple[Path, str]:
    # --plot is a folder, or a file name whose stem prefixes every figure (figs/t1.pdf -> figs/t1_<kind>.pdf).
    return (plot.parent, plot.stem + "_") if plot.suffix else (plot, "")


def _old_figures(plot: Path) -> list[Path]:
    # The files a new figure may replace: refused unless every one of them is geodrift's.
    folder, prefix = _figure_folder(plot)
    if folder.exists() and not folder.is_dir():
        raise GeodriftError(f"--plot {plot}: {folder} is a file, not a folder; choose another path")
    kinds = "|".join(PLOT_KINDS)
    pattern = re.compile(rf"{re.escape(prefix)}.*(?:{kinds}){_FIGURE_EXT}", re.IGNORECASE)
    figures = [p for p in sorted(folder.iterdir()) if pattern.fullmatch(p.name)] if folder.is_dir() else []
    manifests, root = Manifests(), managed_root(folder / MANIFEST)
    for path in figures:
        if not manifests.owns(path, root):
            raise GeodriftError(f"--plot {plot}: {path} was not written by geodrift and a figure may take its name; "
                                "move it out or choose another --plot (nothing was changed)")
    return figures


def _delete(files: list[Path], folder: Path | None) -> list[Path]:
    # The files (each proven geodrift's by the caller), then the folders under ``folder`` that geodrift created and
    # that are left empty - or hold only their own manifest, which lists nothing left. A folder the user made stays.
    for path in files:
        path.unlink()
    if folder is None:
        return files
    manifests = Manifests()
    subfolders = [p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink()]
    owned = [p for p in subfolders if manifests.owns_folder(p)]
    for sub in sorted(owned, key=lambda p: len(p.parts), reverse=True):
        left = list(sub.iterdir())
        if left == [sub / MANIFEST] and is_manifest(sub / MANIFEST):
            (sub / MANIFEST).unlink()
            left = []
        if not left:
            sub.rmdir()
    return files


def _walk(folder: Path) -> list[Path]:
    # Every file, link and special file under ``folder`` but manifests (links are never followed).
    return [path for path, _ in _iter_walk(folder) if path.name != MANIFEST]


def _iter_walk(folder: Path) -> Iterator[tuple[Path, Path | None]]:
    # (path, the nearest folder at or above its own holding a manifest) for everything under ``folder``.
    if not folder.is_dir() or folder.is_symlink():
        return
    nearest: dict[Path, Path | None] = {}
    for root, dirs, files in os.walk(folder):
        base = Path(root)
        here = base if is_manifest(base / MANIFEST) else (
            nearest.get(base.parent) if base != folder else managed_root(base / MANIFEST))
        nearest[base] = here
        for name in sorted(files):
            yield base / name, here
        for name in sorted(dirs):
            if (base / name).is_symlink():
                yield base / name, here
        dirs[:] = sorted(d for d in dirs if not (base / d).is_symlink())


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path.expanduser()))
