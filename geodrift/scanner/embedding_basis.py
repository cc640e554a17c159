"""The canonical view's residual basis, read from a checkpoint's token embedding in bounded memory and time.

An embedding of at most :data:`WHOLE` entries (SmolLM2-135M's 28 M) gives
:func:`geodrift.gauge.basis.residual_basis`'s: the eigenvectors of ``E^T E`` (largest eigenvalue first), each
signed by a positive third moment of token coordinates. A wider one (Llama-3's 128,256 x 4,096: its float32 copy
is 2.1 GB and the eigendecomposition of a 4,096-square Gram alone takes longer than a scan's layers) is read
in :data:`CHUNKS` runs of consecutive token rows spread over the vocabulary, :data:`WHOLE` entries in all (the
rest is never read), and gives the orthonormal factor ``Q`` (``R``'s diagonal positive) of ``E_S^T M``: fixed
pseudo-random combinations ``M`` (one seed for every checkpoint) of those rows. Both are exact for the scan: a residual rotation maps ``E`` to ``E R^T`` and so each
basis to ``R P`` (``R E_S^T M = (R Q) R_f``), and every number read in it is unchanged. With ``centre``
(LayerNorm models) the rows are centred and projected off ``1`` first.

Example:
    >>> from geodrift.scanner.readers import open_checkpoint
    >>> tuple(embedding_basis(open_checkpoint(None)).shape)
    (576, 576)
"""

from __future__ import annotations

import torch

from geodrift.gauge.basis import residual_basis
from geodrift.scanner.checkpoint import Checkpoint

WHOLE = 1 << 25  # entries of an embedding read whole; of a larger one, the entries read (in CHUNKS runs of rows)
_MIXING_SEED = 42  # the fixed combinations of token rows a wide embedding's basis is built from
CHUNKS = 16  # runs of consecutive token rows a wide embedding's basis reads


def _centred(rows: torch.Tensor) -> torch.Tensor:
    rows = rows - rows.mean(0, keepdim=True)
    return rows - rows.mean(1, keepdim=True)


def embedding_basis(ckpt: Checkpoint, centre: bool = False) -> torch.Tensor:
    """The residual basis ``P`` (float64, ``d x d``) of ``ckpt``'s token embedding (module docstring)."""
    from geodrift.scanner.readers import load_canonical

    key = ("embed", None)
    vocab, d = ckpt.canonical_shape(key)[:2]
    part = ckpt.plan[key]
    if vocab * d <= WHOLE or part.transpose or part.rows is not None or part.expert is not None:
        embedding = load_canonical(ckpt, key)
        return residual_basis(_centred(embedding) if centre else embedding)
    chunks, length = _spans(vocab, d)
    mixing = torch.Generator().manual_seed(_MIXING_SEED)
    mixed = torch.zeros(d, d, dtype=torch.float64)
    total, weight_sum, count = torch.zeros(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64), 0
    for start in chunks:
        rows = ckpt.load_rows(part.name, start, start + length)
        weights = torch.randn(rows.shape[0], d, generator=mixing)  # the same draws for every checkpoint
        mixed += (rows.T @ weights).to(torch.float64)  # columns: fixed combinations of the token rows
        total += rows.sum(0, dtype=torch.float64)
        weight_sum += weights.sum(0, dtype=torch.float64)
        count += rows.shape[0]
    if not centre:
        return _orthonormal(mixed)
    # the rows centred and projected off 1: the combinations of (E_S - 1 m^T)(I - 1 1^T / d); the last basis vector
    # is 1 / sqrt(d), along which no centred reader or writer has a component
    mixed -= torch.outer(total / count, weight_sum)
    mixed -= mixed.mean(0, keepdim=True)
    ones = torch.full((d, 1), d ** -0.5, dtype=torch.float64)
    return torch.cat([_orthonormal(mixed[:, : d - 1]), ones], 1)


def _spans(vocab: int, d: int) -> tuple[list[int], int]:
    # CHUNKS runs of token rows spread evenly over the vocabulary, WHOLE entries in all (at least 2d rows)
    length = max(2 * d, WHOLE // d) // CHUNKS + 1
    return [c * vocab // CHUNKS for c in range(CHUNKS)], min(length, vocab // CHUNKS)


def _orthonormal(columns: torch.Tensor) -> torch.Tensor:
    # Q of columns = Q R with R's diagonal positive (a unique, rotation-equivariant choice)
    q, r = torch.linalg.qr(columns)
    return q * torch.where(torch.diagonal(r) < 0, -1.0, 1.0).to(torch.float64).reshape(1, -1)
