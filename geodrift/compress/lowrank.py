"""Calibration-whitened low-rank factors: one layer alone, or a basis shared by a group of layers.

The loss of an approximation ``W'`` of a projection ``W (d_out, d_in)`` is SVD-LLM's whitened
error ``||(W - W') X^T||_F^2 = tr(dW C dW^T)``, ``C = X^T X`` the second moment of the projection's
calibration inputs (:mod:`geodrift.compress.calibrate`). Three units, each from one symmetric
eigendecomposition (float64), whose eigenvalues are the squared whitened singular values, so that
``loss(r)`` (the sum of those beyond r) is known for every rank before any factor is built:

- **private** (SVD-LLM): ``W' = U_r U_r^T W`` with ``U`` the eigenvectors of ``W C W^T``: the
  same matrix as ``U_r S_r V_r^T S^{-1}`` from the SVD ``W S = U S V^T``, ``S S^T = C``, written
  without ``S^{-1}``, so that a singular ``C`` needs no care. Factors ``second = U_r (d_out, r)``,
  ``first = U_r^T W (r, d_in)``.
- **output** (a basis shared in output space, exact for per-layer whitening): ``B (d_out, r)``,
  the eigenvectors of ``sum_l w_l W_l C_l W_l^T``; ``W_l' = B B^T W_l`` (``second = B`` shared,
  ``first = B^T W_l``).
- **input** (Basis Sharing): the group's weights stacked ``[W_1; ...; W_g] (g d_out, d_in)``,
  whitened by the group's joint moment ``C_G = sum_l C_l`` (root :func:`geodrift.compress.whiten.square_root`),
  truncated as one matrix: ``first = B^T (r, d_in)`` shared, ``second = C_l (d_out, r)`` per layer.
  ``refit=True`` then replaces each ``C_l`` by its least-squares optimum under the layer's own
  moment, ``C_l = W_l C_l B (B^T C_l B)^+`` (geodrift's closed-form refit).

``weights`` (``w_l`` per layer, 1 by default) scale each layer's share of a unit's loss; geodrift's
own method passes ``1 / ||W_l S_l||^2`` so that every layer's error counts relative to its energy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from geodrift.compress.whiten import Root, square_root

SPACES = ("private", "input", "output")


def whitened_error(W: torch.Tensor, approx: torch.Tensor, C: torch.Tensor) -> float:
    """``tr((W - W') C (W - W')^T)``: the squared error of the projection's outputs on the calibration inputs."""
    d = (W.double() - approx.double())
    return float(((d @ C.double()) * d).sum())


def whitened_energy(W: torch.Tensor, C: torch.Tensor) -> float:
    """``tr(W C W^T)``: the squared norm of the projection's outputs on the calibration inputs."""
    W = W.double()
    return float(((W @ C.double()) * W).sum())


def parameters(space: str, shape: tuple[int, int], size: int, r: int) -> int:
    """Parameters of ``size`` layers of ``shape (d_out, d_in)`` factored at rank r in ``space`` (basis counted once)."""
    d_out, d_in = shape
    per_rank = {"private": size * (d_in + d_out), "input": d_in + size * d_out, "output": d_out + size * d_in}[space]
    return r * per_rank


def eigen_descending(M: torch.Tensor, vectors: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (descending, clamped at 0) and eigenvectors ``(n, n)`` of a symmetric ``M`` (float64).

    ``vectors=False`` computes the eigenvalues only (about 3x faster) and returns an empty second tensor.
    """
    if not vectors:
        return torch.linalg.eigvalsh((M + M.T) / 2).flip(0).clamp(min=0), torch.empty(0)
    values, vecs = torch.linalg.eigh((M + M.T) / 2)
    return values.flip(0).clamp(min=0), vecs.flip(1)


@dataclass
class Unit:
    """The factors of one projection over one group of layers (one layer when private).

    Attributes:
        role: projection name (``attn_q`` ...).
        layers: the layers whose weights it approximates.
        space: ``private``, ``input`` or ``output``.
        shape: ``(d_out, d_in)`` of one layer's weight.
        spectrum: squared whitened singular values, descending (float64): ``loss(r)`` is the sum beyond r.
        total: their sum (the unit's whitened energy, weighted by ``w_l``).
        max_rank: the largest rank kept (the break-even rank: at most the dense parameter count).
        whitening: how the moment's square root was taken (``Root.method``), or ``"none needed"``.
    """

    role: str
    layers: tuple[int, ...]
    space: str
    shape: tuple[int, int]
    spectrum: torch.Tensor
    total: float
    max_rank: int
    _basis: torch.Tensor = field(repr=False)  # private/output: U or B (d_out, k); input: B^T (k, d_in)
    _coef: list[torch.Tensor] = field(repr=False)  # input: per-layer C_l (d_out, k); else unused
    _weights: list[torch.Tensor] = field(repr=False)  # each layer's W (d_out, d_in), float32
    whitening: str = "none needed"
    # input space: {(layer index, r): (the moment it was refit under, refit coefficients)}
    _refits: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)

    def per_rank(self) -> int:
        """Parameters one more rank costs."""
        return parameters(self.space, self.shape, len(self.layers), 1)

    def loss(self, r: int) -> float:
        """The unit's whitened truncation loss at rank r (weighted by ``w_l``; before any refit)."""
        return float(self.spectrum[min(r, self.max_rank):].sum())

    def dense_parameters(self) -> int:
        """Parameters of the unit's layers uncompressed."""
        return len(self.layers) * self.shape[0] * self.shape[1]

    def factors(self, r: int, moments: list[torch.Tensor] | None = None) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """``{layer: (second (d_out, r), first (r, d_in))}`` with ``W_l ~ second @ first``.

        For a shared unit the shared factor is the same tensor object in every layer's pair.
        ``moments`` (each layer's ``X^T X``, input space only) asks for the closed-form refit; a refit
        is computed once per layer, rank and moment tensor and kept (geodrift's space selection asks
        for the same units' factors once per candidate configuration).
        """
        r = min(r, self.max_rank)
        if self.space == "private":
            U = self._basis[:, :r]
            return {self.layers[0]: (U, U.T @ self._weights[0])}
        if self.space == "output":
            B = self._basis[:, :r]
            return {layer: (B, B.T @ W) for layer, W in zip(self.layers, self._weights, strict=True)}
        Bt = self._basis[:r]
        out = {}
        for j, layer in enumerate(self.layers):
            coef = self._coef[j][:, :r]
            if moments is not None:
                coef = self._refit(j, r, moments[j])
            out[layer] = (coef, Bt)
        return out

    def _refit(self, j: int, r: int, C: torch.Tensor) -> torch.Tensor:
        cached = self._refits.get((j, r))
        if cached is not None and cached[0] is C:
            return cached[1]
        coef = refit_coefficients(self._weights[j], self._basis[:r], C)
        self._refits[(j, r)] = (C, coef)
        return coef


def refit_coefficients(W: torch.Tensor, Bt: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """``argmin_X ||(W - X Bt) S||_F`` for ``C = S S^T``: ``W C B (B^T C B)^+ (d_out, r)``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> Bt, coef = torch.randn(3, 8, generator=g), torch.randn(5, 3, generator=g)
        >>> x = torch.randn(40, 8, generator=g)
        >>> torch.allclose(refit_coefficients(coef @ Bt, Bt, x.T @ x), coef, atol=1e-4)
        True
    """
    B, Cd = Bt.double().T, C.double()
    Cd = (Cd + Cd.T) / 2  # a moment summed in float32 is asymmetric by rounding; the symmetric pinv needs it exact
    gram = B.T @ Cd @ B
    return (W.double() @ Cd @ B @ torch.linalg.pinv(gram, hermitian=True)).float()


def _cap(space: str, shape: tuple[int, int], size: int, limit: int) -> int:
    # Break-even rank: beyond it the factors hold more parameters than the dense weights.
    dense = size * shape[0] * shape[1]
    return max(1, min(limit, dense // parameters(space, shape, size, 1)))


def private_unit(role: str, layer: int, W: torch.Tensor, C: torch.Tensor) -> Unit:
    """SVD-LLM's whitened truncation of one layer's ``W (d_out, d_in)`` under its moment ``C (d_in, d_in)``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> W, x = torch.randn(6, 4, generator=g), torch.randn(30, 4, generator=g)
        >>> u = private_unit("attn_q", 0, W, x.T @ x)
        >>> second, first = u.factors(2)[0]
        >>> abs(whitened_error(W, second @ first, x.T @ x) - u.loss(2)) < 1e-6 * u.total
        True
    """
    Wd, Cd = W.double(), C.double()
    shape = (W.shape[0], W.shape[1])
    cap = _cap("private", shape, 1, min(shape))
    method = "none needed"
    if shape[0] <= shape[1]:
        spectrum, U = eigen_descending(Wd @ Cd @ Wd.T)
        U = U[:, :cap]
    else:  # the input side is smaller: eigenvectors V of S^T W^T W S, then U = W S V / sigma
        root = square_root(Cd)
        S, method = root.S, root.method
        spectrum, V = eigen_descending(S.T @ Wd.T @ Wd @ S)
        U = _left_vectors(Wd @ S @ V[:, :cap], spectrum[:cap])
    return Unit(role, (layer,), "private", shape, spectrum, float(spectrum.sum()), cap, U.float(), [], [W.float()],
                method)


def output_unit(role: str, layers: tuple[int, ...], Ws: list[torch.Tensor], Cs: list[torch.Tensor],
                weights: list[float] | None = None, roots: list[Root] | None = None, vectors: bool = True) -> Unit:
    """A basis in output space shared by ``layers``: eigenvectors of ``sum_l w_l W_l C_l W_l^T`` (computed on the smaller side).

    ``roots`` (each moment's :func:`~geodrift.compress.whiten.square_root`) saves recomputing them;
    ``vectors=False`` gives a unit with its spectrum only (it cannot build factors).
    """
    w = weights or [1.0] * len(layers)
    shape = (Ws[0].shape[0], Ws[0].shape[1])
    cap = _cap("output", shape, len(layers), shape[0])
    method = "none needed"
    if shape[0] <= len(layers) * shape[1]:
        M = sum(wl * (W.double() @ C.double() @ W.double().T) for wl, W, C in zip(w, Ws, Cs, strict=True))
        assert isinstance(M, torch.Tensor)
        spectrum, B = eigen_descending(M, vectors)
        B = B[:, :cap] if vectors else B
    else:  # the concatenation [w_l^1/2 W_l S_l] (d_out, g d_in) is wide: its right Gram is the smaller one
        roots = roots or [square_root(C) for C in Cs]
        method = "; ".join(sorted({r.method for r in roots}))
        wide = torch.cat([wl ** 0.5 * W.double() @ r.S for wl, W, r in zip(w, Ws, roots, strict=True)], 1)
        spectrum, V = eigen_descending(wide.T @ wide, vectors)
        B = _left_vectors(wide @ V[:, :cap], spectrum[:cap]) if vectors else V
        spectrum = spectrum[: shape[0]]
    return Unit(role, tuple(layers), "output", shape, spectrum, float(spectrum.sum()), cap, B.float(), [],
                [W.float() for W in Ws], method)


def input_unit(role: str, layers: tuple[int, ...], Ws: list[torch.Tensor], Cs: list[torch.Tensor],
               weights: list[float] | None = None, vectors: bool = True) -> Unit:
    """Basis Sharing: the stacked weights ``[sqrt(w_l) W_l]`` truncated under the group's mean moment ``mean_l C_l``.

    (The mean, not the sum, keeps ``loss(r)`` on the scale of a private unit's.)
    """
    w = weights or [1.0] * len(layers)
    shape = (Ws[0].shape[0], Ws[0].shape[1])
    cap = _cap("input", shape, len(layers), shape[1])
    root = square_root(torch.stack([C.double() for C in Cs]).mean(0))
    S = root.S
    stack = torch.cat([W.double() * wl ** 0.5 for wl, W in zip(w, Ws, strict=True)])  # (g d_out, d_in)
    spectrum, V = eigen_descending(S.T @ (stack.T @ stack) @ S, vectors)
    if not vectors:
        return Unit(role, tuple(layers), "input", shape, spectrum, float(spectrum.sum()), cap, V, [], [], root.method)
    # Left vectors of (stack S): U = stack S V / sigma; the shared basis B^T = U^T stack (r, d_in).
    U = _left_vectors(stack @ S @ V[:, :cap], spectrum[:cap])
    Bt = U.T @ stack
    coefs = [(U[j * shape[0]:(j + 1) * shape[0]] / wl ** 0.5).float() for j, wl in enumerate(w)]
    return Unit(role, tuple(layers), "input", shape, spectrum, float(spectrum.sum()), cap, Bt.float(), coefs,
                [W.float() for W in Ws], root.method)


def _left_vectors(WSV: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    # U = W S V / sigma. Columns whose singular value is 0 (a rank-deficient moment) carry nothing:
    # they are set to 0 rather than divided by zero; the others are orthonormal up to rounding.
    keep = values > float(values.max()) * 1e-14 if values.numel() else values > 0
    return torch.where(keep, WSV / values.sqrt().clamp(min=1e-300), torch.zeros_like(WSV))
