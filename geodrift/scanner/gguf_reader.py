"""GGUF reader: metadata and tensor index from a lean header parser, data memory-mapped per tensor.

``load(name)`` maps only that tensor's byte range (``numpy.memmap``), dequantizes it with
``gguf.quants.dequantize`` (every type the installed ``gguf`` package implements; F64 and the
integer types are cast) and unmaps it again, so one tensor is resident at a time.

Two things llama.cpp's ``convert_hf_to_gguf.py`` changes are undone, so that ``load`` returns
Hugging Face's values:

- ``LlamaModel.permute``: for llama/mistral the rows of Q (with ``n_head``) and K (with
  ``n_head_kv``) were reordered for llama.cpp's interleaved rotary layout,
  ``W.reshape(n, 2, rows // n // 2, cols).swapaxes(1, 2)``; the inverse is
  ``W.reshape(n, rows // n // 2, 2, cols).swapaxes(1, 2)``.
- Gemma/Gemma2/Gemma3: ``norm.weight + 1`` was baked in; ``load`` subtracts 1 again (Hugging
  Face stores ``w`` and multiplies by ``1 + w``).

GGUF dims are stored fastest-first; ``shape``/``load`` give them in PyTorch order, which for
every projection is ``nn.Linear``'s ``(d_out, d_in)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geodrift.errors import GeodriftError
from geodrift.scanner.checkpoint import Checkpoint, check_expert, infer_config_from_shapes, warm_range
from geodrift.scanner.gguf_header import TensorInfo, read_gguf_header
from geodrift.scanner.mapping import NameRule
from geodrift.scanner.names import (
    GEMMA_FAMILY,
    GGUF_IGNORED,
    GGUF_PERMUTED_QK,
    NORM_KINDS,
    gguf_table,
    normalise_model_type,
)
from geodrift.scanner.validate import check_checkpoint, check_counts, check_projections, check_tensor_names

# Types we cast ourselves (gguf.quants.dequantize does not handle them).
_PLAIN_TYPES = {"F64", "I8", "I16", "I32", "I64"}
_SUPPORTED: set[str] = set()  # quantization types seen to dequantize in this process
_CORRUPT = "the file is truncated or corrupt - re-download or re-convert it"


def dequantize_q8_0(stored: np.ndarray) -> torch.Tensor:
    """Q8_0 blocks (a float16 scale and 32 int8 values, 34 bytes each) as float32, in torch.

    Bitwise ``gguf.quants.dequantize``'s result (both conversions are exact and each value is one float32
    product ``q * d``), at a third of its CPU time (the embedded SmolLM2's 49152 x 576 embedding: 0.06
    against 0.22 s): it is what the canonical view's signs read first.

    Args:
        stored: the tensor's bytes, ``uint8`` (any shape whose size is a multiple of 34).

    Returns:
        A flat float32 tensor of ``32 * stored.size / 34`` values.

    Example:
        >>> block = np.frombuffer(np.float16(0.5).tobytes() + bytes(range(32)), dtype=np.uint8)
        >>> dequantize_q8_0(block)[:3].tolist()
        [0.0, 0.5, 1.0]
    """
    raw = torch.from_numpy(np.array(stored, dtype=np.uint8).reshape(-1, 34))  # a copy out of the mapping
    scale = raw[:, :2].contiguous().view(torch.float16).to(torch.float32)  # (blocks, 1)
    return raw[:, 2:].view(torch.int8).to(torch.float32).mul_(scale).reshape(-1)


def unpermute_qk(weight: torch.Tensor, n_head: int, where: str = "") -> torch.Tensor:
    """Undo llama.cpp's rotary row permutation of a Q or K weight/bias (rows = n_head * head_dim).

    Args:
        weight: ``(n_head * head_dim, ...)`` as stored in the GGUF.
        n_head: heads of this projection (``n_head`` for Q, ``n_head_kv`` for K).
        where: ``file:tensor``, named in the error.

    Returns:
        The same shape, rows in Hugging Face's order.
    """
    rows = weight.shape[0]
    if rows % (2 * n_head):
        raise GeodriftError(f"{where + ': ' if where else ''}cannot undo the Q/K permutation: {rows} rows is not a "
                            f"multiple of 2 x {n_head} heads; check the head counts in the metadata")
    rest = tuple(weight.shape[1:])
    return weight.reshape(n_head, rows // n_head // 2, 2, *rest).swapaxes(1, 2).reshape(weight.shape).contiguous()


# normalised key -> GGUF metadata key after "<architecture>.".
_METADATA_KEYS = {
    "n_layers": "block_count", "d_model": "embedding_length", "d_ff": "feed_forward_length",
    "n_heads": "attention.head_count", "n_kv_heads": "attention.head_count_kv",
    "head_dim": "attention.key_length", "rope_theta": "rope.freq_base",
    "vocab_size": "vocab_size", "context_length": "context_length", "n_experts": "expert_count",
}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


_ITEM_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8,
                "I16": np.int16, "I32": np.int32, "I64": np.int64}


@dataclass(frozen=True)
class _Entry:
    # One tensor: numpy-order shape, ggml type, where its bytes are and how to view them.
    shape: tuple[int, ...]
    qtype: Any
    offset: int
    n_bytes: int
    item_dtype: Any
    item_shape: tuple[int, ...]


class GGUFCheckpoint(Checkpoint):
    """A ``.gguf`` file. See the module docstring for what ``load`` undoes."""

    def __init__(self, path: Path, rules: list[NameRule] | None = None, label: str | None = None,
                 architecture: str | None = None) -> None:
        self.path = path
        self.format = "gguf"
        self.label = label or str(path)
        header = read_gguf_header(path, self.label)
        check_tensor_names(self.label, [info.name for info in header.tensors])
        self._tensors = {info.name: self._entry(info, header.file_size) for info in header.tensors}
        raw = header.metadata
        arch_name = raw.get("general.architecture", "llama")
        if not isinstance(arch_name, str):
            raise GeodriftError(f"{self.label}: general.architecture must be a string, found {arch_name!r}; {_CORRUPT}")
        if architecture is not None:
            self.architecture = architecture
        elif rules:
            self.architecture = arch_name
        else:
            self.architecture = normalise_model_type(arch_name, f"{self.label} general.architecture")
        self.config = self._config(raw, arch_name)
        sources = {ours: f"{arch_name}.{theirs}" for ours, theirs in _METADATA_KEYS.items() if ours in self.config}
        if "n_heads" in sources and f"{arch_name}.attention.head_count_kv" not in raw:
            sources["n_kv_heads"] = (f"{arch_name}.attention.head_count_kv (missing: defaults to "
                                     f"{arch_name}.attention.head_count)")
        check_counts(self.label, self.config, sources)
        user = list(rules or [])
        self._build_plan(user, gguf_table(self.architecture), GGUF_IGNORED, lenient=bool(user))
        check_projections(self)
        infer_config_from_shapes(self, self.config)
        check_checkpoint(self, sources)
        self._check_permutable()

    def _entry(self, info: TensorInfo, file_size: int) -> _Entry:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import quant_shape_to_byte_shape

        try:
            qtype = GGMLQuantizationType(info.ggml_type)
            block, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise GeodriftError(
                f"{self.label}:{info.name}: unknown GGML type id {info.ggml_type}; the installed gguf package "
                "does not know it - upgrade it (pip install -U gguf) or re-quantize the file"
            ) from None
        shape = tuple(int(d) for d in reversed(info.dims))
        n_elems = math.prod(shape)  # Python ints: a forged dim cannot overflow (numpy's int64 product would)
        if (not shape and block > 1) or (shape and shape[-1] % block):
            raise GeodriftError(
                f"{self.label}:{info.name}: rows of {shape[-1] if shape else 'no'} values are not a multiple of the {qtype.name} "
                f"block size {block}; {_CORRUPT}"
            )
        n_bytes = n_elems * type_size // block
        if n_bytes > file_size or info.offset + n_bytes > file_size:
            raise GeodriftError(
                f"{self.label}:{info.name}: tensor data runs past the end of the file ({file_size} bytes); "
                "the file is truncated - re-download or re-convert it"
            )
        if qtype.name in _ITEM_DTYPES:
            return _Entry(shape, qtype, info.offset, n_bytes, _ITEM_DTYPES[qtype.name], shape)
        return _Entry(shape, qtype, info.offset, n_bytes, np.uint8, tuple(quant_shape_to_byte_shape(shape, qtype)))

    def _config(self, raw: dict[str, Any], arch: str) -> dict[str, Any]:
        def get(key: str) -> Any:
            return raw.get(f"{arch}.{key}")

        config: dict[str, Any] = {"raw": raw}
        for ours, theirs in _METADATA_KEYS.items():
            value = get(theirs)
            if value is not None and not isinstance(value, (list, dict)):  # per-layer arrays: not used
                config[ours] = value  # types are checked by geodrift.scanner.validate.check_counts
        eps = get("attention.layer_norm_rms_epsilon") or get("attention.layer_norm_epsilon")
        if isinstance(eps, (int, float)):
            config["norm_eps"] = float(eps)
        for key in ("rope_theta",):
            if not isinstance(config.get(key, 0.0), (int, float)):
                del config[key]
        if "n_heads" in config and "n_kv_heads" not in config:
            config["n_kv_heads"] = config["n_heads"]
        n_heads, d_model = config.get("n_heads"), config.get("d_model")
        if "head_dim" not in config and isinstance(n_heads, int) and isinstance(d_model, int) \
                and _positive_int(n_heads) and _positive_int(d_model):
            config["head_dim"] = d_model // n_heads
        config["tie_embeddings"] = "output.weight" not in self._tensors
        return config

    def tensor_names(self) -> list[str]:
        return list(self._tensors)

    def _check_permutable(self) -> None:
        # llama.cpp's Q/K row permutation is undone per head pair of rows: the rows must split evenly.
        if self.architecture not in GGUF_PERMUTED_QK:
            return
        for name, (kind, _) in self.kinds_by_name.items():
            if kind not in ("attn_q", "attn_q_bias", "attn_k", "attn_k_bias"):
                continue
            key, heads = self._permutation_heads(kind)
            rows = self.shape(name)[0]
            if heads is None:
                raise GeodriftError(
                    f"{self.label}:{name}: {self.architecture}.{key} is missing, so llama.cpp's Q/K row "
                    "permutation cannot be undone; add it to the GGUF metadata"
                )
            if rows % (2 * heads):
                raise GeodriftError(
                    f"{self.label}:{name}: cannot undo llama.cpp's Q/K row permutation: {rows} rows is not a "
                    f"multiple of 2 x {self.architecture}.{key} = {heads}; the head count or the tensor is wrong"
                )

    def _permutation_heads(self, kind: str) -> tuple[str, int | None]:
        if kind.startswith("attn_q"):
            return "attention.head_count", self.config.get("n_heads")
        return "attention.head_count_kv", self.config.get("n_kv_heads")

    def shape(self, name: str) -> tuple[int, ...]:
        return self._tensor(name).shape

    def qtype(self, name: str) -> str:
        """The GGML type name of ``name`` (``"Q4_1"``, ``"F32"`` ...)."""
        return str(self._tensor(name).qtype.name)

    def dtype(self, name: str) -> str:
        return self.qtype(name)

    def _tensor(self, name: str) -> _Entry:
        try:
            return self._tensors[name]
        except KeyError:
            raise GeodriftError(f"{self.label}: no tensor named {name!r}") from None

    def check_readable(self, name: str) -> None:
        qtype = self._tensor(name).qtype
        if qtype.name in _PLAIN_TYPES or qtype.name in ("F32", "F16") or qtype.name in _SUPPORTED:
            return
        from gguf import GGML_QUANT_SIZES, quants

        try:  # one zero block tells whether this gguf version implements the type
            quants.dequantize(np.zeros((1, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8), qtype)
        except NotImplementedError:
            raise GeodriftError(self._unsupported(name, qtype.name)) from None
        _SUPPORTED.add(qtype.name)

    def _unsupported(self, name: str, qtype: str) -> str:
        return (
            f"{self.label}:{name}: quantization type {qtype} cannot be dequantized by the installed gguf "
            "package; upgrade it (pip install -U gguf) or re-quantize the file to a supported type "
            "(e.g. Q8_0, Q4_K, F16)"
        )

    def load(self, name: str) -> torch.Tensor:
        return self._undo_converter(name, self._read(name, self._tensor(name)))

    def load_expert(self, name: str, expert: int) -> torch.Tensor:
        """Expert ``expert`` of a stacked ``(n_experts, d_out, d_in)`` tensor: only its bytes are mapped.

        Each expert's matrix is a contiguous ``1/n_experts`` of the tensor's bytes (quantization blocks
        run along the rows, and the expert index is the slowest dimension).
        """
        entry = self._tensor(name)
        check_expert(self.label, name, entry.shape, expert)
        size = entry.n_bytes // entry.shape[0]
        one = _Entry(entry.shape[1:], entry.qtype, entry.offset + expert * size, size, entry.item_dtype,
                     entry.item_shape[1:])
        return self._undo_converter(name, self._read(name, one))

    def warm(self, name: str) -> None:
        """Read ``name``'s stored bytes through the page cache, keeping nothing (see Checkpoint.warm)."""
        entry = self._tensors.get(name)
        if entry is not None:
            warm_range(self.path, entry.offset, entry.n_bytes)

    def _read(self, name: str, entry: _Entry) -> torch.Tensor:
        from gguf import quants

        qtype = entry.qtype
        # Map only this tensor's bytes; the mapping is dropped before returning.
        mapped = np.memmap(self.path, dtype=np.uint8, mode="r", offset=entry.offset, shape=(entry.n_bytes,))
        try:
            stored = np.asarray(mapped).view(entry.item_dtype).reshape(entry.item_shape)
            if qtype.name in _PLAIN_TYPES or qtype.name == "F32":
                values = np.array(stored, dtype=np.float32)  # a copy out of the mapping
            elif qtype.name == "Q8_0":
                return dequantize_q8_0(stored).reshape(entry.shape)
            else:
                try:
                    values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32)
                except NotImplementedError:
                    raise GeodriftError(self._unsupported(name, qtype.name)) from None
            del stored
        finally:
            del mapped
        return torch.from_numpy(np.ascontiguousarray(values)).reshape(entry.shape)

    def _undo_converter(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        kind = self.kinds_by_name.get(name, ("", None))[0] if hasattr(self, "kinds_by_name") else ""
        if self.architecture in GGUF_PERMUTED_QK and kind in ("attn_q", "attn_q_bias", "attn_k", "attn_k_bias"):
            heads = self._permutation_heads(kind)[1]
            assert heads is not None  # _check_permutable refused the file at open otherwise
            tensor = unpermute_qk(tensor, heads, f"{self.label}:{name}")
        if self.architecture in GEMMA_FAMILY and kind in NORM_KINDS:
            tensor = tensor - 1.0
        return tensor
