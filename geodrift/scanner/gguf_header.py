"""A lean GGUF header parser: metadata scalars and the tensor index, skipping big arrays.

``gguf.GGUFReader`` builds a numpy view for every string of the tokenizer tables (about 2 s for
SmolLM2's 49k-token vocabulary) although a weight scan never reads them. This parser walks the
same layout (GGUF v2/v3, little-endian) with ``struct`` and records arrays by length only.
The tensor data itself is still decoded by ``gguf.quants`` (see ``gguf_reader.py``), and a test
checks this index against ``gguf.GGUFReader`` on the embedded model.

Layout: ``"GGUF"``, u32 version, u64 tensor_count, u64 kv_count; kv pairs (string key, u32 type,
value); tensor infos (string name, u32 n_dims, u64 dims[n_dims] fastest-first, u32 ggml type,
u64 offset); padding to ``general.alignment`` (default 32); tensor data.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.scanner.validate import check_file

# GGUF value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_DEPTH = 4
# Fewest bytes one item of a type takes: bounds an array's count by the bytes left before reading it.
_MIN_WIDTH = {**{t: struct.calcsize("<" + f) for t, f in _SCALARS.items()}, _STRING: 8, _ARRAY: 12}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's index entry.

    Attributes:
        name: the GGUF tensor name.
        dims: ggml dims, fastest-varying first (``(d_in, d_out)`` for a matrix).
        ggml_type: the raw ``GGMLQuantizationType`` value.
        offset: absolute byte offset of the data in the file.
    """

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int


@dataclass(frozen=True)
class GGUFHeader:
    """Metadata (arrays as ``{"array_len": n}``), tensor infos in file order, and the file size."""

    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    file_size: int


class _Cursor:
    def __init__(self, buf: Any, size: int) -> None:
        self.buf, self.pos, self.size = buf, 0, size

    def take(self, fmt: str) -> Any:
        width = struct.calcsize("<" + fmt)
        if self.pos + width > self.size:
            raise ValueError(f"header ends early at byte {self.pos}")
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += width
        return value

    def string(self) -> str:
        length = self.take("Q")
        if self.pos + length > self.size:
            raise ValueError(f"string of {length} bytes runs past the end at byte {self.pos}")
        raw = bytes(self.buf[self.pos:self.pos + length])
        self.pos += length
        return raw.decode("utf-8", "replace")

    def skip_strings(self, count: int) -> None:
        for _ in range(count):
            length = self.take("Q")
            self.pos += length
            if self.pos > self.size:
                raise ValueError("string array runs past the end of the file")

    def value(self, vtype: int, keep: bool = False, depth: int = 0) -> Any:
        # keep: decode an array in full (the tokenizer tables), else record big arrays by length only.
        # depth: arrays of arrays nest at most _MAX_DEPTH deep (real files use 1; a forged file could recurse).
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.take("I"), self.take("Q")
            if depth >= _MAX_DEPTH:
                raise ValueError(f"metadata arrays nested more than {_MAX_DEPTH} deep at byte {self.pos}")
            if count * _MIN_WIDTH.get(item_type, 1) > self.size - self.pos:
                raise ValueError(f"array of {count} items runs past the end of the file at byte {self.pos}")
            if keep:
                if count > self.size:
                    raise ValueError(f"implausible array length {count}")
                return [self.value(item_type, depth=depth + 1) for _ in range(count)]
            if item_type == _STRING:
                self.skip_strings(count)
            elif item_type in _SCALARS:
                width = struct.calcsize("<" + _SCALARS[item_type]) * count
                if self.pos + width > self.size:
                    raise ValueError("array runs past the end of the file")
                if count <= 16:  # small arrays (e.g. per-layer head counts) are kept
                    values = list(struct.unpack_from(f"<{count}{_SCALARS[item_type]}", self.buf, self.pos))
                    self.pos += width
                    return values
                self.pos += width
            else:
                for _ in range(count):
                    self.value(item_type, depth=depth + 1)
            return {"array_len": count}
        raise ValueError(f"unknown metadata value type {vtype}")


def read_gguf_header(path: Path, label: str | None = None, arrays: frozenset[str] = frozenset()) -> GGUFHeader:
    """Parse a GGUF file's metadata and tensor index (no tensor data is read).

    Args:
        path: the ``.gguf`` file.
        label: how to name the file in errors (default: the path).
        arrays: metadata keys whose arrays are decoded in full (e.g. ``tokenizer.ggml.tokens``);
            other large arrays are recorded as ``{"array_len": n}``.

    Returns:
        A GGUFHeader.

    Raises:
        GeodriftError: bad magic, unsupported version or byte order, a header that ends early,
            or tensor data that would run past the end of the file.
    """
    label = label or str(path)
    size = check_file(path, "GGUF file").st_size
    corrupt = "the file is truncated or corrupt - re-download or re-convert it"
    if size < 24:
        raise GeodriftError(f"{label}: not a GGUF file ({size} bytes, too short for a header); {corrupt}")
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise GeodriftError(f"{label}: not a GGUF file (magic {bytes(buf[:4])!r}, expected b'GGUF'); {corrupt}")
        cur = _Cursor(buf, size)
        cur.pos = 4
        version = cur.take("I")
        if version & 0xFFFF == 0:
            raise GeodriftError(f"{label}: big-endian GGUF is not supported; convert it on a little-endian machine")
        if version not in (2, 3):
            raise GeodriftError(f"{label}: GGUF version {version} is not supported (2 and 3 are); re-convert the model")
        try:
            n_tensors, n_kv = cur.take("Q"), cur.take("Q")
            if n_tensors > size or n_kv > size:
                raise ValueError(f"implausible counts ({n_tensors} tensors, {n_kv} keys)")
            metadata: dict[str, Any] = {}
            for _ in range(n_kv):
                key = cur.string()
                metadata[key] = cur.value(cur.take("I"), keep=key in arrays)
            infos = []
            for _ in range(n_tensors):
                name = cur.string()
                n_dims = cur.take("I")
                if n_dims > 8:
                    raise ValueError(f"tensor {name!r} has {n_dims} dims")
                dims = tuple(cur.take("Q") for _ in range(n_dims))
                infos.append((name, dims, cur.take("I"), cur.take("Q")))
        except (ValueError, struct.error) as exc:
            raise GeodriftError(f"{label}: GGUF header is unreadable ({exc}); {corrupt}") from None
        alignment = metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise GeodriftError(f"{label}: invalid general.alignment {alignment!r}; {corrupt}")
        data_start = cur.pos + (-cur.pos) % alignment
    tensors = [TensorInfo(name, dims, gtype, data_start + offset) for name, dims, gtype, offset in infos]
    return GGUFHeader(metadata, tensors, size)
