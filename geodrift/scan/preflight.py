"""Checks of a scan's options against the opened checkpoint, from headers only, before any SVD.

- ``--layers`` must name layers the model has (the message gives the model's range);
- ``--k`` must not exceed the rank of the smallest selected matrix (it is refused rather than
  clipped in silence; the library clips and notes it, see ``Report.notes``);
- the measurement's memory estimate (``geodrift.continuity.budget``) must fit ``--max-memory``.
"""

from __future__ import annotations

from geodrift.checks import format_size
from geodrift.continuity import MeasureSpec
from geodrift.continuity.budget import estimate_bytes
from geodrift.errors import GeodriftError
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


def check_plan(ws: WeightSet, spec: MeasureSpec, heads: tuple[int, int] | None, max_memory: int) -> int:
    """Refuse a ``--k`` above a selected matrix's rank, or a run whose estimate exceeds ``max_memory``.

    Args:
        ws: the selected projections (headers read, no data).
        spec: the measurement.
        heads: ``(n_heads, n_kv_heads)`` when the OV composite is scanned.
        max_memory: the ``--max-memory`` limit in bytes.

    Returns:
        The estimate in bytes.

    Raises:
        GeodriftError: naming the option, the estimate or rank, and the fix.
    """
    shapes = plan_shapes(ws, heads)
    role, (_, d_out, d_in) = min(shapes.items(), key=lambda item: min(item[1][1:]))
    if spec.k > min(d_out, d_in):
        raise GeodriftError(
            f"--k {spec.k}: larger than the rank of {role} ({min(d_out, d_in)} = min of its shape "
            f"{d_out} x {d_in}) in {ws.origin}; use --k {min(d_out, d_in)} or less (or leave {role} out with --roles)"
        )
    estimate = estimate_bytes(shapes, spec)
    if estimate > max_memory:
        raise GeodriftError(
            f"--null-draws {spec.null_draws}, --k {spec.k}{' --full-spectrum' if spec.full_spectrum else ''}: "
            f"this scan would need about {format_size(estimate)}, above --max-memory {format_size(max_memory)}; "
            "lower --null-draws (or --k, --layers) or raise --max-memory"
        )
    return estimate
