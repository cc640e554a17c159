"""The explain job: what a scan's verdicts, views and the word ``aligned`` mean, in words (``geodrift explain``).

The brief scan prints a table, one line on its view and a summary; the criteria behind each word live here
(and in ``--full``, per projection, and docs/verdicts.md). The texts are the verdicts' own constants
(:mod:`geodrift.continuity.verdicts`) and the gauge statuses' (:mod:`geodrift.gauge.status`), so they cannot
drift from the code that decides.

Example:
    >>> [section.topic for section in run_explain(ExplainRequest("aligned"))]
    ['aligned']
"""

from __future__ import annotations

from dataclasses import dataclass

from geodrift.errors import GeodriftError

TOPICS = ("frame", "path", "v", "views", "aligned")


@dataclass(frozen=True)
class ExplainRequest:
    """``geodrift explain [TOPIC]``: one of :data:`TOPICS`, or None for all of them."""

    topic: str | None = None


@dataclass(frozen=True)
class Section:
    """One topic: its name, a title and paragraphs."""

    topic: str
    title: str
    paragraphs: tuple[str, ...]


def run_explain(request: ExplainRequest) -> list[Section]:
    """The sections of ``request.topic`` (all topics when None).

    Raises:
        GeodriftError: an unknown topic, naming the ones there are.
    """
    if request.topic is not None and request.topic.lower() not in TOPICS:
        raise GeodriftError(f"explain: {request.topic!r} is not a topic; use one of {', '.join(TOPICS)} (or none: all)")
    sections = _sections()
    return [s for s in sections if request.topic is None or s.topic == request.topic.lower()]


def _sections() -> list[Section]:
    from geodrift.continuity.verdicts import (
        FRAME_NOTE,
        NEITHER_CRITERION,
        NEITHER_PATH_CRITERION,
        PATH_CRITERION,
        Z_SIGNIFICANT,
    )
    from geodrift.gauge.status import ALIGNED, GAUGE_NOTE, INVARIANT, UNKNOWN, VARIES

    return [
        Section("frame", "frame: a frame shared across layers (the paper's claim, Eq. 1)", (
            "holds when the predicted space's first singular vectors of adjacent layers agree beyond their "
            f"permutation null (z >= {Z_SIGNIFICANT:g}) and, where the other space is measured, by more than the "
            "other space's excess over its null. Predicted: Q, K, Gate, Up in v1 (input); O, Down, OV in u1 "
            "(output); V in neither.",
            FRAME_NOTE + ".")),
        Section("path", "path: a path in depth (nearby layers agree more than far ones)", (
            PATH_CRITERION + ".",
            "\"continuity\" in the summary is where frame and path both hold.")),
        Section("v", "V: predicted neither, so its words are none and found", (
            "none: no frame (or no path) was found, as the theory predicts; found: one was, which the theory "
            "did not predict. The JSON keeps the judged outcome (verdict holds = none, fails = found).",
            "frame: " + NEITHER_CRITERION + ".",
            "path: " + NEITHER_PATH_CRITERION + ".")),
        Section("views", "views: raw, folded, canonical", (
            "raw: the stored weights, the paper's metric; folded: norm gains folded into the projections that "
            "read them; canonical (the default where geodrift has derived the model's gauge group): folded, each "
            "layer at the canonical point of its gauge orbit, so exact reparametrisations (AWQ-style scales, "
            "residual rotations, head and hidden-unit permutations) leave every number and verdict unchanged.",
            f"Each space of a report carries its gauge status: {INVARIANT} ({GAUGE_NOTE[INVARIANT]}), {VARIES} "
            f"({GAUGE_NOTE[VARIES]}), {ALIGNED}, {UNKNOWN} ({GAUGE_NOTE[UNKNOWN]}).",
            "drift and compare also say how they fixed the gauge across checkpoints (their title's 'gauge' part).")),
        Section("aligned", "aligned: not a measurement", (
            "In the canonical view the head/hidden-side spaces (Q/K/V/Gate/Up u1, O/Down v1) are ordered by the "
            "view itself: their agreement across layers is made by that ordering, not found in the weights. They "
            "are shown as 'aligned' (no number), judged by no verdict and counted in no summary; the JSON and "
            "CSV keep their numbers, marked by the gauge field.",
            "The paper's numbers for those spaces: --view raw (which exact reparametrisations move).")),
    ]
