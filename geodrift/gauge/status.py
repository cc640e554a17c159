"""Which exact gauges move each reported number, per view: the label every space of a report carries.

A projection's singular vectors live in two spaces. The **residual-side** ones (Q v, K v, V v, Gate v,
Up v, O u, Down u, and both spaces of OV) are vectors of the residual stream, shared by every layer;
the **head/hidden-side** ones (Q u, K u, V u, O v, Gate u, Up u, Down v) live in a basis of their own
per layer (a head's, or the MLP's hidden units), which the network is free to choose.

Per view (generators as named in :data:`geodrift.gauge.orbit.GENERATORS`):

- ``raw``: moving scales between a norm gain and the projections that read it (``fold``) moves every
  reader's input space; a residual rotation (after folding) moves every residual-side vector's
  coordinates, so the permutation null and z (not the mean of ``|cos|``, which is basis-free) of every
  residual-side number; ``qk`` moves Q and K, ``vo`` V and O, ``mlp_scale`` Up and Down; hidden and head
  permutations move the head/hidden-side spaces.
- ``folded``: the same without ``fold`` (the view folds the gains, whatever split the file stored).
- ``canonical``: nothing moves a residual-side number (``invariant``); head/hidden-side vectors are
  aligned across layers *by construction* (the canonical ordering), so they are labelled ``aligned``
  and are not continuity.

Roles outside the Llama-family group (experts, router, the toy residual MLP's) are ``unknown``.

The **null** each number is judged against (:func:`null_kind`): the paper's coordinate-permutation null, except
on the residual side of the canonical view, whose coordinates no weight fixes (a residual rotation is exact and
the view fixes none): there the null is the **rotation** null, ``|cos|`` under a uniformly random rotation
(:func:`geodrift.metrics.rotation_null`: analytic, basis-free, continuous). On the head/hidden side, whose
remaining gauge is permutations (and signs), the permutation null stays.

Example:
    >>> space_gauge("folded", "mlp_gate", "v"), space_gauge("canonical", "attn_q", "u")
    (('varies', ('rotate',)), ('aligned', ()))
"""

from __future__ import annotations

# The nulls a number is judged against.
PERMUTATION_NULL, ROTATION_NULL = "permutation", "rotation"
# Statuses, from the view's point of view.
INVARIANT, VARIES, ALIGNED, UNKNOWN = "invariant", "varies", "aligned", "unknown"
GAUGE_STATUSES = (INVARIANT, VARIES, ALIGNED, UNKNOWN)
GAUGE_NOTE = {
    INVARIANT: "identical for any two checkpoints that differ by an exact gauge",
    VARIES: "moved by the exact gauges listed (moved_by)",
    ALIGNED: "head/hidden-side vectors aligned by the canonical ordering: not continuity, no verdict",
    UNKNOWN: "the gauge group of this projection is not derived",
}

# role -> (residual-side space, head/hidden-side space, the generator acting on the role itself,
#          the permutation acting on its head/hidden side, whether it reads the stream through a norm)
_ROLES: dict[str, tuple[str, str, tuple[str, ...], str, bool]] = {
    "attn_q": ("v", "u", ("qk",), "head_permute", True),
    "attn_k": ("v", "u", ("qk",), "head_permute", True),
    "attn_v": ("v", "u", ("vo",), "head_permute", True),
    "attn_o": ("u", "v", ("vo",), "head_permute", False),
    "mlp_gate": ("v", "u", (), "mlp_permute", True),
    "mlp_up": ("v", "u", ("mlp_scale",), "mlp_permute", True),
    "mlp_down": ("u", "v", ("mlp_scale",), "mlp_permute", False),
}


def residual_spaces(role: str) -> tuple[str, ...]:
    """The spaces of ``role``'s singular vectors that are vectors of the residual stream (``u``, ``v``).

    Example:
        >>> residual_spaces("attn_q"), residual_spaces("mlp_down"), residual_spaces("attn_ov")
        (('v',), ('u',), ('u', 'v'))
    """
    if role == "attn_ov":
        return ("u", "v")
    return (_ROLES[role][0],) if role in _ROLES else ()


def space_gauge(view: str, role: str, space: str) -> tuple[str, tuple[str, ...]]:
    """``(status, moved_by)`` of the numbers of ``role``'s ``space`` (``v`` or ``u``) in ``view``.

    Args:
        view: ``raw``, ``folded`` or ``canonical``.
        role: a canonical role (``attn_q`` ... ``mlp_down``, ``attn_ov``; others are ``unknown``).
        space: ``v`` (input) or ``u`` (output).

    Returns:
        The status (:data:`GAUGE_STATUSES`) and the generators that move the numbers (empty unless ``varies``).

    Example:
        >>> space_gauge("raw", "attn_o", "u")
        ('varies', ('rotate', 'vo'))
    """
    if role == "attn_ov":
        if view == "canonical":
            return INVARIANT, ()
        return VARIES, (("fold", "rotate") if view == "raw" and space == "v" else ("rotate",))
    if role not in _ROLES or view not in ("raw", "folded", "canonical"):
        return UNKNOWN, ()
    residual, _, own, permutation, reads = _ROLES[role]
    if view == "canonical":
        return (INVARIANT if space == residual else ALIGNED), ()
    moved: tuple[str, ...] = ("fold",) if view == "raw" and reads and space == "v" else ()
    moved += ("rotate",) if space == residual else (permutation,)
    return VARIES, moved + own


def null_kind(view: str, role: str, space: str) -> str:
    """The null of ``role``'s ``space`` in ``view``: ``rotation`` on the residual side of the canonical view, else
    ``permutation`` (the module docstring says why).

    Example:
        >>> null_kind("canonical", "mlp_up", "v"), null_kind("canonical", "mlp_up", "u"), null_kind("raw", "mlp_up", "v")
        ('rotation', 'permutation', 'permutation')
    """
    return ROTATION_NULL if view == "canonical" and space in residual_spaces(role) else PERMUTATION_NULL
