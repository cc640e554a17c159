"""Every method of ``compress share`` and every layer ranking of ``compress prune``, in one table each.

:data:`METHODS` (``compress share``) and :data:`RANKINGS` (``compress prune``) are the only place a
method's name is written: the compressor (:class:`geodrift.compress.methods.Compressor`), the
experiments (:func:`geodrift.compress.share_run.evaluate_sharing`, :func:`geodrift.compress.prune.evaluate_pruning`),
the CLI's closed choices (``geodrift.cli.choices``), the ``--methods`` help and the reproduction
presets read their lists and properties from here, and ``tests/test_method_table.py`` checks that no
other module spells a name. A new method is one row (and, when it needs a new kind of build, the code
of that build).

This module imports only the standard library, so the CLI's ``--help`` can read it without torch.

Example:
    >>> METHODS["svd-llm"].kind, METHODS["geodrift:no-refit"].control_of, METHODS["laco"].order
    ('baseline', 'geodrift', 'prune-greedy')
    >>> names(RANKINGS, preset="smoke")
    ('geom-v1', 'block-influence')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Spaces a basis lives in (every projection's space: geodrift.compress.lowrank's units).
INPUT, OUTPUT, PRIVATE = "input", "output", "private"
# Spaces chosen per projection on the model (geodrift's measured choice), or that choice exchanged.
MEASURED, SWAPPED = "measured", "swapped"
SWAP = {INPUT: OUTPUT, OUTPUT: INPUT, PRIVATE: PRIVATE}
# Which layers share a basis: neighbours in depth, matched by measured overlap, random pairs, none.
ADJACENT, MATCHED, RANDOM, NONE = "adjacent", "matched", "random", "none"
# How ranks are spread at one ratio (geodrift.compress.allocate): uniform_ranks, v2_ranks, loss_per_parameter_ranks.
UNIFORM, V2, LOSS_PER_PARAMETER = "uniform", "v2", "loss-per-parameter"
# Roles of a transformer layer's projections (geodrift.weights.TRANSFORMER_ROLES; tests check the two agree).
ROLES = ("attn_q", "attn_k", "attn_v", "attn_o", "mlp_gate", "mlp_up", "mlp_down")
# Kinds of method: compared with the best baseline, continuity's methods, attribution controls.
BASELINE, CONTINUITY, CONTROL = "baseline", "continuity", "control"


@dataclass(frozen=True)
class Method:
    """One ``compress share`` method: how it is built, and what it is compared with.

    Attributes:
        kind: ``baseline``, ``continuity`` or ``control``.
        summary: one line for ``--help`` and the docs.
        spaces: ``{role: input | output | private}``, or ``measured`` (geodrift's choice per projection
            on this model) or ``swapped`` (that choice with input and output exchanged); None: removal.
        groups: which layers share a basis: ``adjacent``, ``matched`` (by the measured overlap),
            ``random`` or ``none``.
        allocation: ``uniform``, ``v2`` (SVD-LLM-V2) or ``loss-per-parameter``.
        refit: input-space coefficients refit in closed form.
        relative: each layer's whitened loss divided by its whitened energy (layers weigh equally).
        order: for a removal method, the method whose removal order it uses (its own, or another's);
            None: low rank.
        ranking: for a method that owns a removal order, the ranking that computes it (:data:`RANKINGS`).
        merge: the removed layers are merged into their kept predecessor (LaCo) instead of dropped.
        control_of: the method it is an attribution control of (it changes one of that method's choices).
        changes: what that control changes, in a word (the comparison table's caption).
        presets: the ``geodrift reproduce`` modes beyond ``full`` that run it.
    """

    kind: str
    summary: str
    spaces: Mapping[str, str] | str | None = None
    groups: str = NONE
    allocation: str = UNIFORM
    refit: bool = False
    relative: bool = False
    order: str | None = None
    ranking: str | None = None
    merge: bool = False
    control_of: str | None = None
    changes: str = ""
    presets: frozenset[str] = frozenset()

    @property
    def measured(self) -> bool:
        """Whether it needs geodrift's per-projection choices on the model."""
        return self.spaces in (MEASURED, SWAPPED)


_ALL_PRIVATE = {role: PRIVATE for role in ROLES}
BASIS_SHARING_SPACES = {**{r: INPUT for r in ("attn_q", "attn_k", "attn_v", "mlp_up", "mlp_gate")},
                        "attn_o": PRIVATE, "mlp_down": PRIVATE}
THEORY_SPACES = {"attn_q": INPUT, "attn_k": INPUT, "mlp_gate": INPUT, "mlp_up": INPUT,
                 "attn_o": OUTPUT, "mlp_down": OUTPUT, "attn_v": PRIVATE}
_QUICK = frozenset({"quick"})

METHODS: dict[str, Method] = {
    "svd-llm": Method(BASELINE, "each projection of each layer truncated alone (SVD-LLM), the same ratio everywhere",
                      _ALL_PRIVATE, presets=_QUICK),
    "svd-llm-v2": Method(BASELINE, "SVD-LLM with SVD-LLM-V2-style uneven ranks within each projection type",
                         _ALL_PRIVATE, allocation=V2),
    "basis-sharing": Method(BASELINE, "Q, K, V, Up, Gate share an input-space basis over adjacent groups, O and Down "
                            "private", BASIS_SHARING_SPACES, ADJACENT, presets=_QUICK),
    "prune-bi": Method(BASELINE, "remove round(ratio x L) whole layers by Block Influence", order="prune-bi",
                       ranking="block-influence"),
    "prune-greedy": Method(BASELINE, "remove round(ratio x L) whole layers by greedy calibration NLL",
                           order="prune-greedy", ranking="greedy", control_of="laco", changes="removal, not merge"),
    "theory": Method(CONTINUITY, "the paper's corollary as stated: Q, K, Gate, Up share input space, O and Down "
                     "output space, V private; adjacent groups", THEORY_SPACES, ADJACENT, presets=_QUICK),
    "geodrift": Method(CONTINUITY, "layers grouped by measured whitened overlap, each projection's space settled on "
                       "calibration NLL, input coefficients refit", MEASURED, MATCHED, refit=True, relative=True,
                       presets=_QUICK),
    "laco": Method(CONTINUITY, "LaCo: the layers prune-greedy removes merged into their kept predecessor",
                   order="prune-greedy", merge=True),
    "geodrift:random-groups": Method(CONTROL, "geodrift with random groups", MEASURED, RANDOM, refit=True,
                                     relative=True, control_of="geodrift", changes="grouping", presets=_QUICK),
    "geodrift:swapped": Method(CONTROL, "geodrift with input and output exchanged", SWAPPED, MATCHED, refit=True,
                               relative=True, control_of="geodrift", changes="space"),
    "geodrift:loss-allocation": Method(CONTROL, "geodrift with ranks by loss per parameter", MEASURED, MATCHED,
                                       LOSS_PER_PARAMETER, refit=True, relative=True, control_of="geodrift",
                                       changes="ranks by loss per parameter"),
    "geodrift:no-refit": Method(CONTROL, "geodrift without the refit", MEASURED, MATCHED, relative=True,
                                control_of="geodrift", changes="refit"),
}
# The method the question's verdict judges, and its control that decides whether its grouping carries information.
CANDIDATE = "geodrift"
GROUPING_CONTROL = "geodrift:random-groups"
# Compared with the best baseline of each draw, in this order (the paired-differences table).
AGAINST_BEST = ("geodrift", "theory", "laco")
# ``compress share --save-method``'s default.
DEFAULT_SAVE = CANDIDATE
# Each control and the method it controls: the attribution controls first, then a baseline that is another's control.
CONTROL_OF = {name: m.control_of for name, m in sorted(METHODS.items(), key=lambda kv: kv[1].kind != CONTROL)
              if m.control_of is not None}


@dataclass(frozen=True)
class Ranking:
    """One ``compress prune`` layer ranking.

    Attributes:
        signal: ``geometry`` (data-free, from the weights' continuity), ``states`` (one calibration
            pass's layer states) or ``search`` (greedy removal on calibration text).
        score: the name of its per-layer score in the results (``PruneResult.scores``).
        importance: the score is an importance (higher: keep), so removability is its negative.
        presets: the ``geodrift reproduce`` modes beyond ``full`` that run it.
    """

    signal: str
    score: str
    importance: bool = False
    presets: frozenset[str] = frozenset()


GEOMETRY, STATES, SEARCH = "geometry", "states", "search"
_QUICK_SMOKE = frozenset({"quick", "smoke"})
RANKINGS: dict[str, Ranking] = {
    "geom-v1": Ranking(GEOMETRY, "geom-v1", presets=_QUICK_SMOKE),
    "geom-s2wa": Ranking(GEOMETRY, "geom-s2wa", presets=_QUICK),
    "block-influence": Ranking(STATES, "block-influence", importance=True, presets=_QUICK_SMOKE),
    "angular": Ranking(STATES, "angular (n=1)", importance=True, presets=_QUICK),
    "greedy": Ranking(SEARCH, "greedy (step removed)", importance=True),
}
GEOMETRY_V1, GEOMETRY_S2WA, BLOCK_INFLUENCE, ANGULAR, GREEDY = RANKINGS
# The reference the data-free rankings' agreement verdict is judged against (ShortGPT).
AGREEMENT_REFERENCE = BLOCK_INFLUENCE
DEFAULT_PRUNE_SAVE = GEOMETRY_V1


def names(table: Mapping[str, Method] | Mapping[str, Ranking], *, preset: str | None = None) -> tuple[str, ...]:
    """The names of ``table`` in its order (``preset``: only those that preset runs).

    Example:
        >>> names(METHODS, preset="quick")
        ('svd-llm', 'basis-sharing', 'theory', 'geodrift', 'geodrift:random-groups')
    """
    return tuple(n for n, m in table.items() if preset is None or preset in m.presets)


def enum_member(name: str) -> str:
    """The Python identifier of a name in the CLI's Enums (``geodrift:random-groups`` -> ``geodrift_random_groups``).

    Example:
        >>> enum_member("svd-llm-v2")
        'svd_llm_v2'
    """
    return name.replace("-", "_").replace(":", "_")
