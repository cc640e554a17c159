"""No silent loss: what a simulator's ``--out`` folder may hold, and when it may be written into.

A run into a folder that already holds results must say what to do with them: ``--resume``
(reuse finished runs, continue interrupted ones) or ``--force`` (delete them, then start again).
``--force`` deletes only what geodrift writes - run records, reports, tokenizers, checkpoints,
Hugging Face step folders (``--save-hf-every``), cached reference scans and figures - and refuses, deleting nothing, if the folder holds anything
else. Figures in a separate ``--plot`` folder are cleared too, by name.

Example:
    >>> prepare_out(None, resume=False, reload=False, force=False)
    []
"""

from __future__ import annotations

import re
from pathlib import Path

from geodrift.errors import GeodriftError

RUN_FILES = frozenset({"run.json", "report.json", "tokenizer.json", "checkpoint.pt"})
HF_FILES = frozenset({"model.safetensors", "config.json"})
_HF_STEP = re.compile(r"step-\d{6}")
# The endings of the figure names geodrift writes (geodrift.render.sim_plots): <prefix>_<kind>.<fmt>.
PLOT_KINDS = ("continuity", "rotation", "pca_v1", "training", "depth", "gradient_rank", "datasize")
_FIGURE = re.compile(rf".*(?:{'|'.join(PLOT_KINDS)})\.(?:png|pdf|svg)", re.IGNORECASE)
# Cached scans of the embedded SmolLM2 (geodrift.pretrained.smollm2_reference) and atomic-write leftovers.
_CACHE = re.compile(r"smollm2-135m_scan_k\d+_n\d+_s\d+\.json|\..+\.tmp")


def prepare_out(out: str | Path | None, *, resume: bool, reload: bool, force: bool,
                plot: str | Path | None = None) -> list[Path]:
    """Check that ``out`` may be written into; with ``force``, first delete geodrift's old outputs there.

    Args:
        out: the ``--out`` folder (None: nothing is written there).
        resume, reload: the folder's runs are wanted (nothing is deleted or refused).
        force: delete the old outputs (and the figures under ``plot``) before starting.
        plot: the ``--plot`` folder or file prefix.

    Returns:
        The files deleted.

    Raises:
        GeodriftError: a non-empty ``out`` without ``--resume``/``--force``; ``--force`` with
            ``--resume``/``--reload``; ``--force`` on a folder holding files geodrift did not write.
    """
    if force and (resume or reload):
        raise GeodriftError("--force deletes the runs that --resume/--reload would use; pass one of them")
    removed: list[Path] = []
    if out is not None:
        folder = Path(out)
        if folder.exists() and not folder.is_dir():
            raise GeodriftError(f"--out {folder}: is a file, not a folder; choose a folder name")
        old = _results(folder)
        if old and not (resume or reload or force):
            raise GeodriftError(
                f"--out {folder}: already holds {len(old)} result file(s) (e.g. {old[0]}); add --resume to reuse "
                "and continue them, or --force to delete them and start again")
        if force and folder.is_dir():
            removed += _clear(folder)
    if force and plot is not None:
        removed += _clear_figures(Path(plot))
    return removed


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()) if folder.is_dir() else []


def _results(folder: Path) -> list[Path]:
    # What a rerun could overwrite or leave stale: everything but caches.
    return [p for p in _files(folder) if not _CACHE.fullmatch(p.name)]


def _owned(path: Path) -> bool:
    return not path.is_symlink() and (path.name in RUN_FILES or _CACHE.fullmatch(path.name) is not None
                                      or _FIGURE.fullmatch(path.name) is not None or _hf_export(path))


def _hf_export(path: Path) -> bool:
    # --save-hf-every's folders: <run>/hf/step-000120/{model.safetensors, config.json}.
    return (path.name in HF_FILES and _HF_STEP.fullmatch(path.parent.name) is not None
            and path.parent.parent.name == "hf")


def _clear(folder: Path) -> list[Path]:
    files = _files(folder)
    foreign = [p for p in files if not _owned(p)]
    if foreign:
        raise GeodriftError(
            f"--force: {foreign[0]} was not written by geodrift ({len(foreign)} such file(s) in {folder}); move them "
            "out or choose another --out - nothing was deleted")
    for path in files:
        path.unlink()
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(sub.iterdir()):
            sub.rmdir()
    return files


def _clear_figures(plot: Path) -> list[Path]:
    # --plot is a folder, or a file name whose stem prefixes every figure (figs/t1.pdf -> figs/t1_<kind>.pdf).
    folder, prefix = (plot.parent, plot.stem + "_") if plot.suffix else (plot, "")
    if not folder.is_dir():
        return []
    kinds = "|".join(PLOT_KINDS)
    pattern = re.compile(rf"{re.escape(prefix)}.*_?(?:{kinds})\.(?:png|pdf|svg)", re.IGNORECASE)
    figures = [p for p in sorted(folder.iterdir()) if p.is_file() and pattern.fullmatch(p.name)]
    for path in figures:
        path.unlink()
    return figures
