"""Claim 5: what the gauge symmetry conserves under gradient flow (Noether for gradient flow)."""

from __future__ import annotations

import sympy as sp

from geodrift.proofs.claim import (
    Assumption,
    Claim,
    Derivation,
    askable,
    conjunction,
    is_zero,
    refine_under,
    substitutions,
    tex,
)


def _ms(name: str, r: int, c: int) -> sp.Matrix:
    return sp.Matrix(r, c, lambda i, j: sp.Symbol(f"{name}_{i}{j}", real=True))


def _m_matrix(E, Ws, H, GE, GWs, GH):  # noqa: ANN001, ANN202 - explicit sympy matrices
    M = E * GE.T - GH.T * H
    for W, G in zip(Ws, GWs, strict=False):
        M += W * G.T - G.T * W
    return M


def _instance_M(kind: str, layers: int) -> sp.Matrix:
    """M for one sample of a d=2 residual net with a generic loss ell(y) (and generic radial phi).

    Gradients come from sympy differentiation; undefined-function applications are then replaced by
    fresh symbols (identical applications by the same symbol) so the cancellation is polynomial.
    """
    E, H = _ms("e", 2, 2), _ms("k", 1, 2)
    Ws = [_ms(f"w{l}", 2, 2) for l in range(layers)]
    x = _ms("x", 2, 1)
    ell, phi = sp.Function("ell"), sp.Function("phi")
    h = E * x
    for W in Ws:
        u = W * h
        h = h + (u if kind == "linear" else u * phi((u.T * u)[0]))
    loss = ell((H * h)[0])
    grad = lambda P: P.applyfunc(lambda p: sp.diff(loss, p))  # noqa: E731
    M = _m_matrix(E, Ws, H, grad(E), [grad(W) for W in Ws], grad(H))
    atoms = sorted(M.atoms(sp.Subs, sp.Derivative, sp.core.function.AppliedUndef), key=sp.count_ops, reverse=True)
    return M.xreplace({a: sp.Symbol(f"_u{i}") for i, a in enumerate(atoms)})


d = sp.Symbol("d")
_A, _M, _g, _G = (sp.MatrixSymbol(n, d, d) for n in ("A", "M", "g", "G"))
_E, _H, _W = sp.MatrixSymbol("E", d, 5), sp.MatrixSymbol("H", 4, d), sp.MatrixSymbol("W", d, d)
_GE, _GH, _GW = sp.MatrixSymbol("G_E", d, 5), sp.MatrixSymbol("G_H", 4, d), sp.MatrixSymbol("G_W", d, d)
_dE, _dH, _dW = (sp.MatrixSymbol(f"\\dot{{{m.name}}}", *m.shape) for m in (_E, _H, _W))
DIM = Assumption(sp.Q.integer(d) & sp.Q.positive(d), "symbolic $d$; the identities with explicit entries are "
                 "$d=2, 3$ instances")
ORTHOGONAL = Assumption(sp.Q.orthogonal(_g), "the gauge $g_t=e^{tA}$ is a rotation; `refine` turns $g^{-1}$ into "
                        "$g^\\top$")
SKEW = Assumption(sp.Eq(_A.T, -_A), "its generator is skew; sympy has no skew-symmetric predicate, so `solve` of "
                  "the equation entrywise gives the general skew $A$")
INVARIANT = Assumption(sp.Eq(sp.Trace(_A * _M), 0), "$\\mathcal{L}$ invariant under the rotation gauge of claim "
                       "*gauge*, in the form $\\frac{d}{dt}\\mathcal{L}(g_t\\theta)|_0 = "
                       "\\operatorname{tr}(AM) = 0$ given by the Noether identity; instantiated at the general skew $A$")
FLOW = Assumption(sp.Eq(_dE, -_GE) & sp.Eq(_dW, -_GW) & sp.Eq(_dH, -_GH), "gradient flow, or plain GD for $P$; "
                  "applied as a substitution: sympy's `refine` cannot rewrite with matrix equations")
INVERTIBLE = Assumption(sp.Q.invertible(_G), "the linear net's $GL(d)$ gauge; decided by `ask`")
PREMISES = (DIM, ORTHOGONAL, SKEW, INVARIANT, FLOW, INVERTIBLE)


def _general_skew(n: int, assumed: sp.Basic) -> tuple[sp.Matrix, list[sp.Symbol]] | None:
    """The general n x n matrix satisfying the premises' equation for A^T (solved entrywise), with
    its free entries; None if the premises say nothing about A^T."""
    rule = {k.subs(d, n): v.subs(d, n) for k, v in substitutions(assumed).items() if k == _A.T}
    if not rule:
        return None
    entries = sp.Matrix(n, n, lambda i, j: sp.Symbol(f"s_{i}{j}"))
    A_n = _A.subs(d, n)
    (lhs, rhs), = rule.items()
    eqs = [e for e in (lhs - rhs).xreplace({A_n: entries}).doit() if e != 0]
    sol = sp.solve(eqs, list(entries), dict=True)
    if len(sol) != 1:
        return None
    general = entries.subs(sol[0])
    return general, sorted(general.free_symbols, key=str)


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """Derive the Noether identity, the vanishing orbit momentum, and the linear-net invariant Q.

    Args:
        assumed: the premises to derive under (default: the claim's, ``conjunction(PREMISES)``).

    Returns:
        The derivation.

    Example:
        >>> derive().verdict
        'verified'
    """
    assumed = conjunction(PREMISES) if assumed is None else assumed
    rules = substitutions(assumed)
    out = Derivation()
    g_inv = refine_under(_g.I, assumed)
    out.check(
        "Parameters $\\theta=(E, W_1..W_L, H)$, gradients $G_\\bullet = \\partial\\mathcal{L}/\\partial\\bullet$, "
        "gradient flow $\\dot\\theta = -\\nabla\\mathcal{L}$. The gauge $g_t = e^{tA}$ acts by "
        "$E\\mapsto g_tE$, $W_l\\mapsto g_tW_lg_t^{-1}$, $H\\mapsto Hg_t^{-1}$ with generator "
        f"$X_A\\theta = (AE,\\,[A,W_l],\\,-HA)$; `refine` under {tex(ORTHOGONAL.predicate)} gives "
        f"$g^{{-1}} = {sp.latex(g_inv)}$, the conjugation $RWR^\\top$ of claim *gauge*.",
        True if g_inv == _g.T else None,
    )
    # (a) the Noether identity <G, X_A theta> = tr(A M), n = 3, L = 2, explicit entries.
    n = 3
    E, H, A = _ms("e", n, 2), _ms("k", 2, n), _ms("a", n, n)
    Ws = [_ms(f"w{l}", n, n) for l in range(2)]
    GE, GH = _ms("g", n, 2), _ms("q", 2, n)
    GWs = [_ms(f"v{l}", n, n) for l in range(2)]
    M = _m_matrix(E, Ws, H, GE, GWs, GH)
    pairing = (GE.T * A * E).trace() + sum(((G.T * (A * W - W * A)).trace() for W, G in zip(Ws, GWs, strict=False)), sp.S(0))
    pairing += (GH.T * (-H * A)).trace()
    out.check(
        "**Noether identity.** $\\langle\\nabla\\mathcal{L}, X_A\\theta\\rangle = \\operatorname{tr}(AM)$ with "
        "$M = EG_E^\\top + \\sum_l (W_lG_{W_l}^\\top - G_{W_l}^\\top W_l) - G_H^\\top H$ "
        f"(polynomial identity, $d={n}$ (`ask` of {tex(DIM.predicate.subs(d, n))}: "
        f"{sp.ask(DIM.predicate.subs(d, n))}), $L=2$, all entries symbolic, $A$ a general matrix).",
        is_zero(sp.expand(pairing - (A * M).trace())) if sp.ask(DIM.predicate.subs(d, n)) else None,
    )
    skew = _general_skew(n, assumed)
    Mg = _ms("m", n, n)
    symmetric: bool | None = None
    shown = "?"
    invariance = [c for c in sp.And.make_args(assumed) if isinstance(c, sp.Equality) and c.lhs == sp.Trace(_A * _M)]
    if skew is not None and invariance:
        general, free = skew
        trace = sp.expand(invariance[0].lhs.subs(d, n).xreplace({_A.subs(d, n): general, _M.subs(d, n): Mg}).doit())
        conds = sp.Poly(trace - invariance[0].rhs, *free).coeffs()
        shown = sp.latex(conds)
        sol = sp.solve(conds, [Mg[j, i] for i in range(n) for j in range(i + 1, n)], dict=True)
        symmetric = True if len(sol) == 1 and (Mg - Mg.T).subs(sol[0]).is_zero_matrix else None
    out.check(
        f"Invariance of $\\mathcal{{L}}$ under $SO(d)$, the premise {tex(INVARIANT.predicate)}, for every $A$ with "
        f"{tex(SKEW.predicate)}: `solve` of the latter entrywise gives the general skew $A$ "
        f"${sp.latex(skew[0]) if skew else '?'}$, and the coefficients of its free entries in "
        f"$\\operatorname{{tr}}(AM)$ must vanish: ${shown} = 0$, i.e. $M = M^\\top$.",
        symmetric,
    )
    Ms = _E * _GE.T + _W * _GW.T - _GW.T * _W - _GH.T * _H
    P = _E * _dE.T + _W * _dW.T - _dW.T * _W - _dH.T * _H
    P_flow = sp.expand(P.subs(rules)).doit()
    out.check(
        "**Orbit momentum.** Along the flow, $P := E\\dot E^\\top + \\sum_l (W_l\\dot W_l^\\top - \\dot W_l^\\top W_l) - "
        f"\\dot H^\\top H$ becomes, by the premise {tex(FLOW.predicate)}, ${sp.latex(P_flow)} = -M$ (symbolic $d$), "
        "so $P - P^\\top = 0$: the Noether charge "
        "$\\langle\\dot\\theta, X_A\\theta\\rangle = -\\operatorname{tr}(AM)$ of every rotation generator is "
        "identically $0$. Gradient flow (and every plain GD step, whatever its size) has no component along "
        "the rotation orbit.",
        is_zero(P_flow + Ms),
    )
    theta_ok: bool | None = None
    if skew is not None:
        general, _ = skew
        theta_pair = (E.T * general * E).trace() + sum(((W.T * (general * W - W * general)).trace() for W in Ws), sp.S(0))
        theta_pair += (H.T * (-H * general)).trace()
        flat = list(E) + [w for W in Ws for w in W] + list(H)
        field_ = sp.Matrix(list(general * E) + [w for W in Ws for w in (general * W - W * general)] + list(-H * general))
        jac = field_.jacobian(flat)
        theta_ok = True if is_zero(sp.expand(theta_pair)) and (jac + jac.T).is_zero_matrix \
            and not jac.is_zero_matrix else None
    out.check(
        "No function of the weights alone is conserved by the rotations: the quadratic candidate "
        "$\\langle\\theta, X_A\\theta\\rangle$ is identically $0$ for the general skew $A$, and $X_A\\theta$ is not a "
        "gradient field (its Jacobian is skew, not symmetric), so no $Q$ has $\\nabla Q = X_A\\theta$ ($d=3$, $L=2$).",
        theta_ok,
    )
    # (b) linear residual nets: GL(d) gauge and the conserved Q.
    Id = sp.Identity(d)
    W2s, xs = sp.MatrixSymbol("W_2", d, d), sp.MatrixSymbol("x", 5, 1)
    y = _H * (Id + W2s) * (Id + _W) * _E * xs
    y_g = _H * _G.I * (Id + _G * W2s * _G.I) * (Id + _G * _W * _G.I) * _G * _E * xs
    with sp.assuming(*askable(assumed)):
        invertible = sp.ask(sp.Q.invertible(_G))
    red = sp.expand(y_g).doit()
    out.check(
        "**Linear residual nets** have the larger gauge $GL(d)$: $W_l\\mapsto GW_lG^{-1}$, $E\\mapsto GE$, "
        "$H\\mapsto HG^{-1}$ leaves $y = H\\prod_l(I+W_l)Ex$ unchanged (symbolic $d$). sympy cancels $G^{-1}G$ "
        "on its own (writing $G^{-1}$ presumes it exists); what licenses the inverse is the premise: `ask` of "
        f"{tex(sp.Q.invertible(_G))} under the premises is {invertible}. Hence "
        "$\\operatorname{tr}(AM)=0$ for *every* $A$, i.e. $M = 0$.",
        is_zero(red - sp.expand(y)) if invertible else None,
    )
    Q = _E * _E.T + _W * _W.T - _W.T * _W - _H.T * _H
    Q_dot = (_dE * _E.T + _E * _dE.T + _dW * _W.T + _W * _dW.T - (_dW.T * _W + _W.T * _dW)
             - (_dH.T * _H + _H.T * _dH)).subs(rules)
    Q_dot = sp.expand(Q_dot).doit()
    out.check(
        f"For $Q := {sp.latex(Q)}$ (one layer shown; each layer adds its own terms), the product rule and the "
        f"flow premise give $\\dot Q = {sp.latex(Q_dot)} = -(M + M^\\top)$ (symbolic $d$), hence $\\dot Q = 0$: "
        "$Q$ is conserved by gradient flow on "
        "linear residual nets (it is symmetric, so its skew part carries nothing; the conservation comes "
        "from the symmetric, non-compact generators of $GL(d)$).",
        is_zero(Q_dot + Ms + Ms.T),
    )
    out.check(
        "Concrete instance, linear, $d=2$, two layers, generic loss $\\ell(y)$: sympy's gradients give "
        "$M = 0$ entrywise.",
        is_zero(_instance_M("linear", 2)),
    )
    Mr = _instance_M("radial", 1)
    out.check(
        "Concrete instance, radial $u\\,\\phi(u^\\top u)$ with generic $\\phi$ and $\\ell$, $d=2$, one layer: "
        "$M - M^\\top = 0$ (only the rotation part survives; $M+M^\\top$, hence $\\dot Q$, is not forced to "
        "vanish - the numeric check shows it does not).",
        is_zero(sp.expand(Mr[0, 1] - Mr[1, 0])),
    )
    return out


CLAIM = Claim(
    name="noether",
    title="Noether for gradient flow: zero orbit momentum; Q conserved for linear residual nets",
    statement=(
        "Under gradient flow on a residual net with the rotation gauge (linear or radial act), "
        "$P - P^\\top = 0$ for $P = E\\dot E^\\top + \\sum_l(W_l\\dot W_l^\\top - \\dot W_l^\\top W_l) - \\dot H^\\top H$: "
        "the parameters never move along the $SO(d)$ orbit. For a linear residual net the gauge extends to "
        "$GL(d)$ and $Q = EE^\\top + \\sum_l(W_lW_l^\\top - W_l^\\top W_l) - H^\\top H$ is conserved. "
        "Adam's per-coordinate scaling is not rotation-equivariant and breaks both."
    ),
    premises=PREMISES,
    method="trace identity (d=3 explicit), skew A solved from A^T = -A, flow as substitution, ask Q.invertible(G) "
           "(symbolic d), sympy gradients of a generic loss",
    numeric="noether",
    derive=derive,
)
