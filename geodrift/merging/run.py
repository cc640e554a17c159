"""``geodrift merge``'s work, in order: pre-flight, read, check the gauge and lineage, align, merge, write.

1. :func:`geodrift.merging.inputs.open_models`: headers only; refused on architecture, config, shapes or
   tokenizer (one line naming both models), before any tensor is read;
2. every model read whole (float32, finite-checked);
3. each model after the reference (``--base``, else ``A``) checked against it
   (:func:`geodrift.merging.frame.check_pair`: one gauge or not, what alignment recovered, lineage). With
   ``--base`` every model must share the base's lineage (refused otherwise: task vectors need a common
   base); without it, unrelated models are merged with a note (expect a loss barrier, docs/merge.md);
4. ``--align auto`` applies the alignment to the models that are not in the reference's gauge, ``on`` to
   every model, ``off`` to none. Where any model is aligned, every model is merged in the folded frame (norm
   gains folded into the projections, an untied head: exact for each model); otherwise the tensors are
   merged as they were read - under ``auto``, two fine-tunes of one base get exactly the plain merge;
5. :func:`geodrift.merging.methods.merge_tensors`, then :func:`geodrift.merging.write.write_merged`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.align import fold_float64
from geodrift.merging.frame import LINEAGE_COSINE, PairCheck, check_pair, describe, fold_reference
from geodrift.merging.inputs import float32, gauge_shape, open_models, read_state, tied, untie
from geodrift.merging.methods import MergeSettings, merge_tensors
from geodrift.merging.write import write_merged

# Bytes per parameter held at the peak: every model in float32 (4 n), the reference folded in float64 (8), the
# alignment fit running in float64 (8, and about as much again of temporaries), each aligned copy kept in float32
# (4 n at most) and the merge in float32 (4).
FIXED_BYTES, PER_MODEL_BYTES = 28, 8


@dataclass
class MergeResult:
    """What ``geodrift merge`` did: the pre-merge checks, the frame merged in and the folder written."""

    method: str
    models: list[str]
    base: str | None
    align: str
    frame: str  # "as read" or "folded" (norm gains folded into the projections, untied head)
    checks: list[PairCheck]
    notes: list[str]
    out: Path
    files: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """The pre-merge check, one line per model after the reference."""
        return [describe(c) for c in self.checks]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``geodrift_merge.json`` and ``--json``)."""
        return {"method": self.method, "models": self.models, "base": self.base, "align": self.align,
                "frame": self.frame, "settings": self.settings, "checks": [c.to_dict() for c in self.checks],
                "notes": self.notes, "out": str(self.out), "files": self.files, "seconds": self.seconds}


def memory_needed(parameters: int, n_models: int) -> int:
    """Bytes held at the peak of a merge of ``n_models`` (``--base`` counted) of ``parameters`` each.

    Example:
        >>> memory_needed(1000, 3)
        52000
    """
    return parameters * (FIXED_BYTES + PER_MODEL_BYTES * n_models)


def merge_models(models: list[str | Path | None], out: str | Path, *, base: str | Path | None = None,
                 method: str = "linear", align: str = "auto", settings: MergeSettings | None = None,
                 force: bool = False, max_memory: int | None = None,
                 stage: Callable[[str], None] | None = None) -> MergeResult:
    """Merge ``models`` (after bringing them into one gauge where they are not) and write ``out``.

    Args:
        models: the inputs A, B, ... (paths; None: the embedded SmolLM2).
        out: the Hugging Face folder to write.
        base: ``--base`` (the reference, and the base of task vectors).
        method, settings: the rule (:mod:`geodrift.merging.methods`).
        align: ``auto``, ``on`` or ``off`` (the module docstring).
        force: replace geodrift's earlier output in ``out``.
        max_memory: refuse before reading when the estimate exceeds it (bytes).
        stage: called with a line before each step (None: silent).

    Returns:
        The :class:`MergeResult`.

    Raises:
        GeodriftError: one line (see :mod:`geodrift.merging.inputs` and the module docstring).
    """
    t0 = time.perf_counter()
    stage = stage or (lambda _: None)
    settings = settings or MergeSettings()
    paths = ([base] if base is not None else []) + list(models)
    stage(f"checking {len(paths)} models (headers)")
    pre = open_models(paths)
    need = memory_needed(pre.parameters, len(paths))
    if max_memory is not None and need > max_memory:
        raise GeodriftError(f"--max-memory: merging {len(paths)} models of {pre.parameters / 1e6:.0f}M parameters holds "
                            f"about {need / 2**30:.1f} GiB, above --max-memory {max_memory / 2**30:.1f} GiB; raise "
                            "--max-memory or merge fewer models at once")
    reference = pre.models[0]
    states = []
    for model in pre.models:
        stage(f"reading {model.label}")
        states.append(read_state(model))
    shape = gauge_shape(states[0], reference)
    folded_reference = fold_reference(states[0], shape)
    checks: list[PairCheck] = []
    aligned: dict[int, dict[str, Any]] = {}
    for i, (model, sd) in enumerate(zip(pre.models[1:], states[1:], strict=True), start=1):
        stage(f"aligning {model.label} to {reference.label} (general and orthogonal head maps)")
        moved, check = check_pair(folded_reference, sd, shape, model.label, reference.label)
        check.applied = align == "on" or (align == "auto" and not check.one_gauge)
        if check.applied:
            aligned[i] = moved
        del moved
        checks.append(check)
    notes = list(pre.notes) + _lineage(checks, base is not None, align)
    if aligned:
        frame = "folded"
        states = [float32(folded_reference)] + [aligned.get(i) or float32(fold_float64(dict(sd), shape))
                                                for i, sd in enumerate(states[1:], start=1)]
    else:
        frame = "as read"
        del folded_reference
        if not all(tied(sd) for sd in states):
            states = [untie(sd) for sd in states]
    stage(f"merging ({method})")
    merged = merge_tensors(method, states[1:] if base is not None else states,
                           states[0] if base is not None else None, settings, dtype=torch.float32)
    del states
    result = MergeResult(method, [str(p) if p is not None else "embedded SmolLM2" for p in models],
                         None if base is None else str(base), align, frame, checks, notes, Path(out),
                         settings={"weights": settings.weights, "t": settings.t, "density": settings.density,
                                   "scale": settings.scale, "seed": settings.seed})
    stage(f"writing {out}")
    tokenizer_from = next((m for m in pre.models if m.has_tokenizer), None)
    result.files = write_merged(merged, reference, tokenizer_from, out, force=force,
                                inputs=[m.source for m in pre.models], record=result.to_dict())
    result.seconds = time.perf_counter() - t0
    return result


def _lineage(checks: list[PairCheck], has_base: bool, align: str) -> list[str]:
    # With --base every model must share the base's lineage; without it, unrelated models get a note.
    notes = []
    for check in checks:
        if not check.related:
            if has_base:
                raise GeodriftError(
                    f"merge: lineage differs: {check.label} does not descend from --base {check.reference} (after "
                    f"alignment its hidden units match the base's with mean cosine {check.matched_cosine:.3f}, below "
                    f"{LINEAGE_COSINE}; a fine-tune keeps above 0.99); task vectors need the model they were "
                    "fine-tuned from - pass the right --base, or merge without one (--method linear/slerp)")
            notes.append(f"lineage: {check.label} and {check.reference} share no lineage (matched cosine "
                         f"{check.matched_cosine:.3f} < {LINEAGE_COSINE}); their average sits behind a loss barrier "
                         "even when aligned (docs/merge.md)")
        if not check.one_gauge and align == "off":
            notes.append(f"gauge: {check.label} is not in {check.reference}'s gauge and --align off merges it as it "
                         "is; expect a damaged merge (--align auto repairs it)")
    return notes
