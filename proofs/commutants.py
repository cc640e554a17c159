"""Claim 3: what an element-wise activation still commutes with.

Permutations (every element-wise sigma), sign flips (odd sigma), and positive diagonal rescalings
(positively homogeneous sigma) - and, moved between adjacent weights, the symmetries of
``W2 sigma(W1 x)`` they induce.
"""

from __future__ import annotations

import itertools

import sympy as sp

from geodrift.proofs.activations import ELEMENTWISE
from geodrift.proofs.claim import Claim, Derivation, is_zero
from geodrift.proofs.interval import certify_nonzero


class PosHom(sp.Function):
    """A generic positively homogeneous scalar function: PosHom(l*u) = l*PosHom(u) for l > 0."""

    @classmethod
    def eval(cls, arg: sp.Expr) -> sp.Expr | None:
        if arg.is_Mul:
            pos = [a for a in arg.args if a.is_positive]
            if pos:
                rest = [a for a in arg.args if not a.is_positive]
                return sp.Mul(*pos) * cls(sp.Mul(*rest))
        return None


def _perm(p: tuple[int, ...]) -> sp.Matrix:
    n = len(p)
    return sp.Matrix(n, n, lambda i, j: 1 if p[i] == j else 0)


def is_odd(name: str) -> tuple[bool | None, list[float] | None]:
    """Decide whether ELEMENTWISE[name] is odd: True (sigma(-t) = -sigma(t) simplifies to an identity),
    False (certified sigma(1) + sigma(-1) != 0), or None (undecided). Returns the enclosure too."""
    t = sp.Symbol("t", real=True)
    fn = ELEMENTWISE[name].fn
    if is_zero(fn(-t) + fn(t)):
        return True, None
    ok, box = certify_nonzero(fn(sp.Integer(1)) + fn(sp.Integer(-1)))
    return (False if ok else None), (list(box) if box else None)


def is_pos_homogeneous(name: str) -> tuple[bool | None, list[float] | None]:
    """Decide positive homogeneity of ELEMENTWISE[name] by a case split on the sign of t (True), or
    refute it with a certified sigma(2) - 2 sigma(1) != 0 (False)."""
    fn = ELEMENTWISE[name].fn
    lam = sp.Symbol("lambda", positive=True)
    tp, tn = sp.Symbol("t", positive=True), sp.Symbol("t", negative=True)
    cases = [fn(lam * tp) - lam * fn(tp), fn(lam * tn) - lam * fn(tn), fn(lam * 0) - lam * fn(sp.Integer(0))]
    if all(is_zero(sp.piecewise_fold(c)) for c in cases):
        return True, None
    ok, box = certify_nonzero(fn(sp.Integer(2)) - 2 * fn(sp.Integer(1)))
    return (False if ok else None), (list(box) if box else None)


def derive() -> Derivation:
    """Verify the three residual symmetries symbolically for small d.

    Example:
        >>> derive().verdict
        'verified'
    """
    out = Derivation()
    s = sp.Function("sigma")
    ok_all = True
    for n in (2, 3, 4):
        xs = sp.Matrix(sp.symbols(f"x1:{n + 1}", real=True))
        for p in itertools.permutations(range(n)):
            P = _perm(p)
            ok_all = ok_all and is_zero((P * xs).applyfunc(s) - P * xs.applyfunc(s)) is True
    out.check(
        "**Permutations.** For a generic function $\\sigma$ (sympy `Function`), "
        "$\\sigma(Px) = P\\sigma(x)$ for all $2!+3!+4! = 32$ permutation matrices of sizes 2-4 "
        "(in general $(Px)_i = x_{\\pi(i)}$, so $\\sigma(Px)_i = \\sigma(x_{\\pi(i)}) = (P\\sigma(x))_i$).",
        True if ok_all else None,
    )
    odd: dict[str, bool | None] = {}
    hom: dict[str, bool | None] = {}
    for name in ELEMENTWISE:
        odd[name], box = is_odd(name)
        verdict = {True: "odd", False: "not odd", None: "undecided"}[odd[name]]
        extra = f" (certified $\\sigma(1)+\\sigma(-1)\\in[{box[0]:.6f}, {box[1]:.6f}]$)" if box else ""
        out.check(f"{name}: {verdict}{extra}.", None if odd[name] is None else True)
    flips_ok = True
    for n in (2, 3):
        xs = sp.Matrix(sp.symbols(f"x1:{n + 1}", real=True))
        for signs in itertools.product((1, -1), repeat=n):
            S = sp.diag(*signs)
            flips_ok = flips_ok and is_zero((S * xs).applyfunc(sp.tanh) - S * xs.applyfunc(sp.tanh)) is True
    out.check(
        "**Sign flips.** For $S=\\operatorname{diag}(\\pm1)$, $\\sigma(Sx)_i = \\sigma(\\pm x_i)$, so "
        "$\\sigma(Sx)=S\\sigma(x)$ for all $S$ iff $\\sigma$ is odd. Checked for tanh over all $2^2+2^3$ "
        "sign matrices in $d=2,3$; for the non-odd activations $S=\\operatorname{diag}(-1,1)$, $x=e_1$ "
        "gives first entry $\\sigma(-1)+\\sigma(1)\\ne0$ (certified above).",
        True if flips_ok else None,
    )
    for name in ELEMENTWISE:
        hom[name], box = is_pos_homogeneous(name)
        verdict = {True: "positively homogeneous (case split $t>0$, $t<0$, $t=0$)", False: "not positively homogeneous",
                   None: "undecided"}[hom[name]]
        extra = f" (certified $\\sigma(2)-2\\sigma(1)\\in[{box[0]:.6f}, {box[1]:.6f}]$)" if box else ""
        out.check(f"{name}: {verdict}{extra}.", None if hom[name] is None else True)
    lam = sp.symbols("lambda1:3", positive=True)
    W1 = sp.Matrix(2, 2, sp.symbols("a1:5", real=True))
    W2 = sp.Matrix(2, 2, sp.symbols("b1:5", real=True))
    xs = sp.Matrix(sp.symbols("x1:3", real=True))
    D = sp.diag(*lam)
    resc = W2 * D.inv() * (D * W1 * xs).applyfunc(PosHom) - W2 * (W1 * xs).applyfunc(PosHom)
    out.check(
        "**Positive rescaling between adjacent weights.** For a generic positively homogeneous $\\phi$ "
        "and $D=\\operatorname{diag}(\\lambda_1,\\lambda_2)$, $\\lambda_i>0$: "
        "$W_2D^{-1}\\,\\phi(DW_1x) - W_2\\,\\phi(W_1x) = 0$ (symbolic $2\\times2$ weights). "
        "For the non-homogeneous activations, $W_1=W_2=1$, $D=2$, $x=1$ gives $\\sigma(2)/2-\\sigma(1)\\ne0$ "
        "(certified above).",
        is_zero(resc),
    )
    perm_adj = ok_adj = True
    for p in itertools.permutations(range(2)):
        P = _perm(p)
        perm_adj = perm_adj and is_zero(W2 * P.T * (P * W1 * xs).applyfunc(s) - W2 * (W1 * xs).applyfunc(s)) is True
    for signs in itertools.product((1, -1), repeat=2):
        S = sp.diag(*signs)
        ok_adj = ok_adj and is_zero(W2 * S * (S * W1 * xs).applyfunc(sp.tanh) - W2 * (W1 * xs).applyfunc(sp.tanh)) is True
    out.check(
        "Between adjacent weights: $W_2P^\\top\\sigma(PW_1x) = W_2\\sigma(W_1x)$ for every $\\sigma$ and "
        "permutation $P$; $W_2S\\,\\tanh(SW_1x) = W_2\\tanh(W_1x)$ for every sign matrix $S$.",
        True if perm_adj and ok_adj else None,
    )
    out.facts["table"] = {n: {"permutation": True, "sign_flip": odd[n], "pos_rescale": hom[n]} for n in ELEMENTWISE}
    return out


CLAIM = Claim(
    name="commutants",
    title="What an element-wise activation still commutes with",
    statement=(
        "Every element-wise $\\sigma$ commutes with all permutation matrices; an odd $\\sigma$ (tanh) also "
        "with all sign flips $\\operatorname{diag}(\\pm1)$; a positively homogeneous $\\sigma$ "
        "(ReLU, leaky ReLU, $|t|$) with positive diagonal $D$, so that $W_2\\sigma(W_1x) = "
        "(W_2D^{-1})\\sigma(DW_1x)$. The other activations of the list have none of the last two."
    ),
    assumptions=("symbolic checks in $d\\le4$; the general-$d$ argument is index-wise",),
    method="generic sympy Function; case split on sign; certified counter-witnesses",
    numeric="commutants",
    derive=derive,
)
