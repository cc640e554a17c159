"""The ``geodrift merge`` job: one typed request, every option checked before any model is read.

Example:
    >>> run_merge(MergeRequest(models=("a", "b"), out=Path("m"), method="ties"))
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --base: --method ties adds task vectors (each model minus the base) and needs the base model they were fine-tuned from; pass --base BASE
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from geodrift.errors import GeodriftError
from geodrift.jobs.events import SILENT, Events
from geodrift.jobs.options import check_fields
from geodrift.merging.names import ALIGN_MODES, METHODS, NEEDS_BASE

if TYPE_CHECKING:
    from geodrift.merging.run import MergeResult



@dataclass(frozen=True)
class MergeRequest:
    """Every option of ``geodrift merge`` that changes what is computed or written (``--json`` and ``--quiet`` only
    change what the face prints). ``models``: the inputs ``A B ...`` (a None entry: the embedded SmolLM2)."""

    models: tuple[str | Path | None, ...] = ()
    out: Path | None = None
    base: str | Path | None = None
    method: str = "linear"
    align: str = "auto"
    weights: tuple[float, ...] | None = None
    t: float = 0.5
    density: float = 0.5
    scale: float = 1.0
    seed: int = 0
    force: bool = False
    max_memory: str = "8G"


def parse_weights(text: str | None) -> tuple[float, ...] | None:
    """``--weights 0.7,0.3`` as numbers (None: not given).

    Raises:
        GeodriftError: a part that is not a number.

    Example:
        >>> parse_weights("0.7, 0.3")
        (0.7, 0.3)
    """
    if text is None:
        return None
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise GeodriftError(f"--weights: {text!r} is not a comma-separated list of numbers (e.g. 0.7,0.3)") from None


def check_merge(r: MergeRequest) -> int:
    """Every option of the request, before any model is opened; returns ``--max-memory`` in bytes.

    Raises:
        GeodriftError: one line naming the option.
    """
    from geodrift.io.checks import parse_size

    check_fields(r)
    if r.method not in METHODS:
        raise GeodriftError(f"--method: {r.method!r} is not a merge method; use one of {', '.join(METHODS)}")
    if r.align not in ALIGN_MODES:
        raise GeodriftError(f"--align: {r.align!r} is not one of {', '.join(ALIGN_MODES)}")
    if r.method in NEEDS_BASE and r.base is None:
        raise GeodriftError(f"--base: --method {r.method} adds task vectors (each model minus the base) and needs the "
                            "base model they were fine-tuned from; pass --base BASE")
    ends = len(r.models) + (r.base is not None)
    if r.method == "slerp" and ends != 2:
        raise GeodriftError(f"--method slerp: interpolates between exactly two models, got {ends} (with --base "
                            "counted); pass two models, or --base and one")
    least = 1 if r.base is not None else 2
    if len(r.models) < least:
        raise GeodriftError(f"merge: {len(r.models)} model(s) given; pass at least {least} model(s)"
                            + (" after --base" if r.base is not None else " (A B ...)"))
    if r.out is None:
        raise GeodriftError("--out: missing; name the folder the merged model is written to")
    from geodrift.merging.methods import MergeSettings

    MergeSettings(r.weights, r.t, r.density, r.scale, r.seed).check(r.method, len(r.models))
    return parse_size(r.max_memory)


def run_merge(request: MergeRequest, events: Events = SILENT) -> MergeResult:
    """Check every option and the output folder, then merge (:func:`geodrift.merging.run.merge_models`).

    Args:
        request: the options; events: where progress goes.

    Returns:
        The :class:`~geodrift.merging.run.MergeResult` (its ``files``: what ``--out`` holds now).

    Raises:
        GeodriftError: a bad option or ``--out`` (before anything is read); a pair of models that differ in
            architecture, config, shapes or tokenizer (from the headers); non-finite weights; a model that does
            not share ``--base``'s lineage.
    """
    limit = check_merge(request)
    from geodrift.merging.methods import MergeSettings
    from geodrift.merging.run import merge_models
    from geodrift.merging.write import check_out
    from geodrift.pretrained import embedded_model_path

    r = request
    assert r.out is not None
    paths = ([r.base] if r.base is not None else []) + list(r.models)
    inputs = [embedded_model_path() if p is None else Path(p) for p in paths]
    check_out(r.out, r.force, inputs)
    return merge_models(list(r.models), r.out, base=r.base, method=r.method, align=r.align,
                        settings=MergeSettings(r.weights, r.t, r.density, r.scale, r.seed), force=r.force,
                        max_memory=limit, stage=events.stage)
