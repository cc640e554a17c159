"""The weight vocabulary: roles, keys and the WeightSet every producer of weights hands to metrics.

A WeightSet maps ``(role, layer)`` to a 2-D tensor in one orientation, ``(d_out, d_in)``, like
``nn.Linear.weight``. Values may be loaded lazily (the scanner streams one tensor at a time), so a
WeightSet stores a loader per key plus the shape known without loading (from a file header).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch

from geodrift.errors import GeodriftError

# Transformer projections, in reading order of a block; then the toy residual MLP's roles.
TRANSFORMER_ROLES: tuple[str, ...] = (
    "attn_q", "attn_k", "attn_v", "attn_o", "mlp_gate", "mlp_up", "mlp_down",
)
MLP_ROLES: tuple[str, ...] = ("mlp_in", "block")
ROLES: tuple[str, ...] = TRANSFORMER_ROLES + MLP_ROLES

# Short labels used in tables and the paper's names for the projections.
ROLE_LABELS: dict[str, str] = {
    "attn_q": "Q", "attn_k": "K", "attn_v": "V", "attn_o": "O",
    "mlp_gate": "Gate", "mlp_up": "Up", "mlp_down": "Down",
    "mlp_in": "MLP in", "block": "Block",
    "attn_ov": "OV",
}

# The theory's prediction (paper section 5): which space of each projection should be continuous.
# "v" = input space (reads the residual stream, followed by a nonlinearity), "u" = output space
# (writes to the stream after a nonlinearity), None = neither (V has no adjacent symmetry breaker).
PREDICTED_SPACE: dict[str, str | None] = {
    "attn_q": "v", "attn_k": "v", "mlp_gate": "v", "mlp_up": "v",
    "attn_o": "u", "mlp_down": "u",
    "attn_v": None,
    # The OV composite W_O W_V writes through O, so it inherits O's output-space continuity.
    "attn_ov": "u",
}

# Where each projection lives inside one Hugging Face Llama decoder layer (``model.layers.{l}.<path>``).
# The scan's name tables (geodrift.scan.names) and the simulator's Llama (geodrift.lm.llama) both
# derive their names from this one table.
HF_LLAMA_PROJECTIONS: dict[str, str] = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_o": "self_attn.o_proj", "mlp_gate": "mlp.gate_proj", "mlp_up": "mlp.up_proj",
    "mlp_down": "mlp.down_proj",
}

WeightKey = tuple[str, int]


@dataclass(frozen=True)
class WeightEntry:
    """One matrix: its shape (known without loading), where it came from, and how to load it.

    Attributes:
        shape: ``(d_out, d_in)``.
        source: a human-readable origin, e.g. ``"model.gguf:blk.3.attn_q.weight"``, used in errors.
        load: returns the float32 tensor of ``shape``; called once per use, never cached here.
    """

    shape: tuple[int, int]
    source: str
    load: Callable[[], torch.Tensor]


@dataclass
class WeightSet(Mapping[WeightKey, torch.Tensor]):
    """A mapping ``(role, layer) -> Tensor (d_out, d_in)``; values are loaded on access.

    Args:
        entries: one WeightEntry per key.
        origin: what the weights are (a path, ``"simulator"``); shown in reports.
        view: ``"raw"`` or ``"folded"`` (normalisation gains folded in); every number says which.

    Raises:
        GeodriftError: on an unknown role, a non-2-D shape, or shapes that differ across layers
            of one role.

    Example:
        >>> ws = WeightSet.from_tensors({("block", 0): torch.eye(3), ("block", 1): torch.eye(3)})
        >>> ws.layers("block")
        [0, 1]
    """

    entries: dict[WeightKey, WeightEntry]
    origin: str = "tensors"
    view: str = "raw"

    def __post_init__(self) -> None:
        for (role, layer), entry in self.entries.items():
            if role not in ROLES:
                raise GeodriftError(
                    f"{entry.source}: unknown role {role!r}; known roles are {', '.join(ROLES)}"
                )
            if len(entry.shape) != 2:
                raise GeodriftError(
                    f"{entry.source}: expected a 2-D weight matrix, got shape {tuple(entry.shape)}"
                )
            if layer < 0:
                raise GeodriftError(f"{entry.source}: layer index must be >= 0, got {layer}")
        for role in self.roles():
            shapes = {self.entries[(role, layer)].shape for layer in self.layers(role)}
            if len(shapes) > 1:
                detail = ", ".join(
                    f"layer {layer}: {self.entries[(role, layer)].shape}" for layer in self.layers(role)
                )
                raise GeodriftError(
                    f"{self.origin}: role {role} has inconsistent shapes across layers ({detail}); "
                    "continuity compares matrices of one shape - check the name mapping"
                )

    @classmethod
    def from_tensors(
        cls, tensors: Mapping[WeightKey, torch.Tensor], origin: str = "tensors", view: str = "raw"
    ) -> WeightSet:
        """Wrap in-memory tensors (the simulator's weights or gradients); no copy is made."""
        entries = {
            key: WeightEntry(tuple(t.shape), f"{origin}:{key[0]}[{key[1]}]", _constant(t))  # type: ignore[arg-type]
            for key, t in tensors.items()
        }
        return cls(entries, origin=origin, view=view)

    def __getitem__(self, key: WeightKey) -> torch.Tensor:
        entry = self.entries[key]
        tensor = entry.load()
        if tuple(tensor.shape) != entry.shape:
            raise GeodriftError(
                f"{entry.source}: loaded shape {tuple(tensor.shape)} differs from the header's {entry.shape}"
            )
        if not all_finite(tensor):
            raise GeodriftError(
                f"{entry.source}: tensor contains NaN or Inf values; the checkpoint is corrupt or "
                "was saved mid-divergence - re-export it or exclude this tensor with --roles/--layers"
            )
        return tensor

    def __iter__(self) -> Iterator[WeightKey]:
        return iter(sorted(self.entries, key=_key_order))

    def __len__(self) -> int:
        return len(self.entries)

    def roles(self) -> list[str]:
        """Roles present, in canonical order."""
        present = {role for role, _ in self.entries}
        return [r for r in ROLES if r in present]

    def layers(self, role: str) -> list[int]:
        """Sorted layer indices present for ``role``."""
        return sorted(layer for r, layer in self.entries if r == role)

    def shape(self, role: str) -> tuple[int, int]:
        """The common ``(d_out, d_in)`` of ``role``."""
        return self.entries[(role, self.layers(role)[0])].shape

    def select(self, roles: list[str] | None = None, layers: list[int] | None = None) -> WeightSet:
        """A sub-WeightSet restricted to ``roles`` and ``layers`` (None keeps all).

        Raises:
            GeodriftError: when a requested role or layer is absent.
        """
        if roles is not None:
            missing = [r for r in roles if r not in self.roles()]
            if missing:
                raise GeodriftError(
                    f"--roles: {', '.join(missing)} not in {self.origin} (present: {', '.join(self.roles())})"
                )
        if layers is not None:
            present = {layer for _, layer in self.entries}
            missing_layers = [str(x) for x in layers if x not in present]
            if missing_layers:
                shown = ", ".join(missing_layers[:5]) + (f" ... ({len(missing_layers)} in all)"
                                                         if len(missing_layers) > 5 else "")
                span = f"layers {min(present)}..{max(present)} present" if present else "no layers"
                raise GeodriftError(f"--layers: {shown} not in {self.origin} ({span})")
        wanted = None if layers is None else set(layers)
        kept = {
            key: entry
            for key, entry in self.entries.items()
            if (roles is None or key[0] in roles) and (wanted is None or key[1] in wanted)
        }
        return WeightSet(kept, origin=self.origin, view=self.view)


def all_finite(tensor: torch.Tensor) -> bool:
    """True when ``tensor`` has no NaN/Inf, without ``torch.isfinite``'s full-size temporaries.

    Any NaN or Inf makes the sum NaN or Inf, so a finite sum proves finiteness with one cheap
    reduction; only a non-finite sum (or an overflowing one) is checked element-wise, in chunks.

    Example:
        >>> all_finite(torch.tensor([1.0, float("nan")]))
        False
    """
    if math.isfinite(float(tensor.sum())):
        return True
    return all(bool(torch.isfinite(part).all()) for part in tensor.reshape(-1).split(1 << 20))


def _constant(tensor: torch.Tensor) -> Callable[[], torch.Tensor]:
    # Loader for an in-memory tensor: detached float32 view (a copy only if the dtype differs).
    return lambda: tensor.detach().to(torch.float32)


def _key_order(key: WeightKey) -> tuple[int, int]:
    role, layer = key
    index = ROLES.index(role) if role in ROLES else len(ROLES)
    return (index, layer)
