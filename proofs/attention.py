"""Claim 7: the gauge groups of attention heads: V/O per KV head, Q/K per KV head (RoPE's commutant), q/k norms.

Attention mixes tokens with weights that depend on Q and K only and applies V linearly, so an invertible
``B`` on V's rows undone on O's columns is exact (``O V`` is the invariant); the scores see Q and K only
through ``q^T Rot(theta) k``, so a map on Q undone by its inverse transpose on K is exact iff it
commutes with every rotary rotation: one 2x2 rotation-scaling per frequency pair (all of GL(d_head)
without RoPE). Per-coordinate q/k norm gains leave a sign per pair on the weights and a scale per pair
on the gains.
"""

from __future__ import annotations

import sympy as sp

from geodrift.proofs.activations import WITNESS_R, WITNESS_X, rotation2
from geodrift.proofs.claim import Assumption, Claim, Derivation, conjunction, is_zero, tex
from geodrift.proofs.interval import certify_nonzero
from geodrift.proofs.norms import EPS_WITNESS, rms

k = sp.Symbol("k")  # head dimension
B = sp.MatrixSymbol("B", k, k)
A = sp.MatrixSymbol("A", k, k)
HEAD = Assumption(sp.Q.integer(k) & sp.Q.positive(k), "symbolic head size $k$ for V/O and Q/K without RoPE; "
                  "the RoPE steps are per frequency pair ($2\\times2$ blocks)")
INVERTIBLE = Assumption(sp.Q.invertible(B) & sp.Q.invertible(A), "the maps are invertible; sympy's `Inverse` "
                        "presumes it, so `doit` cancels $B^{-1}B$ and $A^\\top A^{-\\top}$")
SINE = sp.Symbol("s_1")
ROPE = Assumption(sp.Ne(SINE, 0), "RoPE's first relative position turns pair $i$ by $\\omega_i\\in(0,1]$, so "
                  "$\\sin\\omega_i\\ne0$ and the frequencies are distinct; `linsolve` assumes it (generic solution)")
PREMISES = (HEAD, INVERTIBLE, ROPE)


def _certify(out: Derivation, label: str, value: sp.Expr) -> list[float]:
    ok, box = certify_nonzero(sp.nsimplify(value) if value.is_Rational else value)
    out.check(f"{label} $\\in [{box[0]:.6f}, {box[1]:.6f}]$, excluding $0$: not a symmetry." if box
              else f"{label}: no enclosure.", ok)
    return list(box) if box else [float("nan")] * 2


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """V/O and Q/K for symbolic head size; RoPE's commutant per pair; q/k norms with certified witnesses.

    Args:
        assumed: the premises to derive under (default: the claim's, ``conjunction(PREMISES)``).

    Returns:
        The derivation; ``facts["exact"]`` / ``facts["broken"]`` name the maps the numeric twins test.

    Example:
        >>> derive().verdict
        'verified'
    """
    assumed = conjunction(PREMISES) if assumed is None else assumed
    out = Derivation()
    d_model = 6
    V = sp.MatrixSymbol("V", k, d_model)
    O1, O2 = sp.MatrixSymbol("O_1", d_model, k), sp.MatrixSymbol("O_2", d_model, k)
    xs = [sp.MatrixSymbol(f"x_{i}", d_model, 1) for i in (1, 2)]
    a = sp.symbols("a_11 a_12 a_21 a_22", real=True)  # attention weights of query heads 1, 2 on tokens 1, 2
    out.say(
        "One KV group: query heads $1,2$ share $V$ (and $K$). Head $h$ writes $O_h\\sum_s a_{hs}Vx_s$; the "
        "weights $a_{hs}$ (softmax of the scores, or any function of them) depend on $Q$ and $K$ only."
    )
    y = O1 * (a[0] * V * xs[0] + a[1] * V * xs[1]) + O2 * (a[2] * V * xs[0] + a[3] * V * xs[1])
    y_g = O1 * B.I * (a[0] * B * V * xs[0] + a[1] * B * V * xs[1]) + O2 * B.I * (a[2] * B * V * xs[0]
                                                                               + a[3] * B * V * xs[1])
    diff = sp.expand(y_g - y).doit()
    out.check(
        f"**V/O**, symbolic $k$: $V\\to BV$, $O_h\\to O_hB^{{-1}}$ for both heads of the group (premise "
        f"{tex(INVERTIBLE.predicate)}): $y'-y = {sp.latex(diff)}$. The group is $GL(k)$ per KV head, and "
        f"$O_hV$ is invariant: $O_hB^{{-1}}\\,BV = {sp.latex((O1 * B.I * B * V).doit())}$.",
        is_zero(diff),
    )
    Bw = sp.diag(2, 1)
    per_query = sp.eye(2) * sp.eye(2).inv() * Bw * sp.eye(2) - sp.eye(2) * sp.eye(2)  # O_2 B_2^-1 B V - O_2 V
    out.check(
        "Not per query head: $V$ is shared, so a map $B_2\\ne B$ on head 2's columns leaves "
        "$O_2B_2^{-1}BV \\ne O_2V$; with $O_2 = V = I_2$, $B = \\operatorname{diag}(2,1)$, $B_2 = I$ the "
        f"change is ${sp.latex(per_query[:, :])}\\ne0$ (and a nonlinearity on $V$ breaks $GL(k)$: claim `gauge`).",
        True if any(e != 0 for e in per_query) else None,
    )
    head = sp.Function("z")  # head (query q, KV j)'s written output O_q attn(Q_q, K_j) V_j x
    layout = {0: (0, 1), 1: (2, 3)}  # KV head -> its query heads
    total = sum(head(q, j) for j, qs in layout.items() for q in qs)
    perms_ok = True
    for kv_perm in ((0, 1), (1, 0)):
        for inner in ((0, 1), (1, 0)):
            moved = sum(head(layout[kv_perm[i]][inner[n]], kv_perm[i]) for i in range(2) for n in range(2))
            perms_ok = perms_ok and is_zero(moved - total) is True
    out.check(
        "**Heads permute**: the layer writes $\\sum_{j}\\sum_{q\\in j} O_q\\operatorname{attn}(Q_q, K_j)V_jx$; "
        "relabelling the KV heads (each with its query group) and the query heads within a group reorders "
        "the sum (2 KV heads x 2 query heads, all 4 relabellings checked).",
        True if perms_ok else None,
    )
    b_v = sp.Matrix([1, 0])
    xv = sp.Matrix(sp.symbols("v1 v2", real=True))  # V x
    with_bias = Bw.inv() * (Bw * xv + Bw * b_v) - (xv + b_v)
    without = Bw.inv() * (Bw * xv + b_v) - (xv + b_v)
    out.check(
        "**Biases move with their rows** (Qwen2's q/k/v, GPT-2's): $b_v\\to Bb_v$, $b_q\\to Mb_q$, "
        f"$b_k\\to M^{{-\\top}}b_k$. With $B = \\operatorname{{diag}}(2,1)$, $b_v = e_1$, $O = I$: moving the "
        f"bias gives ${sp.latex(with_bias.T)}$, leaving it gives ${sp.latex(without.T)}\\ne0$.",
        True if is_zero(with_bias) and any(e != 0 for e in without) else None,
    )
    Q, K = sp.MatrixSymbol("Q", k, d_model), sp.MatrixSymbol("K", k, d_model)
    x, z = xs
    score = (A * Q * x).T * (A.I.T * K * z) - (Q * x).T * (K * z)
    sdiff = sp.expand(score).doit()
    out.check(
        f"**Q/K without RoPE**, symbolic $k$: $Q\\to AQ$, $K\\to A^{{-\\top}}K$ gives $q'^\\top k' - q^\\top k = "
        f"{sp.latex(sdiff)}$: the group is all of $GL(k)$ acting as $A$ on $Q$ and $A^{{-\\top}}$ on $K$ "
        "(a scalar $c$ on $Q$ and $1/c$ on $K$ is the special case $A = cI$); $Q^\\top K$ is the invariant.",
        is_zero(sdiff),
    )
    same = (Bw.T * Bw - sp.eye(2))
    out.check(
        "The inverse transpose is needed: $A$ on both $Q$ and $K$ changes $q^\\top k$ to $q^\\top A^\\top Ak$; "
        f"for $A = \\operatorname{{diag}}(2,1)$, $A^\\top A - I = {sp.latex(same)}\\ne0$ (exact only for orthogonal $A$).",
        True if any(e != 0 for e in same) else None,
    )
    c1, c2, s2 = sp.symbols("c_1 c_2 s_2", real=True)
    s1 = SINE
    R1, R2 = rotation2(c1, s1), rotation2(c2, s2)
    X = sp.Matrix(2, 2, sp.symbols("m1:5"))
    (sol,) = sp.linsolve(list(X * R1 - R1 * X), list(X))
    M_sol = sp.Matrix(2, 2, list(sol))
    is_rot_scale = M_sol[0, 0] == M_sol[1, 1] and sp.expand(M_sol[0, 1] + M_sol[1, 0]) == 0
    out.say(
        "**Q/K with RoPE.** Pair $i$ of $q_t$ is turned by $\\operatorname{Rot}(t\\omega_i)$, so the score "
        "is $\\sum_i q_{t,i}^\\top\\operatorname{Rot}((s-t)\\omega_i)k_{s,i}$ (in Hugging Face's half-split "
        "layout pair $i$ is coordinates $(i, i+k/2)$). A map $Q\\to MQ$, $K\\to NK$ keeps every score iff "
        "$M^\\top\\operatorname{Rot}N = \\operatorname{Rot}$ for all relative positions; position $0$ gives "
        "$N = M^{-\\top}$, the others that $M^\\top$ commutes with every $\\operatorname{Rot}$."
    )
    out.check(
        f"Within a pair: $XR - RX = 0$ for $R = {sp.latex(R1)}$ (premise {tex(ROPE.predicate)}) is solved by "
        f"`linsolve` as $X = {sp.latex(M_sol)}$: a rotation-scaling $rR(\\phi)$.",
        True if is_rot_scale and len(M_sol.free_symbols) == 2 else None,
    )
    Y = sp.Matrix(2, 2, sp.symbols("y1:5"))
    system = sp.Matrix(list(Y * R2 - R1 * Y)).jacobian(list(Y))
    det = sp.factor(system.det())
    out.check(
        "Across pairs $i\\ne j$: the off-diagonal block solves $YR_j = R_iY$, a linear system of "
        f"determinant ${sp.latex(det)}$, nonzero unless $(c_1, s_1) = (c_2, \\pm s_2)$, i.e. unless the "
        "frequencies coincide; RoPE's $\\omega_i = \\theta^{-2i/k}$ are distinct, so $Y = 0$: the commutant "
        "is block-diagonal, one $r_iR(\\phi_i)$ per pair.",
        True if sp.expand(det - ((c1 - c2) ** 2 + (s1 - s2) ** 2) * ((c1 - c2) ** 2 + (s1 + s2) ** 2)) == 0 else None,
    )
    r, phi, th = sp.Symbol("r", positive=True), sp.Symbol("phi", real=True), sp.Symbol("theta", real=True)
    Mrot = r * rotation2(sp.cos(phi), sp.sin(phi))
    Rth = rotation2(sp.cos(th), sp.sin(th))
    keep = (Mrot.T * Rth * Mrot.inv().T - Rth).applyfunc(lambda e: sp.trigsimp(sp.simplify(e)))
    out.check(
        "And it is exact: $(rR(\\phi))^\\top\\operatorname{Rot}(\\theta)\\,(rR(\\phi))^{-\\top} - "
        "\\operatorname{Rot}(\\theta) = 0$ for all $r>0$, $\\phi$, $\\theta$: $Q$'s pair $\\to rR(\\phi)$, $K$'s pair "
        "$\\to r^{-1}R(\\phi)$ (shared by the query heads of a KV group). The group per KV head is "
        "$(\\mathbb{R}_{>0}\\times SO(2))^{k/2}$; its invariants are the per-pair forms "
        "$Q_i^\\top\\operatorname{Rot}(\\theta)K_i$ for every $\\theta$.",
        is_zero(keep, trig=True),
    )
    g1, g2 = sp.symbols("g_1 g_2", real=True)
    cphi, sphi = sp.symbols("c s", real=True)
    commute = sp.factor(sp.expand((sp.diag(g1, g2) * rotation2(cphi, sphi) - rotation2(cphi, sphi)
                                   * sp.diag(g1, g2))[0, 1]))
    cpos = sp.Symbol("c", positive=True)
    vq = sp.Matrix(sp.symbols("q1:3", real=True))
    divided = (rms(cpos * vq, 0) - rms(vq, 0)).applyfunc(sp.simplify)
    out.check(
        "**q/k norms** (Gemma 3, Qwen3, OLMo 2: $q = g_q\\odot n(Qx)$ before RoPE, $n$ RMSNorm over the head, or over "
        "all heads in OLMo 2). The norm *divides out* a positive scale: at $\\epsilon = 0$, $n(cq) - n(q) = "
        f"{sp.latex(divided.T)}^\\top$ for $c > 0$ (symbolic), so a positive scale of each query head's $Q$ rows, and "
        "of each KV head's $K$ rows, is exact on its own, with nothing undone on the other side (up to the norm's "
        "$\\epsilon$: a relative change $\\epsilon/\\|q\\|^2$). The earlier form of this claim missed it by "
        "asking only which maps on $Q$ are undone on $K$.",
        is_zero(divided),
    )
    out.check(
        "Beyond that scale, a map $M$ on $Q$ must pass the norm, $n(Mq) = M'n(q)$, so $M = cO$ with $O$ orthogonal "
        "(the scale is divided out), and $O$ must commute with $\\operatorname{diag}(g)$ and with RoPE: "
        "$\\operatorname{diag}(g)R(\\phi) = R(\\phi)\\operatorname{diag}(g)$ needs the off-diagonal "
        f"${sp.latex(commute)} = 0$: $g_1 = g_2$ or $s = \\sin\\phi = 0$. So for generic gains one sign $\\pm1$ "
        "per frequency pair (on $Q$ and $K$ together) survives on the weights beside the per-head scales.",
        True if sp.expand(commute - sphi * (g2 - g1)) == 0 or sp.expand(commute + sphi * (g2 - g1)) == 0 else None,
    )
    ga, gb = sp.Matrix(sp.symbols("a1 a2", real=True)), sp.Matrix(sp.symbols("b1 b2", real=True))
    nu, nv = sp.Matrix(sp.symbols("u1 u2", real=True)), sp.Matrix(sp.symbols("v1 v2", real=True))
    rr = sp.Symbol("rho", nonzero=True, real=True)
    gain_scale = ((sp.diag(*(rr * ga)) * nu).T * Rth * (sp.diag(*(gb / rr)) * nv)
                  - (sp.diag(*ga) * nu).T * Rth * (sp.diag(*gb) * nv))
    sign_flip = ((-sp.diag(*ga) * nu).T * Rth * (-sp.diag(*gb) * nv) - (sp.diag(*ga) * nu).T * Rth * (sp.diag(*gb) * nv))
    out.check(
        "What survives is exact: the gains' scale per pair ($g_q\\to\\rho g_q$, $g_k\\to g_k/\\rho$ on a pair) and "
        "the sign per pair leave $(g_q\\odot u)^\\top\\operatorname{Rot}(\\theta)(g_k\\odot v)$ unchanged.",
        True if is_zero(gain_scale) and is_zero(sign_flip) else None,
    )
    uq = rms(WITNESS_X, EPS_WITNESS)
    gq, gk = sp.diag(1, 2), sp.diag(3, 1)
    rope = rotation2(sp.Rational(5, 13), sp.Rational(12, 13))
    wq = (gq * WITNESS_R * uq).T * rope * (gk * WITNESS_R * uq) - (gq * uq).T * rope * (gk * uq)
    qk_box = _certify(out, "Witness: gains $(1,2)$ / $(3,1)$, $R^*$ on the pair of $Q$ and $K$, $x^*$ for both, "
                      "$\\operatorname{Rot} = R(5/13, 12/13)$: the score changes by", wq[0])
    out.facts.update({
        # the maps the numeric twins measure (geodrift.prove.gauge_twins), by the twins' names
        "exact": ["vo_per_kv_head", "vo_per_head", "head_permutation", "qk_rope_commutant", "qk_general_without_rope",
                  "qk_norm_gain_scale", "qk_norm_pair_sign", "qk_norm_pair_rotation_uniform_gains"],
        "broken": ["vo_one_query_head", "vo_weights_not_bias", "qk_ignoring_rope", "qk_same_map_on_both",
                   "qk_norm_pair_rotation"],
        "witness": {"qk_norm": qk_box},
    })
    return out


CLAIM = Claim(
    name="attention",
    title="Attention heads: GL(d_head) on V/O and RoPE's commutant on Q/K per KV head, head permutations; "
          "per-head scales and pair signs under q/k norms",
    statement=(
        "Per KV head (shared by its query heads): $V\\mapsto BV$, $O_h\\mapsto O_hB^{-1}$ is exact for every "
        "$B\\in GL(d_{\\text{head}})$, with $O_hV$ invariant, and the heads may be permuted (KV heads with their "
        "query groups); $Q\\mapsto MQ$, $K\\mapsto M^{-\\top}K$ is exact "
        "iff $M$ commutes with RoPE's rotations: $M = \\bigoplus_i r_iR(\\phi_i)$, one rotation-scaling per "
        "frequency pair (every $M\\in GL(d_{\\text{head}})$ without RoPE). A q/k norm divides out a positive "
        "scale of each query head's $Q$ rows and each KV head's $K$ rows (exact up to its $\\epsilon$); beyond it, "
        "with per-coordinate q/k norm gains (generic) only a sign per pair survives on the weights, and a scale "
        "$\\rho_i$ per pair moves between the $q$ and $k$ gains."
    ),
    premises=PREMISES,
    method="matrix expressions with Inverse (symbolic d_head); linsolve of the RoPE commutant; determinant "
           "across pairs; certified witness",
    numeric="attention",
    derive=derive,
)
