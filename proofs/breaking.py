"""Claim 2: element-wise activations break the rotation symmetry; only sigma(t) = c t keeps it."""

from __future__ import annotations

import sympy as sp

from geodrift.proofs.activations import ELEMENTWISE, GENERATOR_A, WITNESS_R, WITNESS_X, rotation2
from geodrift.proofs.claim import C1, Assumption, Claim, Derivation, conjunction, is_zero, tex
from geodrift.proofs.interval import certify_nonzero

d = sp.Symbol("d")
DIM = Assumption(sp.Q.integer(d) & (d >= 2), "the witnesses live in the $(1,2)$-plane; for $d=1$ the odd "
                 "$\\sigma$ commute with $O(1)=\\{\\pm1\\}$")
SMOOTH = Assumption(C1(sp.Symbol("sigma")), "$\\sigma\\in C^1$, needed by the infinitesimal form only, the "
                    "finite form assumes nothing; sympy differentiates $\\sigma$ formally and cannot use this predicate")
PREMISES = (DIM, SMOOTH)


def witness(name: str) -> tuple[sp.Matrix, sp.Matrix]:
    """Exact finite and infinitesimal defects of an element-wise activation at the witness.

    Args:
        name: a key of ``ELEMENTWISE``.

    Returns:
        ``(finite, defect)``: ``sigma(R* x*) - R* sigma(x*)`` and
        ``D_A(x*) = diag(sigma'(x*)) A x* - A sigma(x*)``, both exact (2, 1) sympy matrices, with
        ``R*`` the 3-4-5 rotation, ``x* = (1, -1)`` and ``A`` the generator of SO(2).
    """
    act = ELEMENTWISE[name]
    finite = act.apply(WITNESS_R * WITNESS_X) - WITNESS_R * act.apply(WITNESS_X)
    jac = sp.diag(*[act.derivative(v) for v in WITNESS_X])
    defect = jac * GENERATOR_A * WITNESS_X - GENERATOR_A * act.apply(WITNESS_X)
    return finite, defect


def _certify(out: Derivation, label: str, vec: sp.Matrix) -> list[list[float]]:
    boxes: list[list[float]] = []
    decided: bool | None = None
    for entry in vec:
        ok, box = certify_nonzero(sp.sympify(entry))
        boxes.append(list(box) if box else [float("nan"), float("nan")])
        decided = decided or ok
    shown = ", ".join(f"[{b[0]:.6f}, {b[1]:.6f}]" for b in boxes)
    out.check(f"{label} $= {sp.latex(vec.T)}^\\top \\in$ ({shown}): an entry's enclosure excludes $0$.", decided)
    return boxes


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """Witnesses for each element-wise activation, then the general theorem.

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
    dim = [c for c in sp.And.make_args(assumed) if d in c.free_symbols]
    at2, at1 = sp.ask(sp.And(*dim).subs(d, 2)) if dim else None, sp.ask(sp.And(*dim).subs(d, 1)) if dim else None
    out.check(
        f"Dimension: `ask` of the premise {tex(sp.And(*dim))} at $d=2$ gives {at2} (the witnesses' plane is "
        f"inside the claim) and at $d=1$ gives {at1} (the exception is outside it). sympy cannot reason with "
        f"the bound for symbolic $d$ (`ask(Q.positive(d), premise)` is {sp.ask(sp.Q.positive(d), sp.And(*dim))}: it "
        "cannot even infer $d>0$ from $d\\ge2$), so "
        "the step to $d>2$ is by hand: embed the $2\\times2$ witnesses in the first two coordinates.",
        True if at2 is True and at1 is False else None,
    )
    out.say(
        f"Witness: $R^* = {sp.latex(WITNESS_R)}$ (exact rational rotation, $3^2+4^2=5^2$), "
        f"$x^* = {sp.latex(WITNESS_X.T)}^\\top$, generator $A = {sp.latex(GENERATOR_A)}$; in $d>2$ embed "
        "them in the first two coordinates. Each difference below is computed exactly by sympy and "
        "enclosed by outward-rounded interval arithmetic (erf by its alternating series with a "
        "remainder bound); an enclosure that excludes $0$ certifies symmetry breaking."
    )
    facts: dict[str, dict[str, list[list[float]]]] = {}
    for name, act in ELEMENTWISE.items():
        finite, defect = witness(name)
        out.say(f"**{name}**, $\\sigma(t) = {act.latex}$:")
        facts[name] = {
            "finite": _certify(out, "$\\sigma(R^*x^*) - R^*\\sigma(x^*)$", finite),
            "defect": _certify(out, "$D_A(x^*)$", defect),
        }
    out.facts["witness"] = facts

    # General theorem, infinitesimal form (sigma C^1).
    s = sp.Function("sigma")
    x1, x2, t, u, cth = sp.symbols("x_1 x_2 t u c", real=True)
    xv = sp.Matrix([x1, x2])
    sig = xv.applyfunc(s)
    jac = sp.diag(*[sp.diff(s(v), v) for v in (x1, x2)])
    D = jac * GENERATOR_A * xv - GENERATOR_A * sig
    out.say(
        "**Theorem.** For $d\\ge2$, an element-wise $\\sigma$ satisfies $\\sigma(Rx)=R\\sigma(x)$ for all "
        "$R\\in SO(d)$ iff $\\sigma(t) = c\\,t$. *Infinitesimal proof* ($\\sigma\\in C^1$): with $A$ the "
        f"generator of the $(1,2)$-plane, the defect equations are $D_A(x) = {sp.latex(D)} = 0$ for all $x$."
    )
    eq = D[1].subs(x2, 0).doit()
    sol = sp.solve(eq, s(x1))
    c0 = sp.Subs(sp.Derivative(s(t), t), t, 0)
    ok = len(sol) == 1 and is_zero((sol[0] - c0.doit() * x1).doit()) is True
    if not ok and len(sol) == 1:
        ok = is_zero(sol[0].doit() - sp.diff(s(t), t).subs(t, 0) * x1) is True
    out.check(
        f"Setting $x_2=0$ in the second equation: {tex(sp.Eq(eq, 0))}, so sympy solves "
        f"$\\sigma(x_1) = {sp.latex(sol[0]) if sol else '?'}$: $\\sigma(t) = \\sigma'(0)\\,t$.",
        True if ok else None,
    )
    # Finite form (no regularity): x = t e_1 and a rotation by theta in the (1,2) plane.
    sth = sp.sqrt(1 - cth**2)
    R = rotation2(cth, sth)
    xe = sp.Matrix([t, 0])
    fin = (R * xe).applyfunc(s) - R * xe.applyfunc(s)
    e_quarter = fin[0].subs(cth, 0)
    sol0 = sp.solve(e_quarter, s(0))
    out.check(
        f"*Finite proof* (no regularity). $x = t e_1$, $R_\\theta$ with $\\cos\\theta=c$: the first "
        f"entry of $\\sigma(R_\\theta x)-R_\\theta\\sigma(x)$ is {tex(fin[0])}. At $c=0$: "
        f"{tex(sp.Eq(e_quarter, 0))} gives $\\sigma(0) = {sp.latex(sol0[0]) if sol0 else '?'}$.",
        True if sol0 == [0] else None,
    )
    e_scale = fin[0].subs(s(0), 0)
    sol_c = sp.solve(e_scale.subs(t, 1), s(cth))
    out.check(
        f"With $\\sigma(0)=0$ and $t=1$: $\\sigma(c) = {sp.latex(sol_c[0]) if sol_c else '?'}$ for "
        "$|c|\\le 1$.",
        True if sol_c and is_zero(sol_c[0] - cth * s(1)) else None,
    )
    e_big = e_scale.subs({t: u, cth: 1 / u})
    sol_u = sp.solve(e_big, s(u))
    out.check(
        f"For $|u|>1$ take $t=u$, $c=1/u$: {tex(sp.Eq(e_big, 0))} gives "
        f"$\\sigma(u) = {sp.latex(sol_u[0]) if sol_u else '?'}$. Hence $\\sigma(t) = \\sigma(1)\\,t$ on "
        "$\\mathbb{R}$.",
        True if sol_u and is_zero(sol_u[0] - u * s(1)) else None,
    )
    Rg = sp.MatrixSymbol("R", 3, 3)
    c = sp.Symbol("c")
    xg = sp.MatrixSymbol("x", 3, 1)
    out.check(
        "Conversely $\\sigma(t)=ct$ gives $\\sigma(Rx) - R\\sigma(x) = cRx - Rcx = 0$ for every matrix $R$. "
        "(For $d=1$, $O(1)=\\{\\pm1\\}$ and exactly the odd $\\sigma$ commute; hence $d\\ge2$.)",
        is_zero(c * (Rg * xg) - Rg * (c * xg)),
    )
    return out


CLAIM = Claim(
    name="breaking",
    title="Element-wise activations break SO(d); only sigma(t) = c t keeps it",
    statement=(
        "For $\\sigma\\in\\{$ReLU, leaky ReLU, GELU, SiLU, tanh, softplus, sigmoid, $|t|\\}$ applied "
        "entry-wise, the infinitesimal defect $D_A(x) = \\operatorname{diag}(\\sigma'(x))Ax - A\\sigma(x)$ "
        "is not identically zero, and there is an explicit $(x,R)$ with $\\sigma(Rx)\\ne R\\sigma(x)$. "
        "More generally, for $d\\ge2$ an element-wise $\\sigma$ commutes with every rotation iff "
        "$\\sigma(t)=c\\,t$."
    ),
    premises=PREMISES,
    method="exact witness + interval enclosure excluding 0; sympy solve of the defect equations",
    numeric="breaking",
    derive=derive,
)
