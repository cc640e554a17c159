"""A randomised Hadamard rotation of the residual stream, as QuaRot (Ashkboos et al. 2024) applies before quantising.

QuaRot folds the norm gains into the projections and rotates the residual stream by ``H diag(s)``: ``H`` a
Hadamard matrix scaled to be orthogonal, ``s`` random signs. A Hadamard matrix of order ``n`` exists only for
``n`` in {1, 2} or a multiple of 4, and no single construction covers every order; QuaRot builds the orders it
meets as Kronecker products of a power-of-two Sylvester matrix with a small stored one (12, 20, 28, 40, ...).
:func:`hadamard` does the same with the Paley construction of order 12 (from the quadratic residues mod 11):
``576 = 12 x 12 x 4`` (SmolLM2-135M's width) is a full Hadamard matrix, not a block-diagonal one. Widths this
does not cover are refused.

Example:
    >>> h = hadamard(12)
    >>> bool((h @ h.T == 12 * torch.eye(12, dtype=h.dtype)).all())
    True
"""

from __future__ import annotations

import math

import torch

from geodrift.errors import GeodriftError


def _paley12() -> torch.Tensor:
    # Paley I for q = 11 (11 = 3 mod 4): H = I + S, S the 12x12 skew Jacobsthal-bordered matrix.
    q = 11
    residues = {(i * i) % q for i in range(1, q)}
    chi = [0] + [1 if i in residues else -1 for i in range(1, q)]
    s = torch.zeros(q + 1, q + 1, dtype=torch.float64)
    s[0, 1:] = 1.0
    s[1:, 0] = -1.0
    for i in range(q):
        for j in range(q):
            s[i + 1, j + 1] = chi[(j - i) % q]
    return torch.eye(q + 1, dtype=torch.float64) + s


def hadamard(n: int) -> torch.Tensor:
    """A ``(n, n)`` matrix of ``+-1`` with ``H H^T = n I``, for ``n = 2^k`` or ``12^j 2^k``.

    Raises:
        GeodriftError: another ``n``.

    Example:
        >>> hadamard(4).tolist()[1]
        [1.0, -1.0, 1.0, -1.0]
    """
    if n == 1:
        return torch.ones(1, 1, dtype=torch.float64)
    if n % 12 == 0:
        return torch.kron(_paley12(), hadamard(n // 12))
    if n % 2 == 0 and n & (n - 1) == 0:
        half = hadamard(n // 2)
        return torch.cat([torch.cat([half, half], 1), torch.cat([half, -half], 1)], 0)
    raise GeodriftError(f"hadamard: no construction here for order {n}; it covers 2^k and 12^j 2^k")


def random_hadamard_rotation(n: int, generator: torch.Generator) -> torch.Tensor:
    """QuaRot's randomised Hadamard rotation ``H diag(s) / sqrt(n)`` (float64, orthogonal), ``s`` random signs.

    Example:
        >>> r = random_hadamard_rotation(576, torch.Generator().manual_seed(0))
        >>> float((r @ r.T - torch.eye(576, dtype=r.dtype)).abs().max()) < 1e-12
        True
    """
    signs = torch.randint(0, 2, (n,), generator=generator).to(torch.float64) * 2 - 1
    return hadamard(n) * signs.reshape(1, -1) / math.sqrt(n)
