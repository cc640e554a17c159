"""Claim 4: the rotation gauge of residual networks (W -> R W R^T, E -> R E, H -> H R^T)."""

from __future__ import annotations

import sympy as sp

from geodrift.proofs.activations import ELEMENTWISE, WITNESS_R, WITNESS_X, radial, rotation2
from geodrift.proofs.claim import Assumption, Claim, Derivation, conjunction, is_zero, refine_under, tex
from geodrift.proofs.interval import certify_nonzero

d = sp.Symbol("d")
R = sp.MatrixSymbol("R", d, d)
DIM = Assumption(sp.Q.integer(d) & sp.Q.positive(d), "symbolic $d$ for linear and radial act; the orbit and the "
                 "witnesses are $d=2$ instances")
ORTHOGONAL = Assumption(sp.Q.orthogonal(R), "one $R$ for all layers; `refine` turns $R^\\top R$ into $I$")
PREMISES = (DIM, ORTHOGONAL)


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """Gauge invariance for symbolic d (linear, radial) and certified breaking (element-wise).

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
    I = sp.Identity(d)
    E = sp.MatrixSymbol("E", d, 3)
    H = sp.MatrixSymbol("H", 2, d)
    x = sp.MatrixSymbol("x", 3, 1)
    W1, W2, U1, U2 = (sp.MatrixSymbol(n, d, d) for n in ("W_1", "W_2", "U_1", "U_2"))
    out.say(
        "Network: $h_0 = Ex$, $h_{l+1} = h_l + \\operatorname{act}(W_l h_l)$ (block A) or "
        "$h_{l+1} = h_l + U_l\\operatorname{act}(W_l h_l)$ (block B), $y = H h_L$. Gauge: "
        "$E\\mapsto RE$, $W_l\\mapsto RW_lR^\\top$, $U_l\\mapsto RU_lR^\\top$, $H\\mapsto HR^\\top$, with " + tex(ORTHOGONAL.predicate) + ". Each step below is reduced by `refine` "
        "under the premises (its `MatMul` rule replaces $R^\\top R$ by $I$ only when `ask` says $R$ is orthogonal), "
        "then `doit`."
    )
    conj = lambda M: R * M * R.T  # noqa: E731
    yA = H * (I + W2) * (I + W1) * E * x
    yA_g = H * R.T * (I + conj(W2)) * (I + conj(W1)) * R * E * x
    diffA = refine_under(yA_g - yA, assumed)
    out.check(
        f"Linear block A, two layers, symbolic $d$: `refine` gives $y' - y = {sp.latex(diffA)}$.",
        is_zero(diffA),
    )
    yB = H * (I + U2 * W2) * (I + U1 * W1) * E * x
    yB_g = H * R.T * (I + conj(U2) * conj(W2)) * (I + conj(U1) * conj(W1)) * R * E * x
    diffB = refine_under(yB_g - yB, assumed)
    out.check(
        f"Linear block B, two layers, symbolic $d$: `refine` gives $y'-y = {sp.latex(diffB)}$.",
        is_zero(diffB),
    )
    f = sp.Function("f")
    h = sp.MatrixSymbol("h", d, 1)

    def act(v: sp.MatrixExpr) -> sp.MatrixExpr:
        return f(sp.Trace(v.T * v).doit()) * v

    stepA = (R * h + act(conj(W1) * R * h)) - R * (h + act(W1 * h))
    stepB = (R * h + conj(U1) * act(conj(W1) * R * h)) - R * (h + U1 * act(W1 * h))
    out.check(
        "Radial act $f(v^\\top v)v$, induction step for symbolic $d$: if $h'_l = Rh_l$ then "
        "$h'_{l+1} - Rh_{l+1} = 0$ (blocks A and B); the base case is $h'_0 = REx$ and the head gives "
        "$HR^\\top Rh_L = Hh_L$.",
        True if is_zero(refine_under(stepA, assumed)) and is_zero(refine_under(stepB, assumed)) else None,
    )
    head = refine_under(H * R.T * R * h - H * h, assumed)
    out.check(f"Head: `refine` gives $HR^\\top R h - H h = {sp.latex(head)}$.", is_zero(head))
    # Whole orbit flat for the linear residual net: loss independent of theta, d = 2.
    th = sp.Symbol("s", real=True)
    Rt = rotation2((1 - th**2) / (1 + th**2), 2 * th / (1 + th**2))
    ms = lambda n, r, c: sp.Matrix(r, c, sp.symbols(f"{n}1:{r * c + 1}", real=True))  # noqa: E731
    E2, Wa, Wb, H2, x2 = ms("e", 2, 2), ms("a", 2, 2), ms("b", 2, 2), ms("k", 1, 2), ms("x", 2, 1)
    in_domain = sp.ask(DIM.predicate.subs(d, 2))
    out.check(
        f"The $d=2$ instances lie in the claim's domain (`ask` of {tex(DIM.predicate.subs(d, 2))}: {in_domain}), "
        f"and $R_s$ satisfies the premise {tex(ORTHOGONAL.predicate)}: `ask` cannot decide it for an "
        f"explicit matrix (it answers {sp.ask(sp.Q.orthogonal(Rt))}), so it is checked as $R_s^\\top R_s - I = 0$ "
        "by rational simplification; likewise the witness $R^{*\\top}R^* = I$ exactly.",
        True if in_domain and is_zero(sp.cancel(Rt.T * Rt - sp.eye(2)))
        and (WITNESS_R.T * WITNESS_R - sp.eye(2)).is_zero_matrix else None,
    )
    y_t = H2 * Rt.T * (sp.eye(2) + Rt * Wb * Rt.T) * (sp.eye(2) + Rt * Wa * Rt.T) * Rt * E2 * x2
    ell = sp.Function("ell")
    loss_t = ell(sp.cancel(sp.expand(y_t[0])))
    out.check(
        "Linear residual net, $d=2$, two layers, symbolic weights and the rational "
        "parametrisation $R_s = \\frac{1}{1+s^2}\\begin{pmatrix}1-s^2&-2s\\\\2s&1-s^2\\end{pmatrix}$ of $SO(2)$ "
        "(all rotations but $-I$): $\\partial_s\\,\\ell(y'(s)) = 0$, so the whole orbit is flat.",
        is_zero(sp.diff(loss_t, th)),
    )
    # Element-wise: the gauge by R* changes the function (E = W = H = I, x = x*).
    eye = sp.eye(2)
    out.say(
        "**Only if.** Take $E=W=H=I_2$ (one block A), input $x$: $y'-y = R^\\top\\operatorname{act}(Rx) - "
        "\\operatorname{act}(x) = R^\\top\\bigl(\\operatorname{act}(Rx) - R\\operatorname{act}(x)\\bigr)$, "
        "so if the gauge by $R$ leaves every network unchanged, act commutes with $R$. At the witness "
        "$(x^*, R^*)$ of the breaking claim:"
    )
    facts: dict[str, list[list[float]]] = {}
    for name, a in ELEMENTWISE.items():
        y = eye * (eye * WITNESS_X + a.apply(eye * eye * WITNESS_X))
        Rs = WITNESS_R
        y_g = eye * Rs.T * (Rs * WITNESS_X + a.apply(Rs * eye * Rs.T * Rs * WITNESS_X))
        diff = (y_g - y).applyfunc(sp.sympify)
        boxes = [certify_nonzero(e) for e in diff]
        facts[name] = [list(b[1]) if b[1] else [float("nan")] * 2 for b in boxes]
        out.check(
            f"{name}: $y'-y$ has an entry in [{facts[name][0][0]:.6f}, {facts[name][0][1]:.6f}] / "
            f"[{facts[name][1][0]:.6f}, {facts[name][1][1]:.6f}], excluding $0$.",
            True if any(b[0] for b in boxes) else None,
        )
    yr = radial(WITNESS_X) + WITNESS_X
    yr_g = WITNESS_R.T * (WITNESS_R * WITNESS_X + radial(WITNESS_R * WITNESS_X))
    out.check("radial $x\\tanh\\lVert x\\rVert$ at the same witness: $y'-y = 0$ exactly.", is_zero(yr_g - yr))
    # The paper's per-layer gauge (no conjugation) is broken by the skip path.
    per_layer = (eye + eye * WITNESS_R.T) * (eye + WITNESS_R * eye) - (eye + eye) * (eye + eye)
    out.check(
        "Per-layer gauge $W_l\\mapsto W_lR^\\top$, $W_{l-1}\\mapsto RW_{l-1}$ (exact without skips: "
        "$W_lR^\\top RW_{l-1} = W_lW_{l-1}$) is broken by the skip path: with $W_l=W_{l-1}=I$, "
        f"$(I+R^{{*\\top}})(I+R^*) - 4I = {sp.latex(per_layer)} \\ne 0$. The residual keeps only the "
        "diagonal (one $R$ for all layers) conjugation gauge above.",
        True if any(e != 0 for e in per_layer) else None,
    )
    out.facts["witness"] = facts
    return out


CLAIM = Claim(
    name="gauge",
    title="Residual networks keep the conjugation gauge iff the activation is equivariant",
    statement=(
        "For $h_{l+1} = h_l + \\operatorname{act}(W_lh_l)$ and $h_{l+1} = h_l + U_l\\operatorname{act}(W_lh_l)$ "
        "with $h_0=Ex$, $y=Hh_L$, the map $(E,W_l,U_l,H)\\mapsto(RE, RW_lR^\\top, RU_lR^\\top, HR^\\top)$ "
        "leaves $y$ (hence the loss) unchanged for all weights iff act commutes with $R$. For linear "
        "and radial act this holds for all $R\\in O(d)$; for a linear residual net the loss is constant "
        "on the whole orbit."
    ),
    premises=PREMISES,
    method="refine under Q.orthogonal(R) (symbolic d) and induction on layers; certified element-wise witnesses",
    numeric="gauge",
    derive=derive,
)
