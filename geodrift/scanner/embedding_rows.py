"""A checkpoint's token embedding read in blocks of rows, for the canonical view's sign reference (its mean row).

The canonical factors are signed against the embedding's mean (:meth:`geodrift.scanner.canonical_view.CanonicalLayers.sign_reference`);
a wide embedding (Llama-3's 128,256 x 4,096: 2.1 GB in float32) is read :data:`BLOCK` entries at a time, so one
block is resident, never the whole matrix.

Example:
    >>> import functools
    >>> from geodrift.scanner.readers import load_canonical, open_checkpoint
    >>> ckpt = open_checkpoint(None)
    >>> sum(block.shape[0] for block in embedding_blocks(ckpt, functools.partial(load_canonical, ckpt)))
    49152
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from geodrift.scanner.checkpoint import Checkpoint

BLOCK = 1 << 22  # entries of the embedding read at a time (16 MiB in float32: under glibc's mmap threshold, so the blocks
# reuse one heap allocation instead of faulting in fresh pages: 64 MiB blocks took 0.7M page faults on Llama-3's 2.1 GB)


def embedding_blocks(ckpt: Checkpoint, load_whole: Callable[[tuple[str, None]], torch.Tensor]) -> Iterator[torch.Tensor]:
    """The rows of ``ckpt``'s token embedding (canonical key ``("embed", None)``), float32, in blocks of at most
    :data:`BLOCK` entries; one block (``load_whole(key)``: :func:`geodrift.scanner.readers.load_canonical`) when the
    embedding is small or stored transposed, split or per expert."""
    key = ("embed", None)
    vocab, d = ckpt.canonical_shape(key)[:2]
    part = ckpt.plan[key]
    if vocab * d <= BLOCK or part.transpose or part.rows is not None or part.expert is not None:
        yield load_whole(key).to(torch.float32)
        return
    rows = max(1, BLOCK // d)
    for start in range(0, vocab, rows):
        yield ckpt.load_rows(part.name, start, min(start + rows, vocab))
