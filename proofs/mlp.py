"""Claim 8: the gauge groups of MLP hidden units (gated and plain) and of the simulators' residual MLP.

A hidden unit's input row, output column and activation form a unit that any permutation may move.
Scales pass exactly where the unit is linear in them: a gated MLP's Up row (any nonzero scale, undone on
Down's column), a ReLU unit (positive scales, its bias with it); an odd activation (tanh) adds signs.
Nothing passes SiLU or GELU but permutations: ``SiLU(s t) = s SiLU(t)`` for all t forces ``s = 1``.
"""

from __future__ import annotations

import itertools

import sympy as sp

from geodrift.proofs.activations import ELEMENTWISE
from geodrift.proofs.claim import Assumption, Claim, Derivation, askable, conjunction, is_zero, tex
from geodrift.proofs.commutants import PosHom, is_odd, is_pos_homogeneous, pull_positive
from geodrift.proofs.interval import certify_nonzero

UNITS = 3  # hidden units of the symbolic instances (all 3! permutations are checked)
SCALES = sp.symbols("s1:4", real=True)
NONZERO = Assumption(sp.And(*(sp.Q.nonzero(s) for s in SCALES)), "the Up scales are nonzero (any sign): "
                     "$S = \\operatorname{diag}(s)$ is invertible")
LAMBDAS = sp.symbols("lambda1:4", real=True)
POSITIVE = Assumption(sp.And(*(sp.Q.positive(v) for v in LAMBDAS)), "ReLU scales are positive; `ask` under it "
                      "lets the homogeneity rule pull them out")
PREMISES = (NONZERO, POSITIVE)


def _perm(p: tuple[int, ...]) -> sp.Matrix:
    return sp.Matrix(len(p), len(p), lambda i, j: 1 if p[i] == j else 0)


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """Gated and plain MLPs on 3 symbolic hidden units; SiLU's scale equation solved; certified witnesses.

    Args:
        assumed: the premises to derive under (default: the claim's, ``conjunction(PREMISES)``).

    Returns:
        The derivation; ``facts["table"]`` gives, per activation, the groups of a plain and a gated MLP.

    Example:
        >>> derive().verdict
        'verified'
    """
    assumed = conjunction(PREMISES) if assumed is None else assumed
    out = Derivation()
    sigma = sp.Function("sigma")
    G = sp.Matrix(UNITS, 2, sp.symbols("g1:7", real=True))
    U = sp.Matrix(UNITS, 2, sp.symbols("u1:7", real=True))
    Dn = sp.Matrix(2, UNITS, sp.symbols("d1:7", real=True))
    b1 = sp.Matrix(sp.symbols("c1:4", real=True))
    x = sp.Matrix(sp.symbols("x1:3", real=True))

    def gated(gate: sp.Matrix, up: sp.Matrix, down: sp.Matrix, act=sigma) -> sp.Matrix:  # noqa: ANN001
        return down * (gate * x).applyfunc(act).multiply_elementwise(up * x)

    base = gated(G, U, Dn)
    perms_ok = all(is_zero(gated(_perm(p) * G, _perm(p) * U, Dn * _perm(p).T) - base)
                   for p in itertools.permutations(range(UNITS)))
    out.check(
        "**Gated MLP** $y = D\\,(\\sigma(Gx)\\odot Ux)$, generic $\\sigma$, 3 hidden units: $G\\to PG$, "
        f"$U\\to PU$, $D\\to DP^\\top$ leaves $y$ unchanged for all {sp.factorial(UNITS)} permutations "
        "(index-wise in general: unit $j$ moves as a whole).",
        True if perms_ok else None,
    )
    S = sp.diag(*SCALES)
    scaled = gated(G, S * U, Dn * S.inv()) - base
    with sp.assuming(*askable(assumed)):
        nonzero = all(sp.ask(sp.Q.nonzero(s)) for s in SCALES)
    out.check(
        f"Up rows $\\times s_j$, Down columns $\\div s_j$ (premise {tex(NONZERO.predicate)}, which `ask` "
        "confirms, so $S^{-1}$ exists): $y'-y = 0$ for every $\\sigma$, since $Ux$ enters the product "
        "linearly. Any nonzero scale, negative too: the gated group is $(\\mathbb{R}^\\times)^{d_{ff}}\\rtimes "
        "S_{d_{ff}}$ on Up/Down, $S_{d_{ff}}$ on Gate.",
        is_zero(scaled) if nonzero else None,
    )
    s, t = sp.Symbol("s", real=True), sp.Symbol("t", real=True)
    silu = ELEMENTWISE["silu"].fn
    defect = sp.factor(sp.simplify(silu(s * t) - s * silu(t)))
    roots = sp.solveset(sp.exp(-s * t) - sp.exp(-t), s, domain=sp.S.Reals)
    out.check(
        "**Gate rows cannot scale** (SiLU): undoing $G_j\\to sG_j$ on $D$ or $U$ needs $\\operatorname{SiLU}(st) "
        f"= s\\operatorname{{SiLU}}(t)$ for all $t$. The defect is ${sp.latex(defect)}$; its sigmoid factors are "
        "equal iff $e^{-st} = e^{-t}$, which for $t\\ne0$ `solveset` solves over the reals as "
        f"$s\\in{sp.latex(roots)}$. So only $s=1$.",
        True if roots == sp.FiniteSet(1) else None,
    )
    boxes: dict[str, list[float]] = {}
    for name in ("silu", "gelu"):
        ok, box = certify_nonzero(ELEMENTWISE[name].fn(sp.Integer(2)) - 2 * ELEMENTWISE[name].fn(sp.Integer(1)))
        boxes[name] = list(box) if box else [float("nan")] * 2
        out.check(f"{name}: $\\sigma(2) - 2\\sigma(1)\\in[{boxes[name][0]:.6f}, {boxes[name][1]:.6f}]$, excluding 0.",
                  ok)
    lam = sp.diag(*LAMBDAS)
    with sp.assuming(*askable(assumed)):
        pulled = pull_positive((lam * G * x).applyfunc(PosHom))
        pulled_b = pull_positive((lam * (G * x + b1)).applyfunc(PosHom))
    relu_gated = Dn * lam.inv() * pulled.multiply_elementwise(U * x) - Dn * (G * x).applyfunc(PosHom).multiply_elementwise(U * x)
    relu_plain = Dn * lam.inv() * pulled_b - Dn * (G * x + b1).applyfunc(PosHom)
    out.check(
        "**ReLU** (positively homogeneous $\\phi$, premise " + tex(POSITIVE.predicate) + "): `ask` pulls "
        "$\\lambda_j$ out, so a gated ReLU's Gate rows and a plain MLP's input rows *with their bias* "
        "$\\times\\lambda_j$, output columns $\\div\\lambda_j$, are exact: "
        "$D\\Lambda^{-1}(\\phi(\\Lambda Gx)\\odot Ux) = D(\\phi(Gx)\\odot Ux)$ and "
        "$D\\Lambda^{-1}\\phi(\\Lambda(Gx+c)) = D\\phi(Gx+c)$.",
        True if is_zero(relu_gated) and is_zero(relu_plain) else None,
    )
    signs = sp.diag(-1, 1, 1)
    tanh_plain = Dn * signs * (signs * (G * x + b1)).applyfunc(sp.tanh) - Dn * (G * x + b1).applyfunc(sp.tanh)
    out.check(
        "**tanh** is odd: flipping a unit's input row and bias and its output column, "
        "$DS\\tanh(S(Gx+c)) = D\\tanh(Gx+c)$ for $S = \\operatorname{diag}(-1,1,1)$: a plain tanh MLP keeps "
        "the signed permutations.",
        is_zero(tanh_plain),
    )
    table: dict[str, dict[str, str]] = {}
    decided = True
    for name in ELEMENTWISE:
        odd, _ = is_odd(name)
        hom, _ = is_pos_homogeneous(name)
        decided = decided and odd is not None and hom is not None
        plain = "positive scalings x permutations" if hom else ("signed permutations" if odd else "permutations")
        # a sign on an odd Gate row is a sign on the Up row (already in Up's scalings)
        gate = "positive scalings x permutations" if hom else "permutations"
        table[name] = {"plain_hidden": plain, "gated_gate": gate,
                       "gated_up_down": "nonzero scalings x permutations (shared with Gate)"}
    shown = "; ".join(f"{n}: {v['plain_hidden']}" for n, v in table.items())
    out.check(f"Per activation (oddness and homogeneity decided as in claim `commutants`), plain MLP units: "
              f"{shown}. In a gated MLP an odd Gate's sign is a sign of the Up row, already counted.",
              True if decided else None)
    D2 = sp.diag(*LAMBDAS[:2])
    h = sp.Matrix(sp.symbols("h1:3", real=True))
    W = sp.Matrix(2, 2, sp.symbols("w1:5", real=True))
    with sp.assuming(*askable(assumed)):
        moved = pull_positive((D2 * W * D2.inv() * D2 * h).applyfunc(PosHom))
    conj = D2 * h + moved - D2 * (h + (W * h).applyfunc(PosHom))
    out.check(
        "**The simulators' residual MLP** $h\\to h + \\sigma(Wh)$ (no output matrix): the residual group is "
        "the commutant of $\\sigma$ acting by conjugation, $E\\to GE$, $W\\to GWG^{-1}$, $H\\to HG^{-1}$, "
        "since $Gh + \\sigma(GWG^{-1}Gh) = G(h + \\sigma(Wh))$ iff $\\sigma(Gu) = G\\sigma(u)$: $O(d)$ for linear "
        "and radial $\\sigma$ (claim `gauge`), positive diagonal $\\times$ permutations for ReLU (checked here "
        "for $2\\times2$, $G = \\operatorname{diag}(\\lambda_1,\\lambda_2)$), signed permutations for tanh, "
        "permutations otherwise.",
        is_zero(conj),
    )
    out.facts.update({"table": table, "witness": boxes,
                      # activation-free maps by the twins' names; the others are read from the table
                      "exact": ["up_down_scaling", "permutation"], "broken": []})
    return out


CLAIM = Claim(
    name="mlp",
    title="MLP hidden units: permutations everywhere; Up/Down scalings; ReLU's positive scalings; tanh's signs",
    statement=(
        "For a gated MLP $D(\\sigma(Gx)\\odot Ux)$ the exact reparametrisations of the hidden units are the "
        "permutations (Gate, Up rows and Down columns together) and any nonzero scaling of Up rows undone on "
        "Down columns; Gate rows scale only if $\\sigma$ is positively homogeneous (ReLU), never for SiLU or "
        "GELU. A plain MLP $D\\sigma(Gx+c)$ keeps the permutations, plus positive scalings of a unit (its bias "
        "with it) for ReLU and sign flips for tanh. The simulators' $h + \\sigma(Wh)$ has the commutant of "
        "$\\sigma$ as its residual group."
    ),
    premises=PREMISES,
    method="generic sympy Function on 3 hidden units; homogeneity rule under ask; solveset of SiLU's scale "
           "equation; certified witnesses",
    numeric="mlp",
    derive=derive,
)
