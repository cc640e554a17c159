"""What geodrift sees in a checkpoint: every tensor, the role it maps to, or why it is not scanned.

``geodrift inspect MODEL [--names mapping.json]`` prints this before any scan, so a user can
write or check a ``--names`` mapping. Reads headers only (no tensor data). Rows are grouped by
role in block order (embeddings, Q, K, V, O, Gate, Up, Down, router, experts, norms, ...; unmapped
tensors last), each group by layer number (``blk.2`` before ``blk.10``).

Example:
    >>> from geodrift.scanner.readers import open_checkpoint
    >>> rows = inventory(open_checkpoint(None))
    >>> rows[0].name, rows[0].use
    ('token_embd.weight', 'not scanned')
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.fold import INPUT_SIDE, OUTPUT_SIDE
from geodrift.scanner.names import KINDS
from geodrift.weights import (
    EXPERT_ROLES,
    MOE_ROLES,
    ROLE_LABELS,
    TRANSFORMER_ROLES,
    role_label,
    split_expert_role,
)

SCANNED, FOLDED, NOT_SCANNED = "scanned", "folded", "not scanned"
_FUSED = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "mlp_gate_up": ("mlp_gate", "mlp_up")}
# Group order of the inventory: globals first, the projections in block order, then norms and the rest.
_GROUPS = (["embed", "pos_embed", "attn_qkv", *TRANSFORMER_ROLES[:4], "mlp_gate_up", *TRANSFORMER_ROLES[4:],
            *MOE_ROLES, "shared_router", *EXPERT_ROLES]
           + sorted(KINDS - {"ignore"}, key=lambda k: (k.endswith("_bias"), k)))
_GLOBAL_WHY = {
    "embed": "token embedding (not a per-layer projection)",
    "pos_embed": "learned position embedding (not a per-layer projection)",
    "lm_head": "output head (not a per-layer projection)",
    "norm_final": "final norm (after the last layer)",
    "norm_q": "per-head q norm (acts inside the attention score, not folded)",
    "norm_k": "per-head k norm (acts inside the attention score, not folded)",
    "shared_router": "the shared expert's one-row gate (a 1 x d vector, not a projection across depth)",
}


@dataclass(frozen=True)
class TensorRow:
    """One file tensor as geodrift reads it.

    Attributes:
        name, shape, dtype: as stored (shape from the header, dtype as the file names it).
        kind, layer: the canonical key it maps to (``geodrift.scanner.names``), or None when unmapped.
        use: ``scanned``, ``folded`` (a norm gain, folded into its projections by the folded and canonical views)
            or ``not scanned``.
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
    """Every tensor of ``ckpt`` with its role or the reason it is not scanned, grouped by role.

    Args:
        ckpt: an open checkpoint (``geodrift.scanner.readers.open_checkpoint``).

    Returns:
        One TensorRow per file tensor: grouped by role in block order, each group by layer (then
        expert) number, unmapped tensors last in natural order (``blk.2`` before ``blk.10``).
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
    return sorted(rows, key=_row_order)


def role_group(row: TensorRow) -> str:
    """The group a row is listed in: its kind, an expert's family (``expert_gate``), or ``unmapped``."""
    return "unmapped" if row.kind is None else role_group_of(row.kind)


def role_group_of(kind: str) -> str:
    """``expert_gate.3 -> expert_gate``; any other kind unchanged."""
    split = split_expert_role(kind)
    return split[0] if split else kind


def _row_order(row: TensorRow) -> tuple[int, int, int, list[tuple[int, int | str]]]:
    if row.kind is None:
        return (len(_GROUPS) + 1, -1, -1, _natural(row.name))
    split = split_expert_role(row.kind)
    family, expert = split if split else (row.kind, -1)
    group = _GROUPS.index(family) if family in _GROUPS else len(_GROUPS)
    return (group, row.layer if row.layer is not None else -1, expert, _natural(row.name))


def _natural(name: str) -> list[tuple[int, int | str]]:
    # "blk.2" before "blk.10": digit runs compare as numbers.
    return [(0, int(part)) if part.isdecimal() else (1, part) for part in re.split(r"(\d+)", name) if part]


def summary_line(ckpt: Checkpoint, rows: list[TensorRow]) -> str:
    """One line: how many tensors, how many scanned as how many projections over how many layers."""
    scanned = [r for r in rows if r.use == SCANNED]
    roles = {role for r in scanned for role in _FUSED.get(r.kind or "", (r.kind or "",))}
    experts = {role for role in roles if role in EXPERT_ROLES or split_expert_role(role)}
    families = {role_group_of(role) for role in experts}
    layers = {r.layer for r in scanned if r.layer is not None}
    folded = sum(r.use == FOLDED for r in rows)
    skipped = len(rows) - len(scanned) - folded
    moe = f" (experts: {len(families)} famil{'y' if len(families) == 1 else 'ies'})" if families else ""
    projections = len(roles - experts) + len(families)
    return (f"{ckpt.label} ({ckpt.format}, {ckpt.architecture}): {len(rows)} tensor{_s(len(rows))} - {len(scanned)} "
            f"scanned as {projections} projection{_s(projections)}{moe} over {len(layers)} layer{_s(len(layers))}, "
            f"{folded} norm gain{_s(folded)} folded into them (folded and canonical views), {skipped} not scanned")


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _describe(ckpt: Checkpoint, kind: str, layer: int | None) -> tuple[str, str]:
    at = f", layer {layer}" if layer is not None else ""
    if kind in TRANSFORMER_ROLES or kind in MOE_ROLES or split_expert_role(kind):
        return SCANNED, f"{role_label(kind)}{at}"
    if kind in EXPERT_ROLES:
        experts = sum(1 for k, lay in ckpt.plan if lay == layer and split_expert_role(k) and k.startswith(kind + "."))
        return SCANNED, f"{ROLE_LABELS[kind]} of {experts} experts (stacked){at}"
    if kind in _FUSED:
        parts = ", ".join(ROLE_LABELS[r] for r in _FUSED[kind])
        return SCANNED, f"split into {parts}{at}"
    if kind.endswith("_bias"):
        return NOT_SCANNED, f"bias of {kind.removesuffix('_bias')}{at} (continuity compares weight matrices)"
    present = {k if k in ROLE_LABELS else (split_expert_role(k) or (k,))[0] for k, _ in ckpt.plan}
    into = [_folded_label(r) for r, norm in INPUT_SIDE.items() if norm == kind and r in present]
    out = [_folded_label(r) for r, norm in OUTPUT_SIDE.items() if norm == kind and r in present]
    if into or out:
        side = f"{', '.join(into)} (input side)" if into else f"{', '.join(out)} (output side)"
        return FOLDED, f"norm gain of {side}{at}"
    return NOT_SCANNED, _GLOBAL_WHY.get(kind, kind) + at


def _folded_label(role: str) -> str:
    return f"experts' {ROLE_LABELS[role]}" if role in EXPERT_ROLES else ROLE_LABELS[role]
