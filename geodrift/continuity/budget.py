"""How much memory a measurement will need, estimated from shapes alone (before any tensor is read).

The scan checks this estimate against ``--max-memory`` before it starts, so that an option such as
``--null-draws 1000000000`` is refused with the estimate instead of failing after minutes (or
swapping). The estimate is an upper bound of the measurement's large allocations:

- the permutation banks: one ``(draws, pairs, d)`` int64 bank per distinct ``(pairs, d)``, plus the
  float32 keys and argsort workspace that draw it (20 bytes per entry);
- the permuted samples: ``(draws, pairs, K)`` float32 per space and role;
- the kept singular triplets: ``K (m + n)`` float32 per matrix (``K`` = rank with ``--full-spectrum``);
- the largest matrix three times (stored as float32, its float64 copy in the exact route).
"""

from __future__ import annotations

from collections.abc import Mapping

from geodrift.continuity.measure import NULL_MAX_VECTORS, MeasureSpec

_BANK_BYTES_PER_ENTRY = 4 + 4  # int32 permutation and its int32 flat gather index (geodrift.metrics)


def estimate_bytes(shapes: Mapping[str, tuple[int, int, int]], spec: MeasureSpec) -> int:
    """Upper estimate of the bytes :func:`geodrift.continuity.measure` allocates for these matrices.

    Args:
        shapes: role -> ``(layers, d_out, d_in)``.
        spec: the measurement (k, null draws, full spectrum).

    Returns:
        Bytes.

    Example:
        >>> estimate_bytes({"attn_q": (30, 576, 576)}, MeasureSpec(k=8, null_draws=100)) < 2**30
        True
    """
    banks: set[tuple[int, int]] = set()
    total = 0
    largest = 0
    for layers, d_out, d_in in shapes.values():
        rank = min(d_out, d_in)
        keep = rank if spec.full_spectrum else min(spec.k, rank)
        pairs = max(layers - 1, 0)
        total += layers * keep * (d_out + d_in + 1) * 4
        largest = max(largest, d_out * d_in)
        for dim in (d_out, d_in):
            banks.add((pairs, dim))
            null_vectors = keep if keep <= NULL_MAX_VECTORS else NULL_MAX_VECTORS + min(spec.k, keep)
            total += spec.null_draws * pairs * null_vectors * 4
    total += sum(spec.null_draws * pairs * dim * _BANK_BYTES_PER_ENTRY for pairs, dim in banks)
    return total + largest * (4 + 8 + 8)
