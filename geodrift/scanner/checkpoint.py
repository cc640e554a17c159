"""The Checkpoint base class and the canonical plan every reader shares.

A reader subclass implements ``tensor_names``, ``shape`` and ``load`` (and, for stacked experts,
``load_expert``) for one file format; this module turns its names into canonical keys
(``geodrift.scanner.names``) and builds the *plan*: for every canonical key, which file tensor it
comes from, whether to transpose it, which rows of a fused tensor and which expert of a stacked
``(n_experts, d_out, d_in)`` tensor it takes. See ``geodrift.scanner.readers`` for the public functions.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.scanner.mapping import NameRule, match_name
from geodrift.scanner.names import CanonicalKey, NameTable
from geodrift.weights import EXPERT_ROLES, expert_role

# True while `geodrift inspect` opens a checkpoint: names nothing recognises are listed (as not scanned, with
# the reason) instead of refused - inspect is what one runs to write the --names mapping.
LISTING_UNKNOWN: ContextVar[bool] = ContextVar("listing_unknown", default=False)


@dataclass(frozen=True)
class Part:
    """Where one canonical tensor lives: a file tensor, an optional transpose, an optional row slice,
    and for a stacked ``(n_experts, d_out, d_in)`` tensor the expert it takes (transpose and rows
    then apply to that expert's matrix)."""

    name: str
    transpose: bool = False
    rows: tuple[int, int] | None = None
    expert: int | None = None


class Checkpoint:
    """One opened checkpoint; tensors are read lazily, one at a time.

    Attributes:
        path: the file or folder opened.
        format: ``"gguf"``, ``"safetensors"``, ``"hf-folder"`` or ``"pytorch"``.
        architecture: one of ``geodrift.scanner.names.ARCHITECTURES`` (or the file's own name for an
            architecture mapped with ``--names``).
        config: normalised hyperparameters, whatever is known: ``n_layers, d_model, n_heads,
            n_kv_heads, head_dim, d_ff, vocab_size, rope_theta, norm_eps, tie_embeddings``, and
            ``raw``: the source metadata (config.json or GGUF scalars).
        plan: canonical key -> Part (filled by the reader's constructor via :meth:`_build_plan`).
        skipped: file tensor name -> why it is not mapped (ignore lists, ``--names`` leaving it out).
        label: how the checkpoint is named in messages and reports.
    """

    path: Path
    format: str
    architecture: str
    config: dict[str, Any]
    plan: dict[CanonicalKey, Part]
    kinds_by_name: dict[str, CanonicalKey]
    skipped: dict[str, str]
    label: str

    def tensor_names(self) -> list[str]:
        """Every tensor name in the file(s), in file order."""
        raise NotImplementedError

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape ``load(name)`` returns, read from the header (no data is read)."""
        raise NotImplementedError

    def load(self, name: str) -> torch.Tensor:
        """One tensor as float32, dequantized, in Hugging Face's layout (see the reader's notes).

        Raises:
            GeodriftError: unknown name, unreadable data or an unsupported quantization type.
        """
        raise NotImplementedError

    def load_expert(self, name: str, expert: int) -> torch.Tensor:
        """Expert ``expert``'s matrix of a stacked ``(n_experts, d_out, d_in)`` tensor, float32.

        Readers override it to read that expert's bytes only; this default reads the whole stack.

        Raises:
            GeodriftError: an unknown name, a tensor that is not 3-D, or an expert out of range.
        """
        check_expert(self.label, name, self.shape(name), expert)
        return self.load(name)[expert].clone()

    def load_rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``[start, stop)`` of a 2-D tensor as float32 (the canonical view reads a large
        embedding in blocks). Readers override it to read those rows only; this default reads the whole tensor.
        """
        return self.load(name)[start:stop].clone()

    def warm(self, name: str) -> None:
        """Bring ``name``'s stored bytes into the page cache without keeping them (a read-ahead hint).

        The scan calls it on its reader thread for the next large matrix while the current one is
        decomposed, so a cold read overlaps with the compute without a second resident matrix. Readers
        that know a tensor's byte range override it; this default does nothing. Never raises (an
        unreadable tensor is reported by ``load``).
        """

    def check_readable(self, name: str) -> None:
        """Raise GeodriftError now if ``load(name)`` is bound to fail for a reason known from the header
        (e.g. a GGUF quantization type the installed gguf package cannot dequantize)."""

    def close(self) -> None:
        """Release file handles (readers map data per call, so this is cheap)."""

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Checkpoint {self.format} {self.architecture} {self.label}>"

    # ---- plan building (shared by every reader) ----

    def dtype(self, name: str) -> str:
        """How ``name`` is stored (``F32``, ``BF16``, ``Q4_1`` ...), from the header."""
        return "?"

    def _build_plan(self, rules: list[NameRule], table: NameTable | None, ignored: Any, lenient: bool = False) -> None:
        # Map every name (the user's rules first, then the built-in table), then expand fused and
        # stacked tensors into their roles. Names nothing matches are refused with the built-in
        # table alone; with a user mapping (``lenient``) they are left unmapped (``skipped``), so a
        # mapping need only name what should be scanned.
        kinds: dict[str, CanonicalKey] = {}
        owner: dict[CanonicalKey, str] = {}
        transposed: dict[str, bool] = {}
        unknown: list[str] = []
        self.skipped: dict[str, str] = {}
        for name in self.tensor_names():
            hit = match_name(name, rules)
            if hit is None and table is not None:
                hit = table.match(name)
            if hit is None:
                if ignored.fullmatch(name) is not None:
                    self.skipped[name] = "a buffer without weights (built-in ignore list)"
                elif lenient:
                    self.skipped[name] = "unmapped: no --names rule or built-in name matches it"
                elif LISTING_UNKNOWN.get():
                    self.skipped[name] = unknown_reason(getattr(self, "config", {}).get("raw"), self.architecture)
                else:
                    unknown.append(name)
                continue
            key, transpose = hit
            if key[0] == "ignore":
                self.skipped[name] = "ignored by a --names rule"
                continue
            if key in owner:
                raise GeodriftError(
                    f"{self.label}: tensors {owner[key]!r} and {name!r} both map to {key}; "
                    "fix the name mapping (--names) so each role/layer has one tensor"
                    + (" (an expert family takes the expert index from the rule's second group)"
                       if key[0] in EXPERT_ROLES else "")
                )
            owner[key] = name
            kinds[name] = key
            transposed[name] = transpose
        if unknown:
            factored_save(self.label, getattr(self, "config", {}).get("raw"), len(unknown))
            sample = ", ".join(unknown[:6]) + (f" ... ({len(unknown)} in all)" if len(unknown) > 6 else "")
            raise GeodriftError(
                f"{self.label}: {len(unknown)} tensor name(s) not recognised for architecture "
                f"{self.architecture!r}: {sample}; pass --names mapping.json with "
                '{"regex with (\\\\d+) for the layer": "attn_q", ...} (kind "ignore" skips a tensor)'
            )
        self.kinds_by_name = kinds
        plan: dict[CanonicalKey, Part] = {}
        for name, (kind, layer) in kinds.items():
            if kind == "attn_qkv" or kind == "attn_qkv_bias":
                suffix = "_bias" if kind.endswith("_bias") else ""
                total = self._fused_rows(name, transposed[name])
                q_rows, kv_rows = self._qkv_split(total, name)
                bounds = [(0, q_rows), (q_rows, q_rows + kv_rows), (q_rows + kv_rows, total)]
                for role, rows in zip(("attn_q", "attn_k", "attn_v"), bounds, strict=True):
                    plan[(role + suffix, layer)] = Part(name, transposed[name], rows)
            elif kind in EXPERT_ROLES:
                for expert in range(self._stacked_experts(name, kind)):
                    plan[(expert_role(kind, expert), layer)] = Part(name, transposed[name], expert=expert)
            elif kind == "mlp_gate_up":
                total = self._fused_rows(name, transposed[name])
                if total % 2:
                    raise GeodriftError(f"{self.label}:{name}: fused gate/up has an odd row count {total}")
                plan[("mlp_gate", layer)] = Part(name, transposed[name], (0, total // 2))
                plan[("mlp_up", layer)] = Part(name, transposed[name], (total // 2, total))
            else:
                plan[(kind, layer)] = Part(name, transposed[name])
        self.plan = plan

    def _stacked_experts(self, name: str, kind: str) -> int:
        shape = self.shape(name)
        if len(shape) != 3 or 0 in shape:
            raise GeodriftError(
                f"{self.label}:{name}: maps to {kind} (every expert stacked) but has shape {tuple(shape)}, not "
                f"(n_experts, d_out, d_in); for one expert per tensor capture its index as the --names rule's "
                "second group"
            )
        return shape[0]

    def _fused_rows(self, name: str, transpose: bool) -> int:
        shape = self.shape(name)
        return shape[-1] if transpose else shape[0]

    def _qkv_split(self, total: int, name: str) -> tuple[int, int]:
        # Rows of a fused [q; k; v]: q has n_heads * head_dim rows, k and v n_kv_heads * head_dim.
        n_heads = self.config.get("n_heads")
        n_kv = self.config.get("n_kv_heads", n_heads)
        head_dim = self.config.get("head_dim")
        if head_dim is None and n_heads and self.config.get("d_model"):
            head_dim = self.config["d_model"] // n_heads
        if n_heads and n_kv and head_dim:
            q_rows, kv_rows = n_heads * head_dim, n_kv * head_dim
        elif total % 3 == 0:  # no head counts known: equal thirds (multi-head attention)
            q_rows = kv_rows = total // 3
        else:
            raise GeodriftError(
                f"{self.label}:{name}: cannot split fused qkv of {total} rows without head counts; "
                "put a config.json (num_attention_heads, num_key_value_heads) next to the file"
            )
        if q_rows + 2 * kv_rows != total:
            raise GeodriftError(
                f"{self.label}:{name}: fused qkv has {total} rows but the head counts give "
                f"{q_rows} + 2 x {kv_rows}; check num_attention_heads/num_key_value_heads in the config"
            )
        return q_rows, kv_rows

    def canonical_shape(self, key: CanonicalKey) -> tuple[int, ...]:
        """The shape ``load_canonical`` returns for ``key``, from the header alone."""
        part = self.plan[key]
        shape = self.shape(part.name)
        if part.expert is not None:
            shape = shape[1:]
        if part.transpose:
            shape = tuple(reversed(shape))
        if part.rows is not None:
            shape = (part.rows[1] - part.rows[0],) + tuple(shape[1:])
        return tuple(shape)


def check_expert(label: str, name: str, shape: tuple[int, ...], expert: int) -> None:
    """Refuse reading expert ``expert`` of a tensor that is not a stack of that many experts.

    Raises:
        GeodriftError: naming the tensor, its shape and the expert asked for.
    """
    if len(shape) != 3 or not 0 <= expert < shape[0]:
        raise GeodriftError(
            f"{label}:{name}: has shape {tuple(shape)}, not (n_experts, d_out, d_in) with an expert {expert}; "
            "check the name mapping"
        )


def infer_config_from_shapes(ckpt: Checkpoint, config: dict[str, Any]) -> dict[str, Any]:
    """Fill what the names and header shapes tell (layers, widths, vocab, tying) where unknown."""
    layers = {layer for _, layer in ckpt.plan if layer is not None}
    if layers:
        config.setdefault("n_layers", max(layers) + 1)
    if ("embed", None) in ckpt.plan:
        vocab, d_model = ckpt.canonical_shape(("embed", None))[:2]
        config.setdefault("vocab_size", vocab)
        config.setdefault("d_model", d_model)
    first = min(layers) if layers else None
    if ("attn_q", first) in ckpt.plan:
        config.setdefault("d_model", ckpt.canonical_shape(("attn_q", first))[1])
    if ("mlp_up", first) in ckpt.plan:
        config.setdefault("d_ff", ckpt.canonical_shape(("mlp_up", first))[0])
    config.setdefault("tie_embeddings", ("lm_head", None) not in ckpt.plan)
    return config


def factored_save(label: str, raw_config: Any, unknown: int) -> None:
    """Say what a folder of geodrift's own factored save is, where its factors' names are not recognised
    (``--names`` cannot help: its projections are stored as two low-rank factors each, not one matrix).

    Raises:
        GeodriftError: when ``raw_config`` (config.json) holds ``geodrift_factored``; else nothing.

    Example:
        >>> factored_save("m", {}, 3)
    """
    if not isinstance(raw_config, dict) or "geodrift_factored" not in raw_config:
        return
    raise GeodriftError(
        f"{label}: a factored model written by geodrift compress share --save ({unknown} tensors are low-rank "
        "factors, not dense projections); scan or inspect a dense save instead (compress share --save-format "
        "dense), or load it in Python with geodrift.compress.factorized.load_factored"
    )


def unknown_reason(raw_config: Any, architecture: str | None) -> str:
    """Why ``geodrift inspect`` lists a tensor as not scanned when no name table recognises it.

    Example:
        >>> unknown_reason({}, "llama")
        "unmapped: not a tensor name of architecture 'llama'; a --names rule can map it"
    """
    if isinstance(raw_config, dict) and "geodrift_factored" in raw_config:
        return ("a low-rank factor of geodrift's factored save (compress share --save), not a dense projection; "
                "load it with geodrift.compress.factorized.load_factored")
    return f"unmapped: not a tensor name of architecture {architecture!r}; a --names rule can map it"


def warm_range(path: Path, offset: int, n_bytes: int, chunk: int = 8 << 20) -> None:
    """Read ``n_bytes`` of ``path`` from ``offset`` in ``chunk``-byte pieces, keeping none of them.

    The bytes land in the operating system's page cache (not in this process's memory), so the next
    read of that range comes from memory: :meth:`Checkpoint.warm`'s work. Never raises.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     _ = f.write(b"x" * 100); f.flush()
        ...     warm_range(Path(f.name), 10, 50, chunk=16)
    """
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            buffer = bytearray(min(chunk, max(n_bytes, 1)))
            left = n_bytes
            while left > 0:
                got = handle.readinto(buffer)
                if not got:
                    return
                left -= got
    except OSError:
        return

