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
# Mixture-of-experts projections (geodrift.scanner.experts): the router ``(n_experts, d_model)``, the
# shared expert's MLP (Qwen2-MoE, DeepSeek) and, per expert ``e``, the roles ``expert_gate.e``,
# ``expert_up.e`` and ``expert_down.e`` (``EXPERT_ROLES`` names the families).
MOE_ROLES: tuple[str, ...] = ("router", "shared_gate", "shared_up", "shared_down")
EXPERT_ROLES: tuple[str, ...] = ("expert_gate", "expert_up", "expert_down")
ROLES: tuple[str, ...] = TRANSFORMER_ROLES + MOE_ROLES + MLP_ROLES

# Short labels used in tables and the paper's names for the projections.
ROLE_LABELS: dict[str, str] = {
    "attn_q": "Q", "attn_k": "K", "attn_v": "V", "attn_o": "O",
    "mlp_gate": "Gate", "mlp_up": "Up", "mlp_down": "Down",
    "router": "Router", "shared_gate": "Shared Gate", "shared_up": "Shared Up", "shared_down": "Shared Down",
    "expert_gate": "Gate", "expert_up": "Up", "expert_down": "Down",
    "mlp_in": "MLP in", "block": "Block",
    "attn_ov": "OV",
}

# The theory's prediction (paper section 5): which space of each projection should be continuous.
# "v" = input space (reads the residual stream, followed by a nonlinearity), "u" = output space
# (writes to the stream after a nonlinearity), None = neither (V has no adjacent symmetry breaker).
# The MoE rows apply the same read/write rule to projections the paper did not measure (docs/models.md):
# the router reads the stream and is followed by softmax/top-k (like Q, K); each expert, and the shared
# expert, is a SwiGLU MLP (Gate, Up read; Down writes after the activation).
PREDICTED_SPACE: dict[str, str | None] = {
    "attn_q": "v", "attn_k": "v", "mlp_gate": "v", "mlp_up": "v",
    "attn_o": "u", "mlp_down": "u",
    "attn_v": None,
    # The OV composite W_O W_V writes through O, so it inherits O's output-space continuity.
    "attn_ov": "u",
    "router": "v", "shared_gate": "v", "shared_up": "v", "shared_down": "u",
    "expert_gate": "v", "expert_up": "v", "expert_down": "u",
}

# One vocabulary for ``--roles`` and ``--names``: the short names the tables print (q, gate, router ...)
# and, as aliases kept from earlier versions, the canonical names (attn_q, mlp_gate ...).
ROLE_NAMES: dict[str, str] = {
    "q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_o", "gate": "mlp_gate", "up": "mlp_up",
    "down": "mlp_down", **{role: role for role in MOE_ROLES + EXPERT_ROLES},
}
# ``--roles experts`` selects every per-expert role.
EXPERTS_GROUP = "experts"


def expert_role(family: str, expert: int) -> str:
    """The role of one expert's projection: ``expert_role("expert_gate", 3) == "expert_gate.3"``."""
    return f"{family}.{expert}"


def split_expert_role(role: str) -> tuple[str, int] | None:
    """``"expert_gate.3" -> ("expert_gate", 3)``; None for any other role.

    Example:
        >>> split_expert_role("expert_down.12"), split_expert_role("attn_q")
        (('expert_down', 12), None)
    """
    family, dot, index = role.partition(".")
    if dot and family in EXPERT_ROLES and index.isdecimal():
        return family, int(index)
    return None


def across_experts_role(family: str, layer: int) -> str:
    """The experts of one layer compared with each other: ``across_experts_role("expert_gate", 3) == "expert_gate@3"``."""
    return f"{family}@{layer}"


def split_across_experts_role(role: str) -> tuple[str, int] | None:
    """``"expert_gate@3" -> ("expert_gate", 3)``; None for any other role."""
    family, at, layer = role.partition("@")
    if at and family in EXPERT_ROLES and layer.isdecimal():
        return family, int(layer)
    return None


def base_role(role: str) -> str:
    """The family of a per-expert role (``expert_gate.3 -> expert_gate``); any other role unchanged."""
    split = split_expert_role(role)
    return split[0] if split else role


def is_role(role: str) -> bool:
    """True for a role a WeightSet may hold (``ROLES``, or one expert's projection)."""
    return role in ROLES or split_expert_role(role) is not None


def role_label(role: str) -> str:
    """The table label: ``Q``, ``Router``, ``Gate e3`` (expert 3's Gate), ``Gate L3`` (layer 3's experts)."""
    split = split_expert_role(role)
    if split:
        return f"{ROLE_LABELS[split[0]]} e{split[1]}"
    across = split_across_experts_role(role)
    if across:
        return f"{ROLE_LABELS[across[0]]} L{across[1]}"
    return ROLE_LABELS.get(role, role)


def predicted_space(role: str) -> tuple[bool, str | None]:
    """``(has_prediction, space)`` of ``role``: the theory's continuous space (``v``, ``u`` or None = neither).

    The experts of one layer compared with each other (``expert_gate@3``) have no prediction: the
    theory is about depth, and experts sit side by side.

    Example:
        >>> predicted_space("expert_down.5"), predicted_space("attn_v"), predicted_space("unknown")
        ((True, 'u'), (True, None), (False, None))
    """
    base = base_role(role)
    return base in PREDICTED_SPACE, PREDICTED_SPACE.get(base)


def role_sort_key(role: str) -> tuple[int, int]:
    """Block order (``ROLE_LABELS`` order), experts by index within their family; unknown roles last."""
    order = list(ROLE_LABELS)
    split = split_expert_role(role) or split_across_experts_role(role)
    family, index = split if split else (role, -1)
    return (order.index(family) if family in order else len(order), index)


def canonical_role(name: str) -> str | None:
    """The canonical role of a ``--roles``/``--names`` name (``q``, ``attn_q``, ``expert_gate.3``), or None.

    Example:
        >>> canonical_role("Gate"), canonical_role("attn_q"), canonical_role("expert_up.2"), canonical_role("x")
        ('mlp_gate', 'attn_q', 'expert_up.2', None)
    """
    key = name.strip().lower()
    if key in ROLE_NAMES:
        return ROLE_NAMES[key]
    if key in TRANSFORMER_ROLES or split_expert_role(key) is not None:
        return key
    return None


def summarise_roles(roles: list[str]) -> str:
    """Roles for a message, each expert family shown once: ``attn_q, router, expert_gate.0-7``."""
    shown: list[str] = []
    for role in roles:
        split = split_expert_role(role)
        if split is None:
            shown.append(role)
            continue
        experts = sorted(e for r in roles if (s := split_expert_role(r)) and s[0] == split[0] for e in [s[1]])
        text = f"{split[0]}.{experts[0]}-{experts[-1]}" if len(experts) > 1 else role
        if text not in shown:
            shown.append(text)
    return ", ".join(shown)


def expand_roles(requested: list[str], present: list[str]) -> list[str]:
    """Requested roles with the families (``expert_gate``, ``experts``) expanded to the present experts."""
    out: list[str] = []
    for role in requested:
        if role == EXPERTS_GROUP:
            out += [r for r in present if split_expert_role(r)]
        elif role in EXPERT_ROLES:
            out += [r for r in present if base_role(r) == role and r != role]
        else:
            out.append(role)
    return list(dict.fromkeys(out))


# Where each projection lives inside one Hugging Face Llama decoder layer (``model.layers.{l}.<path>``).
# The simulator's Llama (geodrift.lm.llama) takes its names from this table; the scan reads the same
# names through gguf.TensorNameMap (geodrift.scanner.names); tests/test_names.py checks they agree.
HF_LLAMA_PROJECTIONS: dict[str, str] = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_o": "self_attn.o_proj", "mlp_gate": "mlp.gate_proj", "mlp_up": "mlp.up_proj",
    "mlp_down": "mlp.down_proj",
}

WeightKey = tuple[str, int]
_SKIP_FIX = "re-export it, exclude it with --roles/--layers, or skip it with --skip-nonfinite"


class BadTensor(GeodriftError):
    """A matrix whose values cannot be weights: NaN/Inf, or an outlier whose square overflows float32."""


@dataclass(frozen=True)
class WeightEntry:
    """One matrix: its shape (known without loading), where it came from, and how to load it.

    Attributes:
        shape: ``(d_out, d_in)``.
        source: a human-readable origin, e.g. ``"model.gguf:blk.3.attn_q.weight"``, used in errors.
        load: returns the float32 tensor of ``shape``; called once per use, never cached here.
        warm: brings the stored bytes into the page cache, keeping nothing (a read-ahead hint for a cold
            read; None: nothing to warm, e.g. tensors already in memory).
    """

    shape: tuple[int, int]
    source: str
    load: Callable[[], torch.Tensor]
    warm: Callable[[], None] | None = None


@dataclass
class WeightSet(Mapping[WeightKey, torch.Tensor]):
    """A mapping ``(role, layer) -> Tensor (d_out, d_in)``; values are loaded on access.

    Args:
        entries: one WeightEntry per key.
        origin: what the weights are (a path, ``"simulator"``); shown in reports.
        view: ``"raw"`` or ``"folded"`` (normalisation gains folded in); every number says which.
        before_rotation: ``(unrotated, basis)`` when every matrix is ``unrotated``'s with a residual basis
            change ``P = basis()`` applied (readers ``W P``, writers ``P^T W``; the canonical view): the
            measurement decomposes ``unrotated`` and rotates the singular vectors instead (exact, cheaper).
        notes: lines every report of these weights carries (e.g. why the default view is ``raw``).
        architecture: the checkpoint's architecture (``geodrift.architectures``; "" unknown): which exact gauges
            move each number (``moved_by``).

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
    before_rotation: tuple[WeightSet, Callable[[], torch.Tensor]] | None = None
    notes: tuple[str, ...] = ()
    architecture: str = ""

    def __post_init__(self) -> None:
        for (role, layer), entry in self.entries.items():
            if not is_role(role):
                raise GeodriftError(
                    f"{entry.source}: unknown role {role!r}; known roles are {', '.join(ROLES)} "
                    f"and {', '.join(f + '.N' for f in EXPERT_ROLES)} (expert N)"
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
        low, high = _extremes(tensor)  # one pass finds NaN/Inf and the peak the outlier test needs
        if not (math.isfinite(low) and math.isfinite(high)):
            raise BadTensor(
                f"{entry.source}: tensor contains NaN or Inf values; the checkpoint is corrupt or "
                f"was saved mid-divergence - {_SKIP_FIX}"
            )
        outlier = overflowing_outlier(tensor, max(-low, high))
        if outlier is not None:
            raise BadTensor(
                f"{entry.source}: a value of {outlier[0]:.3g} among weights of typical magnitude {outlier[1]:.3g} - "
                "at that spread the tensor's Gram overflows float32 even scaled to its typical magnitude, so the "
                f"data is corrupt (a damaged download or a bad conversion); {_SKIP_FIX}"
            )
        return tensor

    def without_bad_tensors(self) -> tuple[WeightSet, list[str]]:
        """This set without the matrices :meth:`__getitem__` refuses as corrupt (``--skip-nonfinite``): each is
        read once here, so the scan reads the others twice.

        Returns:
            ``(the kept set, one note per matrix skipped, naming its tensor and why)``.

        Raises:
            GeodriftError: when every matrix is corrupt.
        """
        kept: dict[WeightKey, WeightEntry] = {}
        notes: list[str] = []
        for key in self:
            try:
                self[key]
            except BadTensor as error:
                reason = str(error).split(" - ")[0]
                notes.append(f"skipped {key[0]}[{key[1]}] (--skip-nonfinite): {reason}; the layers beside it are "
                             "compared across the gap")
                continue
            kept[key] = self.entries[key]
        if not kept:
            raise GeodriftError(f"{self.origin}: every selected matrix is corrupt (non-finite or overflowing values); "
                                "nothing is left to scan")
        return WeightSet(kept, self.origin, self.view, notes=self.notes, architecture=self.architecture), notes

    def __iter__(self) -> Iterator[WeightKey]:
        return iter(sorted(self.entries, key=_key_order))

    def __len__(self) -> int:
        return len(self.entries)

    def roles(self) -> list[str]:
        """Roles present, in canonical order."""
        return sorted({role for role, _ in self.entries}, key=role_sort_key)

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
            held = self.roles()
            missing = [r for r in roles if not set(expand_roles([r], held)) & set(held)]
            if missing:
                raise GeodriftError(
                    f"--roles: {', '.join(missing)} not in {self.origin} (present: {summarise_roles(held)})"
                )
            roles = expand_roles(roles, held)
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
        inner = None if self.before_rotation is None else \
            (self.before_rotation[0].select(roles, layers), self.before_rotation[1])
        return WeightSet(kept, origin=self.origin, view=self.view, before_rotation=inner, notes=self.notes,
                         architecture=self.architecture)


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


FLOAT32_MAX = 3.4028234663852886e38
_SAMPLE = 4096  # magnitudes sampled (strided) for a tensor's typical magnitude


def _extremes(tensor: torch.Tensor) -> tuple[float, float]:
    # (min, max) in one reduction; NaN anywhere makes both NaN, an Inf shows in one of them.
    if tensor.numel() == 0 or not tensor.is_floating_point():
        return 0.0, 0.0
    low, high = torch.aminmax(tensor)
    return float(low), float(high)


def overflowing_outlier(tensor: torch.Tensor, peak: float | None = None) -> tuple[float, float] | None:
    """``(largest |value|, typical |value|)`` when the spread between them is past float32's squares, else None.

    A corrupted tensor (random bytes in the data) holds a few values like ``1e21`` among weights of
    magnitude ``1``: finite, but the Gram of the matrix - even rescaled so its typical entry is 1 -
    overflows float32, and its singular vectors are those of one entry. The test: ``(peak / typical)^2
    * n > float32's max`` and ``peak^2 * n > float32's max``, with ``n`` the longer side and ``typical`` the
    median nonzero magnitude of a strided sample. Weights uniformly near float32's limit (``3e37``) pass:
    their spread is small; so do tiny computed values with a wide spread (vanishing gradients, ``5e-3``
    among ``7e-25``): their Gram does not overflow. Costs
    one reduction (``aminmax``, shared with the NaN/Inf test: pass ``peak``) and a sort of 4,096 numbers.

    Example:
        >>> w = torch.ones(32, 16)
        >>> overflowing_outlier(w * 3e37) is None
        True
        >>> w[2, 3] = 2e21
        >>> overflowing_outlier(w) == (float(torch.tensor(2e21)), 1.0)
        True
        >>> overflowing_outlier(torch.full((32, 16), 7e-25).index_fill_(0, torch.tensor([0]), 5e-3)) is None
        True
    """
    if tensor.numel() == 0 or not tensor.is_floating_point():
        return None
    if peak is None:
        low, high = _extremes(tensor)
        peak = max(-low, high)
    longest = max(tensor.shape) if tensor.dim() else 1
    if peak == 0.0:
        return None
    flat = tensor.reshape(-1)
    sample = flat[:: max(1, flat.numel() // _SAMPLE)].abs()
    sample = sample[sample > 0]
    if sample.numel() == 0:
        return None
    typical = float(sample.double().median())
    # Both: the spread is past float32's squares, and so is the peak itself (its unscaled Gram overflows).
    # A computed tensor of tiny entries (vanishing gradients: 5e-3 among 7e-25) has the spread but not the
    # peak: its Gram is finite, and it is data, not corruption.
    if (peak / typical) ** 2 * longest > FLOAT32_MAX and peak * peak * longest > FLOAT32_MAX:
        return peak, typical
    return None


def _constant(tensor: torch.Tensor) -> Callable[[], torch.Tensor]:
    # Loader for an in-memory tensor: detached float32 view (a copy only if the dtype differs).
    return lambda: tensor.detach().to(torch.float32)


def _key_order(key: WeightKey) -> tuple[int, int, int]:
    role, layer = key
    return (*role_sort_key(role), layer)
