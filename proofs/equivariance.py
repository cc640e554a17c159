"""Claim 1: linear and radial activations commute with every orthogonal matrix (any dimension d)."""

from __future__ import annotations

import sympy as sp

from geodrift.proofs.activations import quaternion_rotation, radial, rotation2
from geodrift.proofs.claim import (
    DIFFERENTIABLE,
    Assumption,
    Claim,
    Derivation,
    conjunction,
    is_zero,
    refine_under,
    substitutions,
    tex,
)

d = sp.Symbol("d")
R = sp.MatrixSymbol("R", d, d)
A = sp.MatrixSymbol("A", d, d)
DIM = Assumption(sp.Q.integer(d) & sp.Q.positive(d), "every dimension $d\\ge1$; `ask` checks the instances $d=2,3,4$")
ORTHOGONAL = Assumption(sp.Q.orthogonal(R), "$R^\\top R = RR^\\top = I$; `refine` turns $R^\\top R$ into $I$")
SKEW = Assumption(sp.Eq(A.T, -A), "the generator $A$ of $SO(d)$ is skew; sympy has no skew-symmetric predicate, "
                  "so the equation is applied as the substitution $A^\\top\\to-A$")
SMOOTH = Assumption(DIFFERENTIABLE(sp.Symbol("f")), "$f$ differentiable, for the infinitesimal form only; "
                    "sympy differentiates $f$ formally and cannot use this predicate")
PREMISES = (DIM, ORTHOGONAL, SKEW, SMOOTH)


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """Derive equivariance for symbolic d (finite and infinitesimal) and check it in d = 2, 3.

    Args:
        assumed: the premises to derive under (default: the claim's, ``conjunction(PREMISES)``).

    Returns:
        The derivation; verified iff every step simplifies to zero exactly.

    Example:
        >>> derive().verdict
        'verified'
    """
    assumed = conjunction(PREMISES) if assumed is None else assumed
    out = Derivation()
    x = sp.MatrixSymbol("x", d, 1)
    c = sp.Symbol("c")
    f = sp.Function("f")

    out.say(
        "Let $d$ be a symbolic dimension, $R\\in\\mathbb{R}^{d\\times d}$ with " + tex(ORTHOGONAL.predicate) + ", "
        "$x\\in\\mathbb{R}^d$. Any radial map can be written $\\sigma(x) = f(x^\\top x)\\,x$ "
        "(the paper's $x\\tanh\\lVert x\\rVert$ is $f(s)=\\tanh\\sqrt{s}$); the linear map is $f \\equiv c$."
    )
    lin = c * (R * x) - R * (c * x)
    out.check("Linear: $\\sigma(Rx) - R\\sigma(x) = c\\,Rx - R(c\\,x) = 0$ for every matrix $R$.", is_zero(lin))

    def sig(v: sp.MatrixExpr) -> sp.MatrixExpr:
        return f(sp.Trace(v.T * v).doit()) * v

    diff = sig(R * x) - R * sig(x)
    out.say(f"Radial, finite: $\\sigma(Rx) - R\\sigma(x) = {sp.latex(diff)}$.")
    reduced = refine_under(diff, assumed)
    out.check(
        f"`refine` under the premises, then `doit`, reduces the difference to {tex(reduced)}: the premise "
        f"{tex(ORTHOGONAL.predicate)} is what lets `refine` rewrite $R^\\top R$ to $I$. So it vanishes for every "
        "orthogonal $R$ (rotations and reflections) and every $f$.",
        is_zero(reduced),
    )

    # Infinitesimal: J(x) A x - A sigma(x) with J = f I + 2 f' x x^T and A skew.
    fp = sp.Function("f'")
    s = sp.Trace(x.T * x).doit()
    q = x.T * A * x
    defect = f(s) * A * x + 2 * fp(s) * x * q - A * (f(s) * x)
    out.say(
        "Radial, infinitesimal: with $J_\\sigma(x) = f\\,I + 2f'(x^\\top x)\\,xx^\\top$ and a generic "
        f"generator $A$ of $SO(d)$ ({tex(SKEW.predicate)}), the defect $J_\\sigma(x)Ax - A\\sigma(x) = {sp.latex(defect)}$."
    )
    q_t = q.T.subs(substitutions(assumed))
    out.check(
        f"The scalar $q = {sp.latex(q)}$ equals its transpose ${sp.latex(q.T)}$, which is "
        f"${sp.latex(q_t)} = -q$ by the premise {tex(SKEW.predicate)} (sympy's `refine` has no rule for a "
        "skew matrix, so the premise is applied as a substitution); hence $q = 0$.",
        is_zero(q_t + q),
    )
    out.check(
        "With $q=0$ the defect is $f A x - A f x = 0$.",
        is_zero(sp.expand(defect).subs(q, sp.ZeroMatrix(1, 1)).doit()),
    )

    # Concrete: the infinitesimal condition with an explicit Jacobian in d = 2, 3, 4.
    for n in (2, 3, 4):
        xs = sp.Matrix(sp.symbols(f"x1:{n + 1}", real=True))
        params = sp.symbols(f"a1:{n * (n - 1) // 2 + 1}", real=True)
        gen = sp.zeros(n, n)
        k = 0
        for i in range(n):
            for j in range(i + 1, n):
                gen[i, j], gen[j, i] = params[k], -params[k]
                k += 1
        g = sp.Function("g")
        sigma = xs * g((xs.T * xs)[0])
        jac = sigma.jacobian(xs)
        in_domain = sp.ask(DIM.predicate.subs(d, n))
        out.check(
            f"$d={n}$ (`ask` of {tex(DIM.predicate.subs(d, n))}: {in_domain}), explicit Jacobian of "
            f"$g(x^\\top x)\\,x$, generic skew $A$ with {len(params)} free entries: $J_\\sigma(x)Ax - A\\sigma(x) = 0$.",
            is_zero(sp.expand(jac * gen * xs - gen * sigma)) if in_domain else None,
        )

    # Concrete: the paper's x tanh|x| under explicit rotations.
    th = sp.Symbol("theta", real=True)
    x2 = sp.Matrix(sp.symbols("x1 x2", real=True))
    R2 = rotation2(sp.cos(th), sp.sin(th))
    d2 = radial(R2 * x2) - R2 * radial(x2)
    out.check(
        f"The explicit instances satisfy the premise {tex(ORTHOGONAL.predicate)}: sympy's `ask` cannot decide it "
        f"for an explicit matrix (it answers {sp.ask(sp.Q.orthogonal(R2))} for $R_\\theta$), so it is checked as "
        "$R_\\theta^\\top R_\\theta - I = 0$ by trigonometric simplification (and for $R(q)$ below).",
        is_zero(R2.T * R2 - sp.eye(2), trig=True),
    )
    out.check(
        f"$d=2$, $R_\\theta = {sp.latex(R2)}$, $\\sigma(x)=x\\tanh\\lVert x\\rVert$: "
        "$\\sigma(R_\\theta x) - R_\\theta\\sigma(x) = 0$ for all $\\theta$.",
        is_zero(d2, trig=True),
    )
    qa = sp.symbols("a b c e", real=True)
    R3 = quaternion_rotation(*qa)
    x3 = sp.Matrix(sp.symbols("x1 x2 x3", real=True))
    out.check(
        "$d=3$, $R(q)$ the rotation of an arbitrary quaternion $q=(a,b,c,e)\\neq 0$ (onto $SO(3)$): "
        "$R^\\top R = I$ and $\\det R = 1$ by rational simplification.",
        True if is_zero(sp.simplify(R3.T * R3 - sp.eye(3))) and sp.simplify(R3.det() - 1) == 0 else None,
    )
    d3 = radial(R3 * x3) - R3 * radial(x3)
    out.check(
        "$d=3$: $\\sigma(R(q)x) - R(q)\\sigma(x) = 0$ for $\\sigma(x)=x\\tanh\\lVert x\\rVert$.",
        is_zero(sp.simplify(d3)),
    )
    out.facts["activations"] = ["linear", "radial_tanh"]
    return out


CLAIM = Claim(
    name="equivariance",
    title="Linear and radial activations commute with every orthogonal matrix",
    statement=(
        "For every $d\\ge 1$, every orthogonal $R\\in O(d)$ and every $x\\in\\mathbb{R}^d$: "
        "$\\sigma(Rx) = R\\,\\sigma(x)$ for $\\sigma(x) = c\\,x$ and for every radial "
        "$\\sigma(x) = x\\,f(\\lVert x\\rVert)$, in particular the paper's $x\\tanh\\lVert x\\rVert$."
    ),
    premises=PREMISES,
    method="refine under Q.orthogonal(R) (symbolic d); skew-generator defect; explicit SO(2), SO(3)",
    numeric="equivariance",
    derive=derive,
)
