"""A model's fingerprint for a report's provenance: cheap, and different for different checkpoints.

A whole-file sha256 of a 15 GB checkpoint costs as long as reading it; a header hash is the same for two
training steps of one model (same names, shapes and offsets). The fingerprint (method ``sha256-sampled-1``)
hashes, per file in name order: its name, its size, its first MiB (the header and the first tensors)
and 16 blocks of 64 KiB at evenly spaced offsets up to its end. Checkpoints that differ only outside
the sampled bytes get the same fingerprint: it identifies a file, it does not verify one. For a model
in memory the same is done over each tensor's name, dtype, shape and evenly spaced elements.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

METHOD = "sha256-sampled-1"
HEAD_BYTES = 1 << 20
BLOCKS, BLOCK_BYTES = 16, 1 << 16
# The files of a model folder that hold its weights and shape: what the fingerprint covers there.
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".json")


def _sample_file(digest: Any, path: Path) -> int:
    size = path.stat().st_size
    digest.update(f"{path.name}\0{size}\0".encode())
    with path.open("rb") as handle:
        digest.update(handle.read(HEAD_BYTES))
        for i in range(1, BLOCKS + 1):
            handle.seek(max(0, size * i // BLOCKS - BLOCK_BYTES))
            digest.update(handle.read(BLOCK_BYTES))
    return size


def file_fingerprint(path: str | Path) -> dict[str, Any]:
    """The fingerprint of a checkpoint file, or of a model folder's weight and config files.

    Returns:
        ``{"method": "sha256-sampled-1", "sha256": hex, "files": n, "bytes": total size}``.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "w.bin"
        >>> _ = path.write_bytes(bytes(range(256)) * 1000)
        >>> fp = file_fingerprint(path)
        >>> fp["method"], fp["files"], fp["bytes"], len(fp["sha256"])
        ('sha256-sampled-1', 1, 256000, 64)
    """
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES) \
        if path.is_dir() else [path]
    digest = hashlib.sha256()
    total = sum(_sample_file(digest, p) for p in files)
    return {"method": METHOD, "sha256": digest.hexdigest(), "files": len(files), "bytes": total}


def sample_indices(n: int, count: int) -> Any:
    """``min(count, n)`` evenly spaced indices into ``range(n)``, first and last included, in exact int64
    arithmetic: a float32 ``linspace`` rounds past ``n - 1`` once ``n`` exceeds 2^24.

    Example:
        >>> sample_indices(5, 3).tolist(), sample_indices(2**24 + 3, 2)[-1].item() == 2**24 + 2
        ([0, 2, 4], True)
    """
    import torch

    count = min(count, n)
    if count <= 1:
        return torch.zeros(count, dtype=torch.int64)
    return torch.arange(count, dtype=torch.int64) * (n - 1) // (count - 1)


def tensors_fingerprint(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint of tensors in memory (a state dict): names, dtypes, shapes and 4096 evenly spaced
    elements of each.

    Returns:
        ``{"method": "sha256-sampled-1", "sha256": hex, "files": 0, "bytes": total tensor bytes}``.
    """
    import torch

    digest = hashlib.sha256()
    total = 0
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(t, torch.Tensor):
            continue
        flat = t.detach().reshape(-1)
        total += flat.numel() * flat.element_size()
        digest.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        if flat.numel():
            picks = sample_indices(flat.numel(), 4096)
            digest.update(flat[picks].cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return {"method": METHOD, "sha256": digest.hexdigest(), "files": 0, "bytes": total}


def checkpoint_fingerprint(ckpt: Any) -> dict[str, Any]:
    """The fingerprint of an opened :class:`geodrift.scanner.checkpoint.Checkpoint`: its file(s), or its tensors
    when it is a state dict in memory."""
    if ckpt.format == "state-dict":
        return tensors_fingerprint({name: ckpt.load(name) for name in ckpt.tensor_names()})
    return file_fingerprint(ckpt.path)
