"""Which exact gauges move each reported number, per view: the label every space of a report carries.

A projection's singular vectors live in two spaces. The **residual-side** ones (Q v, K v, V v, Gate v,
Up v, O u, Down u, and both spaces of OV) are vectors of the residual stream, shared by every layer;
the **head/hidden-side** ones (Q u, K u, V u, O v, Gate u, Up u, Down v) live in a basis of their own
per layer (a head's, or the MLP's hidden units), which the network is free to choose.

Per view (generators as named in :data:`geodrift.architectures.GENERATORS`, per architecture: the table's row
says which act; the list below is the llama family's):

- ``raw``: moving scales between a norm gain and the projections that read it (``fold``) moves every
  reader's input space; a residual rotation (after folding) moves every residual-side vector's
  coordinates, so the permutation null and z (not the mean of ``|cos|``, which is basis-free) of every
  residual-side number; ``qk`` moves Q and K, ``vo`` V and O, ``mlp_scale`` Up and Down; hidden and head
  permutations move the head/hidden-side spaces.
- ``folded``: the same without ``fold`` (the view folds the gains, whatever split the file stored).
- ``canonical``: nothing moves a residual-side number (``invariant``); head/hidden-side vectors are
  aligned across layers *by construction* (the canonical ordering), so they are labelled ``aligned``
  and are not continuity.

An architecture whose canonical view is not done reads ``folded`` by default; its numbers carry the generators
that still move them. Roles with no residual side (the toy residual MLP's ``block``) are ``unknown``.

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

from geodrift.architectures import ARCHITECTURES, moved_by

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

# role -> the space of its singular vectors that lives in the residual stream (the other is its head/hidden side)
_RESIDUAL_SIDE: dict[str, str] = {
    "attn_q": "v", "attn_k": "v", "attn_v": "v", "attn_o": "u", "mlp_gate": "v", "mlp_up": "v", "mlp_down": "u",
    "router": "v", "expert_gate": "v", "expert_up": "v", "expert_down": "u", "shared_gate": "v", "shared_up": "v",
    "shared_down": "u",
}


def residual_spaces(role: str) -> tuple[str, ...]:
    """The spaces of ``role``'s singular vectors that are vectors of the residual stream (``u``, ``v``).

    Example:
        >>> residual_spaces("attn_q"), residual_spaces("mlp_down"), residual_spaces("attn_ov")
        (('v',), ('u',), ('u', 'v'))
    """
    if role == "attn_ov":
        return ("u", "v")
    base = role.split(".", 1)[0]
    return (_RESIDUAL_SIDE[base],) if base in _RESIDUAL_SIDE else ()


def space_gauge(view: str, role: str, space: str, architecture: str = "") -> tuple[str, tuple[str, ...]]:
    """``(status, moved_by)`` of the numbers of ``role``'s ``space`` in ``view``, for ``architecture``.

    Args:
        view: ``raw``, ``folded`` or ``canonical``.
        role: a canonical role (``attn_q`` ... ``mlp_down``, ``attn_ov``, ``router``, ``expert_up.3`` ...; others
            are ``unknown``).
        space: ``v`` (input) or ``u`` (output).
        architecture: the checkpoint's (:data:`geodrift.architectures.ARCHITECTURES`); "" (in-memory weights of
            no stated architecture) reads as llama; a name outside the table is ``unknown``.

    Returns:
        The status (:data:`GAUGE_STATUSES`) and the generators that move the numbers (empty unless ``varies``),
        named as in :data:`geodrift.architectures.GENERATORS`.

    Example:
        >>> space_gauge("raw", "attn_o", "u")
        ('varies', ('rotate', 'vo'))
        >>> space_gauge("folded", "attn_q", "v", "gemma3")
        ('varies', ('qk_head_scale', 'signed_permute'))
    """
    row = ARCHITECTURES.get(architecture or "llama")
    residual = space in residual_spaces(role)
    if row is None or not residual_spaces(role) or view not in ("raw", "folded", "canonical"):
        return UNKNOWN, ()
    if view == "canonical" and row.canonical:
        return (INVARIANT if residual else ALIGNED), ()
    moved = moved_by(architecture or "llama", view, role, space, residual)
    return (VARIES, moved) if moved else (INVARIANT, ())


def null_kind(view: str, role: str, space: str) -> str:
    """The null of ``role``'s ``space`` in ``view``: ``rotation`` on the residual side of the canonical view, else
    ``permutation`` (the module docstring says why).

    Example:
        >>> null_kind("canonical", "mlp_up", "v"), null_kind("canonical", "mlp_up", "u"), null_kind("raw", "mlp_up", "v")
        ('rotation', 'permutation', 'permutation')
    """
    return ROTATION_NULL if view == "canonical" and space in residual_spaces(role) else PERMUTATION_NULL
