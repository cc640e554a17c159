"""What geodrift sees in a checkpoint: every tensor, the role it maps to, or why it is not scanned.

``geodrift inspect MODEL [--names mapping.json]`` prints this before any scan, so a user can
write or check a ``--names`` mapping. Reads headers only (no tensor data).

Example:
    >>> from geodrift.scan.readers import open_checkpoint
    >>> rows = inventory(open_checkpoint(None))
    >>> rows[0].name, rows[0].use
    ('token_embd.weight', 'not scanned')
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from geodrift.scan.checkpoint import Checkpoint
from geodrift.scan.fold import INPUT_SIDE, OUTPUT_SIDE
from geodrift.weights import ROLE_LABELS, TRANSFORMER_ROLES

SCANNED, FOLDED, NOT_SCANNED = "scanned", "folded", "not scanned"
_FUSED = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "mlp_gate_up": ("mlp_gate", "mlp_up")}
_GLOBAL_WHY = {
    "embed": "token embedding (not a per-layer projection)",
    "pos_embed": "learned position embedding (not a per-layer projection)",
    "lm_head": "output head (not a per-layer projection)",
    "norm_final": "final norm (after the last layer)",
    "norm_q": "per-head q norm (acts inside the attention score, not folded)",
    "norm_k": "per-head k norm (acts inside the attention score, not folded)",
}


@dataclass(frozen=True)
class TensorRow:
    """One file tensor as geodrift reads it.

    Attributes:
        name, shape, dtype: as stored (shape from the header, dtype as the file names it).
        kind, layer: the canonical key it maps to (``geodrift.scan.names``), or None when unmapped.
        use: ``scanned``, ``folded`` (a norm gain, used by ``--view folded`` only) or ``not scanned``.
        detail: which projection(s) it becomes, or why it is not scanned.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str | None
    layer: int | None
    use: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def inventory(ckpt: Checkpoint) -> list[TensorRow]:
    """Every tensor of ``ckpt`` in file order, with its role or the reason it is not scanned.

    Args:
        ckpt: an open checkpoint (``geodrift.scan.readers.open_checkpoint``).

    Returns:
        One TensorRow per file tensor.
    """
    rows = []
    for name in ckpt.tensor_names():
        shape, dtype = tuple(ckpt.shape(name)), ckpt.dtype(name)
        key = ckpt.kinds_by_name.get(name)
        if key is None:
            why = getattr(ckpt, "skipped", {}).get(name, "unmapped")
            rows.append(TensorRow(name, shape, dtype, None, None, NOT_SCANNED, why))
            continue
        kind, layer = key
        use, detail = _describe(ckpt, kind, layer)
        rows.append(TensorRow(name, shape, dtype, kind, layer, use, detail))
    return rows


def summary_line(ckpt: Checkpoint, rows: list[TensorRow]) -> str:
    """One line: how many tensors, how many scanned as how many projections over how many layers."""
    scanned = [r for r in rows if r.use == SCANNED]
    roles = {role for r in scanned for role in _FUSED.get(r.kind or "", (r.kind,))}
    layers = {r.layer for r in scanned if r.layer is not None}
    folded = sum(r.use == FOLDED for r in rows)
    skipped = len(rows) - len(scanned) - folded
    return (f"{ckpt.label} ({ckpt.format}, {ckpt.architecture}): {len(rows)} tensors - {len(scanned)} scanned as "
            f"{len(roles)} projection(s) over {len(layers)} layer(s), {folded} norm gain(s) used by --view folded, "
            f"{skipped} not scanned")


def _describe(ckpt: Checkpoint, kind: str, layer: int | None) -> tuple[str, str]:
    at = f", layer {layer}" if layer is not None else ""
    if kind in TRANSFORMER_ROLES:
        return SCANNED, f"{ROLE_LABELS[kind]}{at}"
    if kind in _FUSED:
        parts = ", ".join(ROLE_LABELS[r] for r in _FUSED[kind])
        return SCANNED, f"split into {parts}{at}"
    if kind.endswith("_bias"):
        return NOT_SCANNED, f"bias of {kind.removesuffix('_bias')}{at} (continuity compares weight matrices)"
    into = [ROLE_LABELS[r] for r, norm in INPUT_SIDE.items() if norm == kind]
    out = [ROLE_LABELS[r] for r, norm in OUTPUT_SIDE.items() if norm == kind]
    if into or out:
        side = f"{', '.join(into)} (input side)" if into else f"{', '.join(out)} (output side)"
        return FOLDED, f"norm gain of {side}{at}; --view folded only"
    return NOT_SCANNED, _GLOBAL_WHY.get(kind, kind) + at
