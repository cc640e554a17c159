"""Singular triplets with one fixed convention: ``W = U diag(S) Vh``.

``v_k`` (rows of ``Vh``) live in the input space (what a layer reads), ``u_k`` (columns of ``U``)
in the output space (what it writes). Signs are arbitrary; every comparison downstream is ``|cos|``.

Two routes:
- exact: LAPACK SVD (``torch.linalg.svd``), used for small matrices or when ``k`` is a large share
  of the rank;
- iterative: ARPACK Lanczos (``scipy.sparse.linalg.eigsh``) on the Gram matrix of the smaller side
  for the top ``k``, followed by a residual
  check ``max_j ||W v_j - s_j u_j||, ||W^T u_j - s_j v_j|| <= tol * s_1``. An iterate that fails the
  check (or ARPACK that does not converge) falls back to the exact route; an unconverged vector is
  never returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.sparse.linalg import ArpackNoConvergence, eigsh

# Below this many entries the exact SVD is as fast as Lanczos and has no convergence question.
EXACT_MAX_NUMEL = 64 * 64
# When k exceeds this share of min(m, n), Lanczos loses its advantage.
EXACT_K_SHARE = 0.25


@dataclass(frozen=True)
class SVDTriplets:
    """The top-k singular triplets of one matrix.

    Attributes:
        U: ``(m, k)`` left singular vectors (output space), columns.
        S: ``(k,)`` singular values, descending.
        Vh: ``(k, n)`` right singular vectors (input space), rows.
        frobenius_sq: ``||W||_F^2 = sum of all sigma^2`` (also when ``k < rank``).
        residual: ``max_j max(||W v_j - s_j u_j||, ||W^T u_j - s_j v_j||) / s_1``.
        method: ``"exact"``, ``"lanczos"`` or ``"exact-fallback"``.
    """

    U: torch.Tensor
    S: torch.Tensor
    Vh: torch.Tensor
    frobenius_sq: float
    residual: float
    method: str

    @property
    def energy_share(self) -> torch.Tensor:
        """``(k,)``: ``sigma_j^2 / ||W||_F^2``, the weights of Eq. 2."""
        return self.S.double() ** 2 / max(self.frobenius_sq, 1e-300)


def top_k_svd(W: torch.Tensor, k: int, *, tol: float = 1e-4, method: str = "auto") -> SVDTriplets:
    """Top-``k`` singular triplets of ``W``.

    Args:
        W: ``(m, n)`` real matrix (any float dtype; computed in float32/float64).
        k: number of triplets, ``1 <= k <= min(m, n)``.
        tol: residual tolerance relative to ``s_1`` for the iterative route.
        method: ``"auto"``, ``"exact"`` or ``"lanczos"``.

    Returns:
        SVDTriplets with ``U (m, k)``, ``S (k,)``, ``Vh (k, n)`` in float32.

    Raises:
        ValueError: if ``W`` is not 2-D or ``k`` is out of range.

    Example:
        >>> t = top_k_svd(torch.diag(torch.tensor([3.0, 2.0, 1.0])), 1)
        >>> float(t.S[0])
        3.0
    """
    if W.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {tuple(W.shape)}")
    m, n = W.shape
    if not 1 <= k <= min(m, n):
        raise ValueError(f"k must be in [1, {min(m, n)}], got {k}")
    # float32 norm (an accurate scaled reduction in torch), without a float64 copy of W.
    frobenius_sq = float(torch.linalg.vector_norm(W.float())) ** 2
    use_exact = method == "exact" or (
        method == "auto" and (W.numel() <= EXACT_MAX_NUMEL or k > EXACT_K_SHARE * min(m, n))
    )
    if not use_exact:
        triplets = _lanczos(W, k, tol, frobenius_sq)
        if triplets is not None:
            return triplets
        return _exact(W, k, frobenius_sq, "exact-fallback")
    return _exact(W, k, frobenius_sq, "exact")


def batched_svd(W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact thin SVD of a stack of matrices (the simulator's layers), float64 inside.

    Args:
        W: ``(L, m, n)``.

    Returns:
        ``U (L, m, r)``, ``S (L, r)``, ``Vh (L, r, n)`` with ``r = min(m, n)``, in ``W``'s dtype.

    Example:
        >>> U, S, Vh = batched_svd(torch.randn(4, 8, 8))
        >>> Vh.shape
        torch.Size([4, 8, 8])
    """
    U, S, Vh = torch.linalg.svd(W.detach().double(), full_matrices=False)
    return U.to(W.dtype), S.to(W.dtype), Vh.to(W.dtype)


def _exact(W: torch.Tensor, k: int, frobenius_sq: float, method: str) -> SVDTriplets:
    W64 = W.detach().double()
    U, S, Vh = torch.linalg.svd(W64, full_matrices=False)
    U, S, Vh = U[:, :k], S[:k], Vh[:k]
    residual = _residual(W64, U, S, Vh)
    return SVDTriplets(U.float(), S.float(), Vh.float(), frobenius_sq, residual, method)


def _lanczos(W: torch.Tensor, k: int, tol: float, frobenius_sq: float) -> SVDTriplets | None:
    # Lanczos (ARPACK eigsh) on the Gram matrix of the smaller side: one BLAS-3 product, then cheap
    # matrix-vector products of size min(m, n). (Lanczos on W itself was 3x slower on a random
    # 14336 x 4096 matrix: its clustered top spectrum needs hundreds of memory-bound products.) Squaring the spectrum costs accuracy only for
    # directions far below s_1, which the residual check below catches (then the exact route runs).
    A = W.detach().float().numpy()
    m, n = A.shape
    gram = A.T @ A if m >= n else A @ A.T
    side = gram.shape[0]
    # ARPACK's start vector is fixed (ones) so results are deterministic without a global RNG.
    v0 = np.ones(side, dtype=gram.dtype)
    ncv = min(side - 1, max(2 * k + 1, 24))
    try:
        eigvals, eigvecs = eigsh(gram, k=k, which="LA", tol=tol * 1e-2, ncv=ncv, v0=v0)
    except (ArpackNoConvergence, ValueError):
        return None
    order = np.argsort(eigvals)[::-1]
    S = np.sqrt(np.clip(eigvals[order], 0.0, None))
    if S[-1] <= 0.0:
        return None
    vecs = eigvecs[:, order]
    if m >= n:
        Vh_np, U_np = vecs.T, (A @ vecs) / S
    else:
        U_np, Vh_np = vecs, ((A.T @ vecs) / S).T
    U_t = torch.from_numpy(np.ascontiguousarray(U_np, dtype=np.float32))
    S_t = torch.from_numpy(np.ascontiguousarray(S, dtype=np.float32))
    Vh_t = torch.from_numpy(np.ascontiguousarray(Vh_np, dtype=np.float32))
    # Re-normalise the derived side (division by S leaves O(eps) norm error).
    if m >= n:
        U_t = U_t / U_t.norm(dim=0, keepdim=True)
    else:
        Vh_t = Vh_t / Vh_t.norm(dim=1, keepdim=True)
    residual = _residual(W.detach().float(), U_t, S_t, Vh_t)
    if not residual <= tol:
        return None
    return SVDTriplets(U_t, S_t, Vh_t, frobenius_sq, residual, "lanczos")


def _residual(W: torch.Tensor, U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor) -> float:
    # (m, k) and (n, k) residual blocks of the two singular-vector equations, relative to s_1.
    W = W.to(U.dtype)
    right = W @ Vh.T - U * S
    left = W.T @ U - Vh.T * S
    worst = torch.maximum(right.norm(dim=0), left.norm(dim=0)).max()
    return float(worst / S[0].clamp_min(1e-300))
