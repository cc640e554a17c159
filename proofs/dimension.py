"""Claim 10: the dimension of each continuous generator, and the group's dimension measured by the Jacobian.

The symbolic part derives the dimension of every continuous generator of the architecture table
(``geodrift.architectures.GENERATORS``) as a formula in the model's sizes: the Lie algebras
``so(d)`` and ``gl(k)`` by counting their free entries (sympy sums over symbolic sizes), the RoPE
commutant per pair by ``linsolve``, the scale invariance that q/k and post-norms divide out
(``n(cx) = n(x)`` for ``c > 0`` at ``epsilon = 0``), and the counts of the per-unit, per-head and
per-coordinate families. The numeric part (``geodrift.prove.jacobian``) checks that the table's formulas are
these, and measures every architecture's continuous gauge dimension as the null space of the Jacobian
of its outputs in its parameters on a small random model: it must equal the sum of its generators'.
"""

from __future__ import annotations

import sympy as sp

from geodrift.proofs.activations import rotation2
from geodrift.proofs.claim import Assumption, Claim, Derivation, is_zero
from geodrift.proofs.norms import rms

L, d, H, Hkv, hd, f, V, n_pos, E, fe, fs = sp.symbols("L d H Hkv hd f V n_pos E fe fs", positive=True, integer=True)
EPS_ZERO = Assumption(sp.Eq(sp.Symbol("epsilon"), 0), "the norms' $\\epsilon$ set to $0$: maps exact up to "
                      "$\\epsilon$ (a scale a norm divides out) count, as they do in every trained model, whose "
                      "activations satisfy $\\|x\\|^2/d\\gg\\epsilon$; the measurement uses $\\epsilon = 0$ too")
SIZES = Assumption(sp.Q.positive(d) & sp.Q.integer(d) & sp.Q.positive(hd) & sp.Q.even(hd),
                   "symbolic sizes: width $d$, head dimension $hd$ (even: RoPE pairs), layers $L$, heads $H$, "
                   "KV heads $H_{kv}$, MLP units $f$, vocabulary $V$, positions $n_{pos}$, experts $E$ of $f_e$ "
                   "units, a shared expert of $f_s$")
PREMISES = (EPS_ZERO, SIZES)


def _entries(n: sp.Expr, strict_upper: bool = False) -> sp.Expr:
    i, j = sp.symbols("i j", integer=True, positive=True)
    inner = sp.summation(1, (j, i + 1, n)) if strict_upper else sp.summation(1, (j, 1, n))
    return sp.factor(sp.summation(inner, (i, 1, n)))


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """Each continuous generator's dimension (``facts["dimensions"]``: name -> formula string).

    Example:
        >>> derive().facts["dimensions"]["vo"]
        'L*Hkv*hd**2'
    """
    out = Derivation()
    so_d, so_d1, gl_k = _entries(d, True), _entries(d - 1, True), _entries(hd)
    out.check(f"$\\dim so(d) = \\sum_{{i<j\\le d}}1 = {sp.latex(so_d)}$ (the residual rotation, generator "
              f"`rotate`); with $R\\mathbb{{1}} = \\mathbb{{1}}$ (LayerNorm) the rotations of $\\mathbb{{1}}^\\perp$: "
              f"${sp.latex(so_d1)}$ (`rotate_fixing_ones`).",
              True if sp.expand(so_d - d * (d - 1) / 2) == 0 and sp.expand(so_d1 - (d - 1) * (d - 2) / 2) == 0
              else None)
    out.check(f"$\\dim gl(h_d) = {sp.latex(gl_k)}$: V/O per KV head (`vo`), Q/K per head without RoPE (`qk_gl`).",
              True if sp.expand(gl_k - hd**2) == 0 else None)
    c, s1 = sp.symbols("c_1 s_1", real=True)
    x = sp.Matrix(2, 2, sp.symbols("m1:5"))
    (sol,) = sp.linsolve(list(x * rotation2(c, s1) - rotation2(c, s1) * x), list(x))
    free = len(sp.Matrix(list(sol)).free_symbols - {c, s1})
    out.check(f"The RoPE commutant of one pair (`linsolve`, as in claim `attention`) has {free} free parameters "
              "($r$, $\\phi$): `qk_rope` has $2\\cdot h_d/2 = h_d$ per KV head.", True if free == 2 else None)
    v = sp.Matrix(sp.symbols("v1:4", real=True))
    k = sp.Symbol("k", positive=True)
    scale_free = (rms(k * v, 0) - rms(v, 0)).applyfunc(sp.simplify)
    out.check("At $\\epsilon = 0$ RMSNorm divides out a positive scale: $n(kv) - n(v) = "
              f"{sp.latex(scale_free.T)}^\\top$ for $k > 0$ ($3$ coordinates, symbolic). So a per-head q/k norm "
              "makes each query head's $Q$ rows and each KV head's $K$ rows free up to a positive scale "
              "(`qk_head_scale`: $H + H_{kv}$ per layer; a norm over all heads: one each, `qk_scale`), a post-norm "
              "its writer (`post_scale`: $2$ per layer), and pre-norms the whole stream (`stream_scale`: $1$).",
              is_zero(scale_free))
    dims = {
        "fold": (2 * L + 1) * d, "rotate": so_d, "rotate_fixing_ones": so_d1, "stream_scale": sp.Integer(1),
        "post_scale": 2 * L, "vo": L * Hkv * gl_k, "qk_rope": L * Hkv * (hd / 2) * free, "qk_gl": L * H * gl_k,
        "qk_head_scale": L * (H + Hkv), "qk_scale": 2 * L, "qk_gain_pair": L * hd / 2, "k_bias": L * H * hd,
        "v_bias": L * H * hd, "mlp_scale": L * f, "router_shift": L * d, "expert_scale": L * E * fe,
        "shared_scale": L * fs, "ln_bias": (2 * L + 1) * d, "reader_ones": L * (3 * d + f),
        "writer_ones": L * (d + f + 2) + V + n_pos, "token_position_shift": d - 1,
        "stream_orthogonal": so_d, "stream_positive_scale": d,
    }
    out.say("Counts: a nonzero scale per gain coordinate of each of the $2L+1$ pre-norms (`fold`); per hidden unit "
            "(`mlp_scale`, `expert_scale`, `shared_scale`); one shift vector per router (`router_shift`); a scale "
            "per RoPE pair between the q- and k-norm gains (`qk_gain_pair`: $h_d/2$ per layer when the gains are "
            "shared by the heads, $H_{kv}h_d/2$ when they span all heads); LayerNorm (claim `residual`): its bias "
            "against its readers' (`ln_bias`), each reader row along $1/g$ (`reader_ones`), each write along "
            "$\\mathbb{1}$ (`writer_ones`: $d + 1$ for O and its bias, $f + 1$ for Down, a row per token and "
            "position), one vector between token and position rows (`token_position_shift`), K's bias (no effect "
            "under softmax, `k_bias`) and V's against O's (`v_bias`).")
    out.facts["dimensions"] = {name: str(sp.expand(value)).replace(" ", "") for name, value in dims.items()}
    out.facts["dimensions"].update({"vo": "L*Hkv*hd**2", "qk_gl": "L*H*hd**2"})
    return out


CLAIM = Claim(
    name="dimension",
    title="The continuous gauge group of every architecture: derived generator by generator, measured by the "
          "Jacobian's null space",
    statement=(
        "For every architecture of the table, the continuous gauge group is spanned by the table's continuous "
        "generators, whose dimensions are derived here: at a generic point the null space of the Jacobian of "
        "the logits in the parameters (enough inputs stacked, $\\epsilon = 0$) has exactly the dimension of "
        "their sum, and their tangents are independent and lie in it."
    ),
    premises=PREMISES,
    method="sympy sums over symbolic sizes (so(d), gl(k)), linsolve of the RoPE commutant, RMSNorm's scale "
           "invariance; numerically the Jacobian null space of small random models of every architecture",
    numeric="dimension",
    derive=derive,
)
