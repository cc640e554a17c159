"""Checks of a scan's options against the opened checkpoint, from headers only, before any SVD.

- ``--layers`` must name layers the model has (the message gives the model's range);
- ``--k`` (one rule for both faces, :func:`check_k`): above the rank of some selected matrices it is
  clipped for those projections and said in ``Report.notes`` (``geodrift scan`` and ``geodrift.scan``
  give the same report at their default k = 8 on a 4-expert router, rank 4); above the rank of every
  selected matrix it is refused (nothing would use it);
- the measurement's memory estimate (``geodrift.continuity.budget``) must fit ``--max-memory``.
"""

from __future__ import annotations

from geodrift.continuity import MeasureSpec
from geodrift.continuity.budget import estimate_bytes
from geodrift.errors import GeodriftError
from geodrift.io.checks import format_size
from geodrift.weights import WeightSet


def check_layers(layers: list[int] | None, present: list[int], origin: str) -> None:
    """Refuse ``--layers`` outside the model's layers, naming the model's range.

    Raises:
        GeodriftError: e.g. ``--layers: 30..99999999999 not in model.gguf (it has layers 0..29)``.
    """
    if layers is None or not present:
        return
    outside = sorted(set(layers) - set(present))
    if outside:
        shown = ", ".join(str(x) for x in outside[:5]) + (f" ... ({len(outside)} in all)" if len(outside) > 5 else "")
        raise GeodriftError(
            f"--layers: {shown} not in {origin} (it has layers {min(present)}..{max(present)}); "
            "select layers inside that range"
        )


def plan_shapes(ws: WeightSet, heads: tuple[int, int] | None) -> dict[str, tuple[int, int, int]]:
    """role -> ``(layers, d_out, d_in)`` of what the scan will measure (the OV composite included)."""
    shapes = {role: (len(ws.layers(role)), *ws.shape(role)) for role in ws.roles()}
    if heads is not None and {"attn_v", "attn_o"} <= set(ws.roles()):
        both = set(ws.layers("attn_v")) & set(ws.layers("attn_o"))
        d_model = ws.shape("attn_o")[0]
        shapes["attn_ov"] = (len(both), d_model, ws.shape("attn_v")[1])
    return shapes


def check_k(shapes: dict[str, tuple[int, int, int]], spec: MeasureSpec, origin: str) -> None:
    """Refuse a ``k`` above the rank of every selected matrix; a ``k`` that only some exceed is clipped for
    those by the measurement (with a note), from the CLI and from Python alike.

    Args:
        shapes: role -> ``(layers, d_out, d_in)`` (:func:`plan_shapes`).
        spec: the measurement.
        origin: the checkpoint's name for the message.

    Raises:
        GeodriftError: e.g. ``--k 10000: larger than the rank of every selected projection in m.gguf (the
            largest: attn_q, rank 576 = min of 576 x 576); use --k 576 or less``.

    Example:
        >>> check_k({"router": (3, 4, 32), "attn_q": (3, 32, 32)}, MeasureSpec(k=8), "m")  # router clipped to 4
    """
    if not shapes or spec.full_spectrum:
        return
    role, (_, d_out, d_in) = max(shapes.items(), key=lambda item: min(item[1][1:]))
    if spec.k > min(d_out, d_in):
        raise GeodriftError(
            f"--k {spec.k}: larger than the rank of every selected projection in {origin} (the largest: {role}, "
            f"rank {min(d_out, d_in)} = min of {d_out} x {d_in}); use --k {min(d_out, d_in)} or less"
        )


def check_plan(ws: WeightSet, spec: MeasureSpec, heads: tuple[int, int] | None, max_memory: int) -> int:
    """Refuse a ``--k`` no selected matrix can use (:func:`check_k`), or a run whose memory estimate exceeds
    ``max_memory`` (k clipped per projection to its rank, as the measurement clips it).

    Args:
        ws: the selected projections (headers read, no data).
        spec: the measurement.
        heads: ``(n_heads, n_kv_heads)`` when the OV composite is scanned.
        max_memory: the ``--max-memory`` limit in bytes.

    Returns:
        The estimate in bytes.

    Raises:
        GeodriftError: naming the option, the estimate and the fix.
    """
    shapes = plan_shapes(ws, heads)
    check_k(shapes, spec, ws.origin)
    estimate = estimate_bytes(shapes, spec)
    if estimate > max_memory:
        raise GeodriftError(
            f"--null-draws {spec.null_draws}, --k {spec.k}{' --full-spectrum' if spec.full_spectrum else ''}: "
            f"this scan would need about {format_size(estimate)}, above --max-memory {format_size(max_memory)}; "
            "lower --null-draws (or --k, --layers) or raise --max-memory"
        )
    return estimate
