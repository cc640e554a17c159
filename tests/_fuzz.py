"""Fuzzing the readers: mutated real safetensors and GGUF files through the open-and-scan path.

Shared by the bounded default test (tests/test_fuzz_readers.py) and the long run
(benchmarks/fuzz_readers.py). Seeds are real files written by the real writers (safetensors'
``save_file``, gguf's ``GGUFWriter``, quantized types included) and a byte-level GGUF built from
its fields. Mutations:

- byte level: bit flips, bytes set to boundary values, inserted/deleted/duplicated runs,
  truncation, little-endian u32/u64 fields overwritten with extreme values - twice as often
  inside the header as in the data;
- structure aware: the safetensors JSON header (shapes, dtypes, offsets, header length) and the
  GGUF fields (metadata types, values and counts, tensor dims, types, offsets, names) rewritten
  with hostile values, the rest of the file kept valid.

:func:`run_case` opens the file and runs the whole scan (``open_checkpoint`` -> ``weightset`` ->
``scan`` -> strict JSON written atomically). The only accepted outcomes are a report whose JSON is
strict, or a one-line :class:`GeodriftError`; anything else is a finding.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
import torch
from _checkpoints import (
    gguf_kv,
    gguf_string,
    hf_config,
    hf_to_gguf_tensors,
    llama_metadata,
    llama_state,
    write_gguf,
    write_hf_folder,
    write_raw_gguf,
)
from safetensors.torch import save_file

from geodrift.continuity import MeasureSpec
from geodrift.errors import GeodriftError
from geodrift.io.atomic import document, write_json
from geodrift.scanner.readers import open_checkpoint, weightset
from geodrift.scanner.scan import scan

_BOUNDARY_U64 = [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
_HOSTILE_VALUES = [0, -1, 1.5, "4", None, True, [4], {"a": 1}, 2**63, -(2**63), 10**30]


def seed_files(folder: Path) -> list[Path]:
    """The valid files every mutation starts from (each opens and scans cleanly)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = llama_state(3, 16, 2, 1, 32, vocab=20)
    seeds = []
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16")):
        path = folder / f"seed_{name}.safetensors"
        save_file({k: v.to(dtype).contiguous() for k, v in state.items()}, str(path))
        seeds.append(path)
    tensors = hf_to_gguf_tensors(llama_state(3, 32, 4, 2, 64, vocab=20), "llama", 4, 2)
    q = gguf.GGMLQuantizationType
    seeds.append(write_gguf(folder / "seed_f32.gguf", "llama", tensors, llama_metadata(3, 32, 4, 2, 64)))
    qtypes = {n: (q.Q8_0 if ".attn_" in n else q.Q4_0) for n, t in tensors.items() if t.ndim == 2 and "blk." in n}
    seeds.append(write_gguf(folder / "seed_q.gguf", "llama", tensors, llama_metadata(3, 32, 4, 2, 64), qtypes))
    seeds.append(write_raw_gguf(folder / "seed_raw.gguf", *_raw_gguf_fields()))
    return seeds


def _raw_gguf_fields() -> tuple[list[bytes], list[tuple[str | bytes, tuple[int, ...], int, bytes]]]:
    kvs, tensors = _raw_spec()
    return [gguf_kv(k, t, v) for k, t, v in kvs], tensors


def _raw_spec() -> tuple[list[tuple[str, int, bytes]], list[tuple[str | bytes, tuple[int, ...], int, bytes]]]:
    # A 3-layer llama GGUF as fields: (key, vtype, value bytes) and (name, dims, ggml type, data).
    kvs = [("general.architecture", 8, gguf_string("llama")), ("llama.block_count", 4, struct.pack("<I", 3)),
           ("llama.embedding_length", 4, struct.pack("<I", 16)),
           ("llama.attention.head_count", 4, struct.pack("<I", 2)),
           ("llama.attention.head_count_kv", 4, struct.pack("<I", 1)),
           ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + gguf_string("a") + gguf_string("b"))]
    rng = np.random.default_rng(0)
    tensors: list[tuple[str | bytes, tuple[int, ...], int, bytes]] = []
    for i in range(3):
        for short, dims in (("attn_q", (16, 16)), ("attn_k", (16, 8)), ("attn_v", (16, 8)), ("attn_output", (16, 16)),
                            ("ffn_gate", (16, 32)), ("ffn_up", (16, 32)), ("ffn_down", (32, 16))):
            tensors.append((f"blk.{i}.{short}.weight", dims, 0,
                            rng.standard_normal(dims[0] * dims[1]).astype(np.float32).tobytes()))
    return kvs, tensors


def byte_mutation(data: bytes, rng: random.Random, header_end: int) -> bytes:
    """One to four byte-level edits, biased towards the header (``[0, header_end)``)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not out:
            break
        limit = header_end if rng.random() < 0.67 else len(out)
        pos = rng.randrange(max(1, min(limit, len(out))))
        kind = rng.randrange(7)
        if kind == 0:
            out[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[pos] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0x01, 0x22, 0x5C])
        elif kind == 2:
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == 3:
            del out[pos:pos + rng.randint(1, 16)]
        elif kind == 4:
            out = out[:pos]
        elif kind == 5:
            chunk = out[pos:pos + rng.randint(1, 64)]
            out[pos:pos] = chunk
        else:
            width = rng.choice([4, 8])
            value = rng.choice(_BOUNDARY_U64) % (1 << (8 * width))
            out[pos:pos + width] = value.to_bytes(width, "little")
    return bytes(out)


def safetensors_structure_mutation(data: bytes, rng: random.Random) -> bytes:
    """Rewrite one field of the JSON header (shape, dtype, offsets, metadata) or its length."""
    (length,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    entry = header[name]
    kind = rng.randrange(9)
    if kind == 0:
        entry["shape"] = [rng.choice(_HOSTILE_VALUES) if rng.random() < 0.5 else d for d in entry["shape"]]
    elif kind == 1:
        entry["shape"] = rng.choice([[], [0, 16], [2**40, 2**40], [16] * 9, [-4, 4], [1]])
    elif kind == 2:
        entry["dtype"] = rng.choice(["F64", "I8", "U8", "BOOL", "F8_E4M3", "I64", "XYZ", "", 3])
    elif kind == 3:
        start, stop = entry["data_offsets"]
        entry["data_offsets"] = rng.choice([[stop, start], [start, stop + 4096], [start, start], [0, 2**64],
                                            [start + 1, stop + 1], [start], "x"])
    elif kind == 4:
        header["__metadata__"] = rng.choice([{"format": "pt"}, {"a": 1}, [1], "x", {"a": {"b": [1]}}])
    elif kind == 5:
        header[name + ".copy"] = dict(entry)
    elif kind == 6:
        del header[name]
    elif kind == 7:
        header[rng.choice(["model.layers.x.mlp.up_proj.weight", "\u0000bad", "model.layers.99999999999.mlp.up_proj.weight"])] = entry
    else:
        text = json.dumps(header).encode()
        fake = rng.choice([len(text) + 8, len(text) - 3, 2**63, 0, len(data)])
        return struct.pack("<Q", fake % 2**64) + text + body
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def gguf_structure_mutation(rng: random.Random) -> bytes:
    """A raw GGUF with one metadata or tensor-info field rewritten (the rest valid)."""
    kvs, tensors = _raw_spec()
    kind = rng.randrange(8)
    if kind == 0:  # a head count / width with another type or value
        index = rng.randrange(1, 5)
        key = kvs[index][0]
        kvs[index] = (key, *rng.choice([(4, struct.pack("<I", 0)), (4, struct.pack("<I", 2**32 - 1)),
                                        (6, struct.pack("<f", 2.5)), (8, gguf_string("2")), (7, b"\x01"),
                                        (5, struct.pack("<i", -2)), (10, struct.pack("<Q", 2**64 - 1)),
                                        (9, struct.pack("<IQ", 4, 1) + struct.pack("<I", 2))]))
    elif kind == 1:  # drop a key
        del kvs[rng.randrange(1, 5)]
    elif kind == 2:  # nested / oversized arrays
        depth = rng.choice([2, 5, 64])
        value = struct.pack("<IQ", 4, 0)
        for _ in range(depth):
            value = struct.pack("<IQ", 9, 1) + value
        kvs.append(("general.nested", 9, rng.choice([value, struct.pack("<IQ", 8, 2**62), struct.pack("<IQ", 99, 3)])))
    elif kind == 3:  # dims
        i = rng.randrange(len(tensors))
        name, dims, gtype, blob = tensors[i]
        tensors[i] = (name, rng.choice([(0, 16), (16,), (2**32, 2**32), (2**63, 2), (16, 16, 1, 1), (15, 16), ()]),
                      gtype, blob)
    elif kind == 4:  # type ids
        i = rng.randrange(len(tensors))
        name, dims, _, blob = tensors[i]
        tensors[i] = (name, dims, rng.choice([1, 2, 8, 12, 14, 30, 31, 40, 2**31]), blob)
    elif kind == 5:  # names
        i = rng.randrange(len(tensors))
        tensors[i] = (rng.choice([b"\xff\xfe", b"", tensors[0][0], "blk.x.attn_q.weight", "blk.1.attn_q.weight"]),
                      *tensors[i][1:])
    elif kind == 6:  # architecture
        kvs[0] = ("general.architecture", *rng.choice([(8, gguf_string("mamba")), (4, struct.pack("<I", 7)),
                                                       (8, gguf_string("")), (8, gguf_string("gemma2"))]))
    else:  # alignment
        kvs.append(("general.alignment", 4, struct.pack("<I", rng.choice([0, 3, 1, 2**31, 64]))))
    raw_kvs = [gguf_kv(k, t, v) for k, t, v in kvs]
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(raw_kvs)) + b"".join(raw_kvs)
    infos, data, offset = b"", b"", 0
    for name, dims, gtype, blob in tensors:
        raw = name.encode() if isinstance(name, str) else name
        infos += gguf_string(raw) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", gtype % 2**32, offset)
        padded = blob + b"\0" * (-len(blob) % 32)
        data += padded
        offset += len(padded)
    head = header + infos
    return head + b"\0" * (-len(head) % 32) + data


def write_folder_mutant(folder: Path, rng: random.Random) -> Path:
    """A sharded Hugging Face folder whose config.json or index json has one hostile field."""
    state = llama_state(3, 16, 2, 1, 32, vocab=20)
    config = hf_config(n_layers=3, d=16, n_heads=2, n_kv=1, d_ff=32, vocab=20)
    write_hf_folder(folder, state, config, shards=2, dtype=torch.float32)
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    kind = rng.randrange(5)
    if kind == 0:
        key = rng.choice(["num_attention_heads", "num_key_value_heads", "hidden_size", "num_hidden_layers",
                          "intermediate_size", "head_dim", "model_type", "text_config", "tie_word_embeddings"])
        config[key] = rng.choice(_HOSTILE_VALUES + ["mamba", "gemma2", "gpt2", 3, 7, 16])
    elif kind == 1:
        del config[rng.choice(["num_attention_heads", "num_key_value_heads", "hidden_size", "model_type"])]
    elif kind == 2:
        index["weight_map"] = rng.choice([[1, 2], "x", None, {"a": 1}, {"a": "../x"}, {"a": ""},
                                          {**index["weight_map"], "extra.weight": "model-00003-of-00002.safetensors"}])
    elif kind == 3:
        index = rng.choice([[], "x", {"no_map": 1}, None])
    else:
        config = rng.choice([[], "x", None, 3])
    (folder / "config.json").write_text(json.dumps(config))
    index_path.write_text(json.dumps(index))
    return folder


def header_end(path: Path, data: bytes) -> int:
    """Where the header ends (mutations favour it): the JSON header, or the GGUF infos (approximated)."""
    if path.suffix == ".safetensors" and len(data) >= 8:
        return min(len(data), 8 + struct.unpack_from("<Q", data)[0])
    return min(len(data), 2048)


def mutants(seeds: list[Path], count: int, seed: int, folder: Path) -> list[tuple[str, Path]]:
    """``count`` mutated files in ``folder``: ``(how it was made, path)``, deterministic in ``seed``."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    originals = {p: p.read_bytes() for p in seeds}
    for i in range(count):
        if rng.random() < 0.1:
            out.append(("structure:hf-folder", write_folder_mutant(folder / f"case{i:05d}", rng)))
            continue
        base = rng.choice(seeds)
        data = originals[base]
        roll = rng.random()
        if roll < 0.6:
            how, blob = f"bytes:{base.name}", byte_mutation(data, rng, header_end(base, data))
        elif base.suffix == ".safetensors":
            how, blob = f"structure:{base.name}", safetensors_structure_mutation(data, rng)
        else:
            how, blob = "structure:gguf", gguf_structure_mutation(rng)
        path = folder / f"case{i:05d}{base.suffix}"
        path.write_bytes(blob)
        out.append((how, path))
    return out


@dataclass
class Outcomes:
    """Counts of every outcome, and the findings (anything but a report or a one-line GeodriftError)."""

    counts: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)

    def add(self, outcome: str, finding: str | None = None) -> None:
        self.counts[outcome] += 1
        if finding is not None and len(self.findings) < 50:
            self.findings.append(finding)


def run_case(path: Path, out_dir: Path) -> tuple[str, str | None]:
    """Open and scan ``path``; return ``(outcome, finding or None)``.

    Outcomes: ``report`` (strict JSON written), ``error`` (one-line GeodriftError), ``multiline-error``
    and ``traceback:<Type>`` (both findings).
    """
    return _run_case(path, out_dir)


def remove_case(path: Path) -> None:
    """Delete a case (a file, or a folder of files)."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def _run_case(path: Path, out_dir: Path) -> tuple[str, str | None]:
    try:
        with open_checkpoint(path) as ckpt:
            ws = weightset(ckpt)
            report = scan(ws, MeasureSpec(k=2, null_draws=4))
        target = out_dir / f"{path.stem}.json"
        write_json(target, document("continuity_report", report.to_dict()))

        def refuse(constant: str) -> None:
            raise ValueError(f"non-strict JSON constant {constant}")

        json.loads(target.read_text(encoding="utf-8"), parse_constant=refuse)
        target.unlink()
        return "report", None
    except GeodriftError as error:
        if "\n" in str(error):
            return "multiline-error", f"{path.name}: multi-line message {str(error)!r}"
        return "error", None
    except Exception as error:  # the findings the harness exists for
        lines = traceback.format_exception(type(error), error, error.__traceback__)
        return f"traceback:{type(error).__name__}", f"{path.name}: {''.join(lines[-3:]).strip()}"
