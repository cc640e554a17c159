"""The canonical residual basis of a Llama-family checkpoint and the maps into it (:mod:`geodrift.gauge.canonical`).

The basis ``P``: the eigenvectors of the token embedding's Gram ``E^T E`` (largest eigenvalue first; each
signed so that the token coordinates' third moment ``sum((E p)^3)`` is positive). The embedding is the one
residual-side matrix no other gauge touches, so a residual rotation ``R`` moves this basis to ``R P`` and every
weight expressed in it is unchanged, coordinates included (docs/verdicts.md). Only a whole-model canonical form
(:func:`geodrift.gauge.canonical.canonicalise`) needs ``P``: the scan's canonical view reads nothing off residual
coordinates (its null on the residual side is the rotation null), so it computes no basis (issue 38; the cost that
dominated an 8B model's default scan). :func:`rotate_residual` moves singular vectors by a residual rotation (the
series' alignment refits one after the decomposition).

Example:
    >>> p = residual_basis(torch.randn(50, 4, generator=torch.Generator().manual_seed(0)))
    >>> moved = to_basis({"o_proj": torch.eye(4)}, p)["o_proj"]  # a writer: P^T W
    >>> bool(torch.allclose(moved, p.T.float(), atol=1e-6))
    True
"""

from __future__ import annotations

from dataclasses import replace

import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.status import residual_spaces
from geodrift.linalg import SVDTriplets

WRITERS = ("o_proj", "down_proj")  # write the residual stream (its basis acts on their rows); the others read it
_TOKEN_BLOCK = 1024  # tokens per block of the residual basis's third moments
_DISTINCT = 1e-12  # eigenvalues of the embedding's Gram closer than this share of the largest: not distinct


def positive_third_moment(rows: torch.Tensor) -> torch.Tensor:
    """Signs ``(n,)`` making each row's ``sum(row^3)`` non-negative (+1 where it is exactly 0)."""
    # (n, d) -> (n,) signs making sum(row^3) >= 0 (+1 where it is exactly 0)
    return torch.where(rows.pow(3).sum(-1) < 0, -1.0, 1.0).to(rows.dtype)


def residual_basis(embedding: torch.Tensor) -> torch.Tensor:
    """The canonical residual basis ``P`` (``d x d``, orthogonal, columns = basis vectors) of a token embedding.

    Args:
        embedding: ``(vocab, d)``.

    Returns:
        float64 ``P``: eigenvectors of ``E^T E``, largest eigenvalue first, signs by a positive third moment
        (the Gram and the coordinates computed in the embedding's dtype).

    Raises:
        GeodriftError: a Gram that does not fix the basis: fewer tokens than the width, a zero or repeated
            eigenvalue (within 1e-12 of the largest).

    Example:
        >>> p = residual_basis(torch.randn(50, 4, generator=torch.Generator().manual_seed(0)))
        >>> bool(torch.allclose(p.T @ p, torch.eye(4, dtype=torch.float64)))
        True
    """
    if embedding.ndim != 2 or embedding.shape[0] < embedding.shape[1]:
        raise GeodriftError(f"the token embedding is {'x'.join(map(str, embedding.shape))}: fewer tokens than its "
                            "width, so its Gram does not fix a residual basis (rank-deficient)")
    # the Gram in the embedding's own precision (a float32 checkpoint's: 4x faster than float64 on a large
    # vocabulary), decomposed in float64 from its upper triangle
    values, vectors = torch.linalg.eigh(_upper_gram(embedding).to(torch.float64), UPLO="U")
    values, vectors = values.flip(-1), vectors.flip(-1)  # descending eigenvalues
    gaps = values[:-1] - values[1:]
    if float(values[0]) <= 0 or float(values[-1]) <= _DISTINCT * float(values[0]) or \
            bool((gaps <= _DISTINCT * values[0]).any()):
        raise GeodriftError(f"the token embedding ({'x'.join(map(str, embedding.shape))}) has a Gram with a zero or "
                            "repeated eigenvalue, so it does not fix a residual basis (its eigenvectors are not "
                            "unique); the scan needs none - only a whole-model canonical form does")
    # the tokens' coordinates in the embedding's precision too, cubed in place and summed in float64, a block of
    # tokens at a time (cache-sized: the whole (vocab, d) product costs more)
    basis = vectors.to(embedding.dtype)
    third = torch.zeros(vectors.shape[1], dtype=torch.float64)
    for start in range(0, embedding.shape[0], _TOKEN_BLOCK):
        third += (embedding[start:start + _TOKEN_BLOCK] @ basis).pow_(3).sum(0, dtype=torch.float64)
    return vectors * torch.where(third < 0, -1.0, 1.0).to(torch.float64).reshape(1, -1)


def _upper_gram(matrix: torch.Tensor) -> torch.Tensor:
    # E^T E, only its upper triangle valid: BLAS syrk (half gemm's work) for float32/float64 on the CPU
    if matrix.device.type != "cpu" or matrix.dtype not in (torch.float32, torch.float64) or matrix.requires_grad:
        return matrix.T @ matrix
    from scipy.linalg import blas

    rows = matrix.contiguous().numpy().T  # (d, vocab), Fortran order: no copy
    syrk = blas.ssyrk if matrix.dtype == torch.float32 else blas.dsyrk
    return torch.from_numpy(syrk(1.0, rows, trans=0, lower=0))


def to_basis(layer: dict[str, torch.Tensor], basis: torch.Tensor) -> dict[str, torch.Tensor]:
    """A layer's projections in the residual basis ``P``: readers ``W P``, writers ``P^T W`` (in the weights' dtype)."""
    out = {}
    for name, weight in layer.items():
        p = basis.to(weight.dtype)
        out[name] = p.T @ weight if name in WRITERS else weight @ p
    return out


def rotate_triplets(triplets: SVDTriplets, basis: torch.Tensor, left: bool, right: bool) -> SVDTriplets:
    """The singular triplets of ``P^T W`` (``left``) and/or ``W P`` (``right``) from those of ``W``.

    A residual rotation moves singular vectors exactly: ``W = U S Vh`` gives ``W P = U S (Vh P)`` and
    ``P^T W = (P^T U) S Vh``; values, Frobenius norm and residual are unchanged. Costs ``k x d x d``
    instead of the ``m x n x d`` of rotating ``W`` itself.

    Example:
        >>> from geodrift.linalg import top_k_svd
        >>> g = torch.Generator().manual_seed(0)
        >>> w, p = torch.randn(5, 4, generator=g), residual_basis(torch.randn(30, 4, generator=g)).float()
        >>> moved = rotate_triplets(top_k_svd(w, 2), p, left=False, right=True)
        >>> bool(torch.allclose((moved.Vh @ (w @ p).T @ (w @ p) @ moved.Vh.T).diag().sqrt(), moved.S, atol=1e-5))
        True
    """
    u = basis.T.to(triplets.U.dtype) @ triplets.U if left else triplets.U
    vh = triplets.Vh @ basis.to(triplets.Vh.dtype) if right else triplets.Vh
    return replace(triplets, U=u, Vh=vh)


def rotate_residual(spectra: dict[tuple[str, int], SVDTriplets],
                    basis: torch.Tensor) -> dict[tuple[str, int], SVDTriplets]:
    """Every matrix's triplets after the residual basis change ``P``: each role's residual-side vectors
    rotated (:func:`geodrift.gauge.status.residual_spaces`: readers' ``v``, writers' ``u``, both of OV).

    Args:
        spectra: ``{(role, layer): triplets}`` of the matrices before the change (``decompose``'s output).
        basis: ``P`` (``d x d``).

    Returns:
        The triplets of the matrices in ``P``.
    """
    # one product per side and dtype for every matrix's vectors (240 small products cost 3x more on SmolLM2)
    rows: dict[tuple[str, torch.dtype], list[tuple[tuple[str, int], torch.Tensor]]] = {}
    for key, triplets in spectra.items():
        spaces = residual_spaces(key[0])
        if "u" in spaces:
            rows.setdefault(("u", triplets.U.dtype), []).append((key, triplets.U.T))
        if "v" in spaces:
            rows.setdefault(("v", triplets.Vh.dtype), []).append((key, triplets.Vh))
    moved: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
    for (side, dtype), items in rows.items():
        product = torch.cat([m for _, m in items]) @ basis.to(dtype)  # rows r -> r P (u: (P^T U)^T = U^T P)
        for (key, _), block in zip(items, product.split([m.shape[0] for _, m in items]), strict=True):
            moved.setdefault(key, {})[side] = block
    out = {}
    for key, triplets in spectra.items():
        change = moved.get(key, {})
        out[key] = replace(triplets, U=change["u"].T.contiguous() if "u" in change else triplets.U,
                           Vh=change.get("v", triplets.Vh))
    return out


__all__ = ["WRITERS", "positive_third_moment", "residual_basis", "rotate_residual", "rotate_triplets",
           "to_basis"]
