"""Activations in sympy: the paper's element-wise ones, the linear map, and the radial activation.

Each element-wise activation is a scalar function ``t -> sigma(t)``; applied to a vector it acts
entry by entry. The radial activation acts on the whole vector: ``sigma(x) = x * f(|x|)`` (the
paper's f = tanh). Names match ``geodrift.symmetry_numeric.ELEMENTWISE`` so the two worlds can be
compared entry by entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp

LEAKY_SLOPE = sp.Rational(1, 100)  # torch.nn.functional.leaky_relu default


@dataclass(frozen=True)
class ElementWise:
    """A scalar activation applied entry by entry.

    Attributes:
        name: identifier shared with the torch side.
        latex: formula for the report.
        fn: ``sympy.Expr -> sympy.Expr``.
    """

    name: str
    latex: str
    fn: Callable[[sp.Expr], sp.Expr]

    def apply(self, v: sp.Matrix) -> sp.Matrix:
        """Apply entry-wise to a column vector ``v`` (d, 1)."""
        return v.applyfunc(self.fn)

    def derivative(self, t: sp.Expr) -> sp.Expr:
        """sigma'(t), by sympy differentiation at a fresh real symbol, then substituted."""
        s = sp.Symbol("s", real=True)
        return sp.diff(self.fn(s), s).subs(s, t)


def _relu(t: sp.Expr) -> sp.Expr:
    return sp.Max(0, t)


def _leaky(t: sp.Expr) -> sp.Expr:
    return sp.Piecewise((t, t >= 0), (LEAKY_SLOPE * t, True))


def _gelu(t: sp.Expr) -> sp.Expr:
    return t / 2 * (1 + sp.erf(t / sp.sqrt(2)))


def _silu(t: sp.Expr) -> sp.Expr:
    return t / (1 + sp.exp(-t))


def _softplus(t: sp.Expr) -> sp.Expr:
    return sp.log(1 + sp.exp(t))


def _sigmoid(t: sp.Expr) -> sp.Expr:
    return 1 / (1 + sp.exp(-t))


ELEMENTWISE: dict[str, ElementWise] = {
    a.name: a
    for a in [
        ElementWise("relu", r"\max(0,t)", _relu),
        ElementWise("leaky_relu", r"\max(t, t/100)", _leaky),
        ElementWise("gelu", r"\tfrac{t}{2}\bigl(1+\operatorname{erf}(t/\sqrt2)\bigr)", _gelu),
        ElementWise("silu", r"t/(1+e^{-t})", _silu),
        ElementWise("tanh", r"\tanh t", sp.tanh),
        ElementWise("softplus", r"\log(1+e^{t})", _softplus),
        ElementWise("sigmoid", r"1/(1+e^{-t})", _sigmoid),
        ElementWise("abs", r"|t|", sp.Abs),
    ]
}


def radial(v: sp.Matrix, f: Callable[[sp.Expr], sp.Expr] = sp.tanh) -> sp.Matrix:
    """The radial activation ``v * f(|v|)`` on a column vector; |v| is taken from the *canonical*
    form of ``v.v`` (``sp.cancel`` + ``sp.trigsimp``), so equal norms give identical arguments."""
    norm_sq = sp.trigsimp(sp.cancel(sp.expand((v.T * v)[0])))
    return v * f(sp.sqrt(norm_sq))


def rotation2(c: sp.Expr, s: sp.Expr) -> sp.Matrix:
    """The 2x2 rotation ``[[c, -s], [s, c]]`` (c^2 + s^2 = 1 is the caller's to ensure)."""
    return sp.Matrix([[c, -s], [s, c]])


# The witness used throughout: an exact rational rotation (3-4-5 triangle) and a point with
# nonzero entries of both signs (so ReLU and |t| are differentiable there).
WITNESS_R = rotation2(sp.Rational(3, 5), sp.Rational(4, 5))
WITNESS_X = sp.Matrix([1, -1])
GENERATOR_A = sp.Matrix([[0, -1], [1, 0]])  # d/dtheta of the rotation at theta = 0


def quaternion_rotation(a: sp.Expr, b: sp.Expr, c: sp.Expr, e: sp.Expr) -> sp.Matrix:
    """The rotation of R^3 given by the (unnormalised) quaternion a + b i + c j + e k.

    Rational in the parameters, and onto SO(3) as they range over R^4 minus 0.
    """
    n = a**2 + b**2 + c**2 + e**2
    return sp.Matrix(
        [
            [a**2 + b**2 - c**2 - e**2, 2 * (b * c - a * e), 2 * (b * e + a * c)],
            [2 * (b * c + a * e), a**2 - b**2 + c**2 - e**2, 2 * (c * e - a * b)],
            [2 * (b * e - a * c), 2 * (c * e + a * b), a**2 - b**2 - c**2 + e**2],
        ]
    ) / n
