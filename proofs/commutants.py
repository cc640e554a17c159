"""Claim 3: what an element-wise activation still commutes with.

Permutations (every element-wise sigma), sign flips (odd sigma), and positive diagonal rescalings
(positively homogeneous sigma) - and, moved between adjacent weights, the symmetries of
``W2 sigma(W1 x)`` they induce.
"""

from __future__ import annotations

import itertools
from typing import Any

import sympy as sp

from geodrift.proofs.activations import ELEMENTWISE
from geodrift.proofs.claim import Assumption, Claim, Derivation, askable, conjunction, is_zero, tex
from geodrift.proofs.interval import certify_nonzero

d = sp.Symbol("d")
LAMBDA = sp.symbols("lambda1:3", real=True)
SIZES = Assumption(sp.Contains(d, sp.FiniteSet(2, 3, 4)), "the sizes of the symbolic checks, read from the "
                   "predicate itself since `ask` cannot take set membership; the general-$d$ argument is index-wise")
POSITIVE = Assumption(sp.Q.positive(LAMBDA[0]) & sp.Q.positive(LAMBDA[1]), "the rescaling "
                      "$D=\\operatorname{diag}(\\lambda_1,\\lambda_2)$ is positive; `ask` under it is what lets "
                      "the homogeneity rule pull $\\lambda_i$ out")
PREMISES = (SIZES, POSITIVE)


def _sizes(assumed: sp.Basic) -> list[int]:
    """The dimensions d the premises allow (a ``Contains(d, FiniteSet(...))`` conjunct), else none."""
    sets = [c.args[1] for c in sp.And.make_args(assumed) if isinstance(c, sp.Contains) and c.args[0] == d]
    return sorted(int(n) for n in sp.Intersection(*sets)) if sets else []


class PosHom(sp.Function):
    """A generic positively homogeneous scalar function: PosHom(l*u) = l*PosHom(u) for l > 0.

    The rule is applied by :func:`pull_positive`, which asks sympy (under the active
    ``sympy.assuming``) which factors are positive; construction never rewrites (sympy caches it).
    """

    def _latex(self, printer: Any) -> str:
        return f"\\phi\\left({printer._print(self.args[0])}\\right)"


def pull_positive(expr: sp.Basic) -> sp.Basic:
    """Rewrite every ``PosHom(l * u)`` as ``l * PosHom(u)`` for the factors ``l`` (of the argument with
    its common terms factored out) with ``ask(Q.positive(l))`` True under the current assumptions;
    other factors stay inside.

    Example:
        >>> l, u = sp.Symbol("l", real=True), sp.Symbol("u", real=True)
        >>> with sp.assuming(sp.Q.positive(l)):
        ...     pull_positive(PosHom(l * u + l))
        l*PosHom(u + 1)
    """

    def rule(e: sp.Basic) -> sp.Basic:
        factors = sp.Mul.make_args(sp.factor_terms(e.args[0]))
        pos = [a for a in factors if sp.ask(sp.Q.positive(a)) is True]
        if not pos:
            return e
        return sp.Mul(*pos) * PosHom(sp.Mul(*[a for a in factors if a not in pos]))

    return expr.replace(lambda e: isinstance(e, PosHom), rule)


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
    refute it with a certified sigma(2) - 2 sigma(1) != 0 (False).

    The signs are sympy's symbol assumptions (``Symbol(positive=True)``), not ``Q`` predicates:
    ``refine`` has no rule for ``Max``, so under ``Q.positive`` ReLU's ``Max(0, l*t)`` would stay put.
    """
    fn = ELEMENTWISE[name].fn
    lam = sp.Symbol("lambda", positive=True)
    tp, tn = sp.Symbol("t", positive=True), sp.Symbol("t", negative=True)
    cases = [fn(lam * tp) - lam * fn(tp), fn(lam * tn) - lam * fn(tn), fn(lam * 0) - lam * fn(sp.Integer(0))]
    if all(is_zero(sp.piecewise_fold(c)) for c in cases):
        return True, None
    ok, box = certify_nonzero(fn(sp.Integer(2)) - 2 * fn(sp.Integer(1)))
    return (False if ok else None), (list(box) if box else None)


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """Verify the three residual symmetries symbolically for the sizes the premises name.

    Args:
        assumed: the premises to derive under (default: the claim's, ``conjunction(PREMISES)``).

    Returns:
        The derivation.

    Example:
        >>> derive().verdict
        'verified'
    """
    assumed = conjunction(PREMISES) if assumed is None else assumed
    out = Derivation()
    s = sp.Function("sigma")
    sizes = _sizes(assumed)
    shown = ", ".join(map(str, sizes)) or "none"
    ok_all = bool(sizes)
    for n in sizes:
        xs = sp.Matrix(sp.symbols(f"x1:{n + 1}", real=True))
        for p in itertools.permutations(range(n)):
            P = _perm(p)
            ok_all = ok_all and is_zero((P * xs).applyfunc(s) - P * xs.applyfunc(s)) is True
    out.check(
        "**Permutations.** For a generic function $\\sigma$ (sympy `Function`), "
        f"$\\sigma(Px) = P\\sigma(x)$ for all {sum(sp.factorial(n) for n in sizes)} permutation matrices of the "
        f"sizes allowed by {tex(SIZES.predicate)}, i.e. $d={shown}$ "
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
    flips_ok = bool(sizes)
    for n in sizes:
        xs = sp.Matrix(sp.symbols(f"x1:{n + 1}", real=True))
        for signs in itertools.product((1, -1), repeat=n):
            S = sp.diag(*signs)
            flips_ok = flips_ok and is_zero((S * xs).applyfunc(sp.tanh) - S * xs.applyfunc(sp.tanh)) is True
    out.check(
        "**Sign flips.** For $S=\\operatorname{diag}(\\pm1)$, $\\sigma(Sx)_i = \\sigma(\\pm x_i)$, so "
        f"$\\sigma(Sx)=S\\sigma(x)$ for all $S$ iff $\\sigma$ is odd. Checked for tanh over all "
        f"{sum(2**n for n in sizes)} sign matrices of the sizes {shown}; for the non-odd activations "
        "$S=\\operatorname{diag}(-1,1)$, $x=e_1$ gives first entry $\\sigma(-1)+\\sigma(1)\\ne0$ (certified above).",
        True if flips_ok else None,
    )
    for name in ELEMENTWISE:
        hom[name], box = is_pos_homogeneous(name)
        verdict = {True: "positively homogeneous (case split $t>0$, $t<0$, $t=0$)", False: "not positively homogeneous",
                   None: "undecided"}[hom[name]]
        extra = f" (certified $\\sigma(2)-2\\sigma(1)\\in[{box[0]:.6f}, {box[1]:.6f}]$)" if box else ""
        out.check(f"{name}: {verdict}{extra}.", None if hom[name] is None else True)
    lam = LAMBDA
    W1 = sp.Matrix(2, 2, sp.symbols("a1:5", real=True))
    W2 = sp.Matrix(2, 2, sp.symbols("b1:5", real=True))
    xs = sp.Matrix(sp.symbols("x1:3", real=True))
    D = sp.diag(*lam)
    with sp.assuming(*askable(assumed)):
        pulled = pull_positive((D * W1 * xs).applyfunc(PosHom))
    resc = W2 * D.inv() * pulled - W2 * (W1 * xs).applyfunc(PosHom)
    out.check(
        "**Positive rescaling between adjacent weights.** For a generic positively homogeneous $\\phi$ "
        f"and $D=\\operatorname{{diag}}(\\lambda_1,\\lambda_2)$ with {tex(POSITIVE.predicate)}: under the premises "
        f"`ask` decides which factors are positive, so $\\phi(DW_1x) = {sp.latex(pulled.T)}^\\top$ and "
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
    premises=PREMISES,
    method="generic sympy Function; case split on sign; certified counter-witnesses",
    numeric="commutants",
    derive=derive,
)
