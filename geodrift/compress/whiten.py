"""A square root of a calibration second moment, safe when the moment is singular.

SVD-LLM's truncation-aware whitening factors the second moment of a projection's calibration
inputs, ``C = X^T X (d_in, d_in)``, as ``C = S S^T`` and truncates the SVD of ``W S``. geodrift
never needs ``S^{-1}`` (:mod:`geodrift.compress.lowrank` writes the truncation as a projection of
``W``), so any square root of ``C`` serves; the Cholesky factor is tried first and, when ``C`` is
not numerically positive definite (fewer independent inputs than the width, dead units), a
symmetric square root from the eigendecomposition with negative eigenvalues set to 0. The method
used is recorded (:attr:`Root.method`) and printed by ``compress share``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Root:
    """``S (d, d)`` with ``S S^T = C`` (float64), and how it was obtained.

    Attributes:
        S: the square root.
        method: ``"cholesky"`` or ``"eigen (not positive definite: k of d eigenvalues <= 0)"``.
    """

    S: torch.Tensor
    method: str

    @property
    def fallback(self) -> bool:
        """True when the Cholesky factor did not exist and the eigen root was used."""
        return self.method != "cholesky"


def square_root(C: torch.Tensor) -> Root:
    """A square root of a symmetric positive semi-definite ``C (d, d)``.

    Args:
        C: second moment (any float dtype; computed in float64).

    Returns:
        Root: the lower Cholesky factor when ``C`` is positive definite, else ``Q diag(sqrt(max(l, 0)))``
        from ``C = Q diag(l) Q^T``.

    Example:
        >>> x = torch.randn(50, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> r = square_root(x.T @ x)
        >>> r.method, torch.allclose(r.S @ r.S.T, x.T @ x)
        ('cholesky', True)
        >>> square_root(torch.ones(3, 3)).method
        'eigen (not positive definite: 2 of 3 eigenvalues <= 0)'
    """
    C = C.double()
    C = (C + C.T) / 2
    S, info = torch.linalg.cholesky_ex(C)
    if int(info) == 0 and bool(torch.isfinite(S).all()):
        return Root(S, "cholesky")
    values, vectors = torch.linalg.eigh(C)
    tol = float(values.abs().max()) * C.shape[0] * torch.finfo(torch.float64).eps
    bad = int((values <= tol).sum())
    S = vectors * values.clamp(min=0).sqrt()
    return Root(S, f"eigen (not positive definite: {bad} of {C.shape[0]} eigenvalues <= 0)")
