"""Singular triplets with one fixed convention: ``W = U diag(S) Vh``.

``v_k`` (rows of ``Vh``) live in the input space (what a layer reads), ``u_k`` (columns of ``U``)
in the output space (what it writes). Signs are arbitrary; every comparison downstream is ``|cos|``.

Three routes:
- exact: LAPACK SVD (``torch.linalg.svd``), used for small matrices or when ``k`` is a large share
  of the rank;
- block Krylov (:mod:`geodrift.krylov`) for matrices whose smaller side is at least
  ``KRYLOV_MIN_SIDE``: products with ``W`` and ``W^T`` only, stopped at a budget of a fraction of the
  Gram product's work; if not accepted by then, the Lanczos route below;
- Lanczos: ARPACK (``scipy.sparse.linalg.eigsh``) on the Gram matrix of the smaller side for the top
  ``k``, and on the same matrix deflated by them for a bound of the next eigenvalue (the gap below the
  ``k``-th); for a Gram side up to ``EIGH_MAX_SIDE``, first every eigenpair from one LAPACK ``eigh`` of
  it (method ``"eigh"``, faster there than ARPACK's Python-driven iteration, measured), ARPACK only if
  the acceptance rule rejects that; beyond that side, when ARPACK's result is rejected (a random-like
  spectrum whose top eigenvalues lie within 0.1 %: the gap bound is first recomputed tightly), the top
  ``k + 1`` eigenpairs from LAPACK's ``syevr`` on the same Gram matrix (method ``"eigh-subset"``: the
  tridiagonal reduction, then those pairs only), before the exact route.

Every iterative result must pass the acceptance rule of :func:`geodrift.krylov.certify` (a residual
and gap bound that certifies each reported vector's ``|cos|`` with the exact one to be at least 0.999,
on both sides) and the residual check ``max_j ||W^T u_j - s_j v_j|| <= tol * s_1``; a result that
fails either (or ARPACK that does not converge) falls back to the exact route, so an uncertified
vector is never returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, LinearOperator, eigsh

from geodrift.errors import GeodriftError
from geodrift.krylov import BLOCK, Certificate, block_krylov, certify, products

# Below this many entries the exact SVD is as fast as Lanczos and has no convergence question.
EXACT_MAX_NUMEL = 64 * 64
# When k exceeds this share of min(m, n), Lanczos loses its advantage.
EXACT_K_SHARE = 0.25
# From this smaller side up, block Krylov goes first: its products cost 2 m n b per pass against m n^2
# for the Gram matrix, a saving only when n is large against the ~20-50 passes it needs.
KRYLOV_MIN_SIDE = 2048
# Up to this Gram side the Lanczos route takes every eigenpair of the Gram matrix from one LAPACK eigh
# instead of ARPACK: measured per matrix with one thread (benchmarks/RESULTS_routes.md), eigh is several
# times faster up to a side of 128, about even from 160 to 192, and slower beyond (3-4x at 576).
EIGH_MAX_SIDE = 128
# Block Krylov stops (for the Lanczos route) once its passes would exceed this share of the Gram
# product's work (n / (2 b) passes): a hard spectrum then costs at most 1.4x the Gram route.
KRYLOV_BUDGET = 0.4
# The deflated ARPACK run that bounds the gap below the k-th eigenvalue: first at this multiple of the
# vectors' tolerance (about 28 products per SmolLM2 matrix instead of 36), then, if the acceptance rule
# rejects that bound, once more at a tighter one (random spectra: the k-th gap is below the loose residual).
BOUND_LOOSENESS = (1000.0, 10.0)
# Largest entries outside this range are decomposed rescaled: their squares (the Gram route) would
# leave float32's range (about 1e-38 .. 3e38).
SAFE_MIN, SAFE_MAX = 1e-15, 1e15


@dataclass(frozen=True)
class SVDTriplets:
    """The top-k singular triplets of one matrix.

    Attributes:
        U: ``(m, k)`` left singular vectors (output space), columns.
        S: ``(k,)`` singular values, descending.
        Vh: ``(k, n)`` right singular vectors (input space), rows.
        frobenius_sq: ``||W||_F^2 = sum of all sigma^2`` (also when ``k < rank``).
        residual: ``max_j max(||W v_j - s_j u_j||, ||W^T u_j - s_j v_j||) / s_1``.
        method: ``"exact"``, ``"krylov"``, ``"eigh"`` (the Gram matrix's LAPACK eigendecomposition, a small
            side), ``"lanczos"``, ``"eigh-subset"`` (LAPACK's top ``k + 1`` eigenpairs of the Gram matrix,
            after ARPACK's were rejected) or ``"exact-fallback"``.
        passes: products with the whole matrix behind the result (a Gram product, a block product, a
            residual product or an SVD each count one); the structural guard watches it.
    """

    U: torch.Tensor
    S: torch.Tensor
    Vh: torch.Tensor
    frobenius_sq: float
    residual: float
    method: str
    passes: int = 0

    @property
    def energy_share(self) -> torch.Tensor:
        """``(k,)``: ``sigma_j^2 / ||W||_F^2``, the weights of Eq. 2."""
        return self.S.double() ** 2 / max(self.frobenius_sq, 1e-300)


def top_k_svd(W: torch.Tensor, k: int, *, tol: float = 1e-4, method: str = "auto") -> SVDTriplets:
    """Top-``k`` singular triplets of ``W``.

    Args:
        W: ``(m, n)`` real matrix (any float dtype; computed in float32/float64).
        k: number of triplets, ``1 <= k <= min(m, n)``.
        tol: residual tolerance relative to ``s_1`` for the iterative routes.
        method: ``"auto"``, ``"exact"``, ``"krylov"`` (then Lanczos if not accepted) or ``"lanczos"`` (ARPACK
            only; ``auto`` tries the Gram matrix's ``eigh`` first on a side up to ``EIGH_MAX_SIDE``).

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
    peak = 0.0
    if W.numel():  # the largest |entry|, without abs()'s full-size temporary (235 MB for a 14336 x 4096 matrix)
        low, high = torch.aminmax(W.detach())
        peak = max(-float(low), float(high))
    if peak > 0 and not SAFE_MIN <= peak <= SAFE_MAX:
        return _rescaled(W, k, tol, method, peak)
    # float32 norm (an accurate scaled reduction in torch), without a float64 copy of W.
    frobenius_sq = float(torch.linalg.vector_norm(W.float())) ** 2
    use_exact = method == "exact" or min(m, n) <= k + 2 or (
        method == "auto" and (W.numel() <= EXACT_MAX_NUMEL or k > EXACT_K_SHARE * min(m, n))
    )
    if use_exact:
        return _exact(W, k, frobenius_sq, "exact")
    passes = 0
    on_device = W.device.type != "cpu"  # a GPU: block Krylov there (no budget), the other routes on the CPU
    if on_device or method == "krylov" or (method == "auto" and min(m, n) >= KRYLOV_MIN_SIDE):
        triplets, passes = _krylov(W, k, tol, frobenius_sq, budgeted=method == "auto" and not on_device)
        if triplets is not None:
            return triplets
    W = W.cpu()
    # After a rejected block Krylov run the spectrum is known to be hard: no loose gap bound (see _lanczos).
    triplets = _lanczos(W, k, tol, frobenius_sq, passes, eigh_first=method == "auto", loose_bound=passes == 0)
    if triplets is not None:
        return triplets
    return _exact(W, k, frobenius_sq, "exact-fallback")


def _rescaled(W: torch.Tensor, k: int, tol: float, method: str, peak: float) -> SVDTriplets:
    # Entries near float32's limits: the Gram matrix (squares) would overflow or underflow. Decompose
    # W / peak, then scale S and ||W||_F^2 back in float64; where that leaves float32's range, keep the
    # common factor out (every consumer - energy shares, Eq. 2, Eq. 3 - is invariant to it).
    inner = top_k_svd((W.double() / peak).float(), k, tol=tol, method=method)
    S = inner.S.double() * peak
    if not bool(torch.isfinite(S.float()).all()) or not math.isfinite(inner.frobenius_sq * peak * peak):
        return SVDTriplets(inner.U, inner.S, inner.Vh, inner.frobenius_sq, inner.residual, inner.method + "-scaled")
    return SVDTriplets(inner.U, S.float(), inner.Vh, inner.frobenius_sq * peak * peak, inner.residual, inner.method)


@dataclass(frozen=True)
class MatrixProduct:
    """``W = B @ C`` kept as its two factors (e.g. the OV composite ``W_O W_V``), never formed.

    Attributes:
        B: ``(m, r)``.
        C: ``(r, n)``.
    """

    B: torch.Tensor
    C: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        """``(m, n)``, the shape of the product."""
        return self.B.shape[0], self.C.shape[1]

    def dense(self) -> torch.Tensor:
        """``(m, n)``: the product itself (the exact routes need it), float32.

        On float32 overflow (weights beyond ~1e18) the product is taken in float64 and brought back
        into float32's range; singular vectors, energy shares and every continuity number do not
        depend on the scale.
        """
        product = self.B @ self.C
        if not bool(torch.isfinite(product).all()):
            product = self.B.double() @ self.C.double()
            product = (product / product.abs().max()).float()
        return product


def top_k_svd_of_product(product: MatrixProduct, k: int, *, tol: float = 1e-4) -> SVDTriplets:
    """Top-``k`` singular triplets of ``B @ C`` from products with ``B`` and ``C`` only.

    Lanczos (ARPACK ``eigsh``) on the Gram operator of the smaller side, applied factor by factor:
    for ``n <= m``, ``x -> C^T (B^T B) (C x)`` with the ``(r, r)`` matrix ``B^T B`` formed once, so a
    product step costs ``O(r n + r^2)`` instead of forming ``B C`` (``O(m r n)``) and its Gram
    (``O(m n^2)``). ``||B C||_F^2 = sum((B^T B) * (C C^T))``. The same acceptance rule and residual
    check as :func:`top_k_svd` (through the factors), and the same exact fallback (on the formed product).

    Args:
        product: the factors, ``B (m, r)`` and ``C (r, n)``.
        k: number of triplets, ``1 <= k <= min(m, n)``.
        tol: residual tolerance relative to ``s_1``.

    Returns:
        SVDTriplets with ``U (m, k)``, ``S (k,)``, ``Vh (k, n)`` in float32; method ``"lanczos"``
        or ``"exact-fallback"``.

    Raises:
        ValueError: if ``k`` is out of range.

    Example:
        >>> B, C = torch.diag(torch.tensor([3.0, 2.0])), torch.eye(2)
        >>> float(top_k_svd_of_product(MatrixProduct(B, C), 1).S[0])
        3.0
    """
    B, C = product.B.detach().float(), product.C.detach().float()
    m, n = product.shape
    if not 1 <= k <= min(m, n):
        raise ValueError(f"k must be in [1, {min(m, n)}], got {k}")
    BtB, CCt = B.T @ B, C @ C.T  # (r, r) each
    if not bool(torch.isfinite(BtB).all() and torch.isfinite(CCt).all()):
        # float32 overflow (weights beyond ~1e18): rescale both factors; singular vectors, energy shares
        # and every continuity number do not depend on the scale.
        B, C = B / B.abs().max(), C / C.abs().max()
        BtB, CCt = B.T @ B, C @ C.T
    BtB, CCt = BtB.double(), CCt.double()
    frobenius_sq = float((BtB * CCt).sum())
    if not np.isfinite(frobenius_sq) or min(m, n) <= k + 1:
        return _exact(B @ C, k, frobenius_sq, "exact-fallback")
    # The Gram operator of the smaller side, as (r, side) and (side, r) factors around an (r, r) core.
    if n <= m:
        outer, core, side = C.numpy(), BtB.float().numpy(), n  # C^T core C
    else:
        outer, core, side = B.T.contiguous().numpy(), CCt.float().numpy(), m  # B core B^T
    gram = LinearOperator((side, side), matvec=lambda x: outer.T @ (core @ (outer @ x)), dtype=np.float32)
    pairs = _top_eigenpairs(gram, k, tol) if min(m, n) > k + 2 else None
    bound = _next_eigenvalue_bound(gram, pairs, tol) if pairs is not None else None
    if pairs is None or bound is None:
        return _exact(B @ C, k, frobenius_sq, "exact-fallback")
    if n <= m:  # the eigenvectors are right singular vectors of B C
        certificate = certify(lambda z: B @ (C @ z), lambda z: ((z.T @ B) @ C).T, pairs[1], bound)
    else:  # left ones: certify B C's transpose
        certificate = certify(lambda z: ((z.T @ B) @ C).T, lambda z: B @ (C @ z), pairs[1], bound)
    return _accepted(certificate, pairs[1], k, tol, frobenius_sq, transposed=n > m, passes=2) \
        or _exact(B @ C, k, frobenius_sq, "exact-fallback")


def batched_svd_triplets(W: torch.Tensor, k: int, checked: int = 8, tol: float = 1e-8) -> list[SVDTriplets]:
    """Top-``k`` triplets of a stack of same-shaped matrices, batched float64 LAPACK.

    Two exact routes: for ``k`` up to a quarter of the rank, an eigendecomposition of the float64
    Gram matrix of the smaller side (``torch.linalg.eigh``; 3.6x faster than the SVD on 8 matrices
    of 512 x 128), accepted per matrix only when the residual check passes (relative ``<= tol``,
    i.e. float64 accuracy) and ``s_k > 0``; otherwise, and for larger ``k``, the SVD
    (``torch.linalg.svd``).

    Args:
        W: ``(L, m, n)``.
        k: triplets kept per matrix, ``1 <= k <= min(m, n)`` (``frobenius_sq`` always uses all).
        checked: the residual is computed over the top ``min(k, checked)`` triplets, which keeps a
            full-spectrum decomposition from paying a second full matrix product.
        tol: accepted residual of the Gram route, relative to ``s_1``.

    Returns:
        One SVDTriplets per matrix (float32, method ``"exact"`` or ``"exact-gram"``), in stack order.

    Example:
        >>> [t.S.shape[0] for t in batched_svd_triplets(torch.randn(3, 8, 6), 2)]
        [2, 2, 2]
    """
    if W.ndim != 3 or not 1 <= k <= min(W.shape[1:]):
        raise ValueError(f"expected (L, m, n) and 1 <= k <= min(m, n); got {tuple(W.shape)} and k={k}")
    W64 = W.detach().double()
    c = min(k, checked)
    methods = ["exact"] * W.shape[0]
    if k <= EXACT_K_SHARE * min(W.shape[1:]):
        U, S, Vh, frobenius = _gram_triplets(W64, k)
        residual = _batched_residual(W64, U, S, Vh, c)
        ok = (residual <= tol) & (S[:, -1] > 0)
        methods = ["exact-gram" if bool(good) else "exact" for good in ok]
        if not bool(ok.all()):
            bad = ~ok
            U[bad], S[bad], Vh[bad], frobenius[bad], residual[bad] = _svd_triplets(W64[bad], k, c)
    else:
        U, S, Vh, frobenius, residual = _svd_triplets(W64, k, c)
    # Singular values beyond float32's range (entries near 1e37): keep the common factor s_1 out, as
    # top_k_svd does; energy shares, Eq. 2 and Eq. 3 do not depend on it.
    big = ~torch.isfinite(S.float()).all(-1)
    if bool(big.any()):
        scale = S[:, :1].clamp_min(1e-300)
        S = torch.where(big.unsqueeze(-1), S / scale, S)
        frobenius = torch.where(big, frobenius / scale[:, 0] ** 2, frobenius)
        methods = [m + "-scaled" if bool(b) else m for m, b in zip(methods, big, strict=True)]
    return [SVDTriplets(U[i].float(), S[i].float(), Vh[i].float(), float(frobenius[i]), float(residual[i]), methods[i])
            for i in range(W.shape[0])]


def _svd_triplets(W64: torch.Tensor, k: int, c: int) -> tuple[torch.Tensor, ...]:
    # LAPACK SVD of a stack (L, m, n): top-k U (L, m, k), S (L, k), Vh (L, k, n), ||W||_F^2 (L,), residual (L,).
    U, S, Vh = robust_svd(W64)
    frobenius = S.pow(2).sum(-1)
    U, S, Vh = U[..., :k], S[..., :k], Vh[:, :k]
    return U, S, Vh, frobenius, _batched_residual(W64, U, S, Vh, c)


def _gram_triplets(W64: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    # Top-k from eigh of the smaller side's Gram matrix; the other side's vectors are W v / s.
    m, n = W64.shape[1:]
    gram = W64.mT @ W64 if m >= n else W64 @ W64.mT  # (L, r, r)
    eigvals, eigvecs = torch.linalg.eigh(gram)  # ascending
    frobenius = eigvals.sum(-1)
    top = eigvecs[..., -k:].flip(-1)  # (L, r, k), descending
    S = eigvals[..., -k:].flip(-1).clamp_min(0.0).sqrt()  # (L, k)
    other = (W64 @ top if m >= n else W64.mT @ top) / S.clamp_min(1e-300).unsqueeze(1)
    other = other / other.norm(dim=1, keepdim=True).clamp_min(1e-300)
    U, V = (other, top) if m >= n else (top, other)
    return U, S, V.mT, frobenius


def _batched_residual(W64: torch.Tensor, U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor, c: int) -> torch.Tensor:
    # max over the top c triplets of max(||W v - s u||, ||W^T u - s v||) / s_1, per matrix: (L,)
    right = W64 @ Vh[:, :c].mT - U[..., :c] * S[:, None, :c]  # (L, m, c)
    left = (U[..., :c].mT @ W64).mT - Vh[:, :c].mT * S[:, None, :c]  # (L, n, c)
    return torch.maximum(right.norm(dim=1), left.norm(dim=1)).amax(-1) / S[:, 0].clamp_min(1e-300)


def top_right_vectors(M: torch.Tensor, warm: torch.Tensor | None, tol: float = 1e-5,
                      iterations: int = 100) -> torch.Tensor:
    """Principal right singular vector of each matrix of a stack, warm-started power iteration.

    Float32 power iteration ``v <- M^T M v`` (two mat-vecs, no Gram matrix) from ``warm``; matrices
    whose relative eigen-residual ``||M^T M v - lam v|| / lam`` stays above ``tol`` (and all of them
    without a warm start) fall back to an exact ``eigh`` of ``M^T M``. The angle error of v1 is about
    residual / relative gap, far below 1e-3 for the gaps of trained gradient sums (~0.3-0.5).

    Args:
        M: ``(N, m, n)``.
        warm: ``(N, n)`` start vectors (e.g. the previous call's result) or None.
        tol: accepted relative eigen-residual.
        iterations: power steps before the fallback.

    Returns:
        ``(N, n)`` float64 unit vectors on the CPU.
    """
    M = M.detach().float().cpu()
    N, n = M.shape[0], M.shape[-1]
    out = torch.zeros(N, n, dtype=torch.float64)
    todo = torch.ones(N, dtype=torch.bool)
    if warm is not None:
        v = warm.float().cpu()
        v = v / v.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        res = torch.full((N,), float("inf"))
        for _ in range(iterations):
            w = (M.mT @ (M @ v.unsqueeze(-1))).squeeze(-1)  # (N, n)
            lam = (v * w).sum(-1)
            res = (w - lam.unsqueeze(-1) * v).norm(dim=-1) / lam.abs().clamp_min(1e-30)
            if bool((res < tol).all()):
                break
            v = w / w.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        ok = res < tol
        out[ok] = v[ok].double()
        todo = ~ok
    if bool(todo.any()):
        A = M[todo].double().mT @ M[todo].double()
        _, vecs = torch.linalg.eigh(A)
        out[todo] = vecs[..., -1]
    return out


def robust_svd(W64: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch.linalg.svd`` (LAPACK gesdd), falling back to scipy's gesvd when it does not converge.

    Args:
        W64: ``(m, n)`` or ``(L, m, n)`` float64.

    Returns:
        ``U, S, Vh`` (reduced), as ``torch.linalg.svd(..., full_matrices=False)``.

    Raises:
        GeodriftError: when neither LAPACK driver converges (the matrix is reported by the caller).
    """
    try:
        return torch.linalg.svd(W64, full_matrices=False)
    except torch.linalg.LinAlgError:
        pass
    try:
        stack = W64.reshape(-1, *W64.shape[-2:]).numpy()
        parts = [scipy.linalg.svd(m, full_matrices=False, lapack_driver="gesvd") for m in stack]
    except (np.linalg.LinAlgError, ValueError) as error:
        raise GeodriftError(
            f"the SVD of a {tuple(W64.shape[-2:])} matrix did not converge with LAPACK gesdd nor gesvd ({error}); "
            "the matrix is numerically degenerate - exclude it with --roles/--layers"
        ) from None
    U, S, Vh = (torch.from_numpy(np.stack([p[i] for p in parts])) for i in range(3))
    if W64.ndim == 2:
        return U[0], S[0], Vh[0]
    return U, S, Vh


def _exact(W: torch.Tensor, k: int, frobenius_sq: float, method: str) -> SVDTriplets:
    # float64 LAPACK through the batched route (for k up to a quarter of the rank, eigh of the float64 Gram
    # matrix, accepted at a 1e-8 residual, else the SVD): a 14336 x 4096 fallback is then one float64 Gram
    # product and a 4096 x 4096 eigh instead of a full SVD, several times faster.
    (exact,) = batched_svd_triplets(W.detach().cpu().unsqueeze(0), k)
    return SVDTriplets(exact.U, exact.S, exact.Vh, frobenius_sq, exact.residual, method, passes=3)


def _lanczos(W: torch.Tensor, k: int, tol: float, frobenius_sq: float, passes: int = 0,
             eigh_first: bool = False, loose_bound: bool = True) -> SVDTriplets | None:
    # Lanczos (ARPACK eigsh) on the Gram matrix of the smaller side: one BLAS-3 product, then cheap
    # matrix-vector products of size min(m, n). (Lanczos on W itself was 3x slower on a random
    # 14336 x 4096 matrix: its clustered top spectrum needs hundreds of memory-bound products.) Squaring
    # the spectrum costs accuracy only for directions far below s_1, which the acceptance rule catches
    # (then the exact route runs).
    A = W.detach().float()
    gram = _gram(A.numpy())
    forward = products(A) if A.shape[0] >= A.shape[1] else products(A)[::-1]
    transposed = A.shape[0] < A.shape[1]
    spent = passes + 1  # the Gram product; each certificate below adds two
    if eigh_first and k + 1 < gram.shape[0] <= EIGH_MAX_SIDE:
        # A small side: every eigenpair of the Gram matrix from one LAPACK call (which releases the GIL),
        # certified like block Krylov's (the (k+1)-th pair bounds the gap); ARPACK if the rule rejects it.
        X1 = _gram_eigenpairs(gram, k + 1)
        spent += 2
        triplets = _accepted(certify(*forward, X1), X1, k, tol, frobenius_sq, transposed, passes=spent, method="eigh")
        if triplets is not None:
            return triplets
    if not loose_bound and k + 2 < gram.shape[0]:
        # A hard spectrum (block Krylov rejected it): ARPACK for k + 1 pairs at once, the last bounding the gap
        # below the k-th as in block Krylov's certificate, instead of a second (deflated) ARPACK run.
        pairs = _top_eigenpairs(gram, k + 1, tol)
        if pairs is not None:
            spent += 2
            triplets = _accepted(certify(*forward, pairs[1]), pairs[1], k, tol, frobenius_sq, transposed, passes=spent)
            if triplets is not None:
                return triplets
        pairs = None
    else:
        pairs = _top_eigenpairs(gram, k, tol)
    if pairs is not None:
        X = pairs[1]  # (min(m, n), k)
        # The gap bound, loose first (cheap); a random-like spectrum's k-th gap (0.03-0.1 % of s_1^2) can be
        # below the loose bound's residual, so it is then recomputed tightly once (and certified again).
        for looseness in BOUND_LOOSENESS:
            bound = _next_eigenvalue_bound(gram, pairs, tol, looseness)
            if bound is None:
                break
            spent += 2
            triplets = _accepted(certify(*forward, X, bound), X, k, tol, frobenius_sq, transposed, passes=spent)
            if triplets is not None:
                return triplets
    if not eigh_first or gram.shape[0] <= EIGH_MAX_SIDE or k + 1 >= gram.shape[0]:  # ARPACK only, or eigh had its try
        return None
    # The top k + 1 eigenpairs of the Gram matrix from LAPACK (tridiagonal reduction, then MRRR for the
    # k + 1 wanted only), certified like the eigh route: 2.5 s at a side of 4096 (benchmarks/RESULTS_routes.md)
    # against a float64 Gram product and a full float64 eigh for the exact route.
    X1 = _gram_subset_eigenpairs(gram, k + 1)
    return _accepted(certify(*forward, X1), X1, k, tol, frobenius_sq, transposed, passes=spent + 2,
                     method="eigh-subset")


def _gram_eigenpairs(gram: np.ndarray, c: int) -> torch.Tensor:
    # The top c unit eigenvectors (r, c) of a float32 Gram matrix, descending, by LAPACK (torch.linalg.eigh).
    _, vectors = torch.linalg.eigh(torch.from_numpy(gram))
    return vectors[:, -c:].flip(-1).contiguous()


def _gram_subset_eigenpairs(gram: np.ndarray, c: int) -> torch.Tensor:
    # The top c unit eigenvectors (r, c) of a float32 Gram matrix, descending: LAPACK ssyevr for those c only
    # (scipy.linalg.eigh(subset_by_index), which releases the GIL); its cost is the tridiagonal reduction.
    side = gram.shape[0]
    _, vectors = scipy.linalg.eigh(gram, subset_by_index=[side - c, side - 1], driver="evr", check_finite=False)
    return torch.from_numpy(np.ascontiguousarray(vectors[:, ::-1], dtype=np.float32))


def _next_eigenvalue_bound(gram: np.ndarray | LinearOperator, pairs: tuple[torch.Tensor, torch.Tensor],
                           tol: float, looseness: float = 1000.0) -> float | None:
    # An upper bound of lambda_(k+1) of the Gram operator for the acceptance rule: G - X diag(S^2) X^T has
    # lambda_1 >= lambda_(k+1)(G) (G is it plus a rank-k PSD term), bounded by its top Ritz value plus
    # residual. (Asking ARPACK for k + 1 pairs instead changes the k reported vectors' iterates.)
    S, X = pairs
    Xn, theta = X.numpy(), S.numpy() ** 2  # float32 (side, k), (k,)

    def deflated(x: np.ndarray) -> np.ndarray:
        x = x.reshape(-1)
        return gram @ x - Xn @ (theta * (Xn.T @ x))

    operator = LinearOperator(gram.shape, matvec=deflated, dtype=np.float32)
    # A looser ARPACK tolerance than the vectors' and a short basis: the bound adds the residual it leaves
    # (on SmolLM2 about 28 products per matrix instead of 36, the bound within 0.4 % of theta_k).
    top = _top_eigenpairs(operator, 1, looseness * tol, ncv=12)
    if top is None:
        return None
    value, vector = float(top[0][0]) ** 2, top[1][:, 0].numpy()
    residual = float(np.linalg.norm((deflated(vector) - value * vector).astype(np.float64)))
    return value + residual


def _krylov(W: torch.Tensor, k: int, tol: float, frobenius_sq: float,
            budgeted: bool = True) -> tuple[SVDTriplets | None, int]:
    # Block Krylov on the smaller side, within a budget of KRYLOV_BUDGET of the Gram product's work (every
    # check of krylov.CHECKS when not budgeted); (None, passes spent) when the rule has not accepted it by then.
    A = W.detach().float()
    transposed = A.shape[0] < A.shape[1]
    side = A.T if transposed else A  # (m', n'), n' <= m'
    block = max(BLOCK, k + 1)
    if side.shape[1] < 2 * block:
        return None, 0
    budget = int(KRYLOV_BUDGET * side.shape[1] / (2 * block)) if budgeted else None
    result = block_krylov(side, k, block=block, budget_passes=budget, tol=tol)
    triplets = _accepted(result.certificate, result.X, k, tol, frobenius_sq, transposed, result.passes,
                         method="krylov")
    return triplets, result.passes


def _accepted(certificate: Certificate, X: torch.Tensor, k: int, tol: float, frobenius_sq: float,
              transposed: bool, passes: int, method: str = "lanczos") -> SVDTriplets | None:
    # The triplets of a certified result (X: the iterated side's vectors, k or more), or None if the acceptance
    # rule or the residual tolerance rejects it. transposed: X are left singular vectors (W was m < n).
    S = certificate.S[:k].float()
    residual = float(certificate.rho[:k].max() / certificate.S[0].clamp_min(1e-300))
    if not (certificate.accepted and residual <= tol and bool(S[-1] > 0)):
        return None
    iterated, other = X[:, :k].cpu().contiguous(), certificate.Y[:, :k].cpu().contiguous()
    U, V = (iterated, other) if transposed else (other, iterated)
    return SVDTriplets(U, S, V.T.contiguous(), frobenius_sq, residual, method, passes=passes)


def _gram(A: np.ndarray) -> np.ndarray:
    # (r, r) Gram matrix of the smaller side of A (m, n), r = min(m, n); numpy uses syrk for A.T @ A.
    return A.T @ A if A.shape[0] >= A.shape[1] else A @ A.T


def _top_eigenpairs(gram: np.ndarray | LinearOperator, k: int, tol: float, ncv: int | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor] | None:
    # Top-k eigenpairs of a symmetric PSD (r, r) operator by ARPACK, as singular values S (k,) =
    # sqrt(eigenvalues), descending, and unit eigenvectors (r, k), float32; None if ARPACK fails or s_k = 0.
    side = gram.shape[0]
    # ARPACK's start vector is fixed (ones) so results are deterministic without a global RNG.
    v0 = np.ones(side, dtype=np.float32)
    ncv = min(side - 1, ncv or max(2 * k + 1, 24))
    try:
        eigvals, eigvecs = eigsh(gram, k=k, which="LA", tol=tol * 1e-2, ncv=ncv, v0=v0)
    except (ArpackNoConvergence, ArpackError, ValueError):  # the exact route takes over
        return None
    order = np.argsort(eigvals)[::-1]
    S = np.sqrt(np.clip(eigvals[order], 0.0, None))
    if not S[-1] > 0.0:
        return None
    return (torch.from_numpy(np.ascontiguousarray(S, dtype=np.float32)),
            torch.from_numpy(np.ascontiguousarray(eigvecs[:, order], dtype=np.float32)))
