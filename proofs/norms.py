"""Claim 6: the residual stream's gauge group through the norms (RMSNorm, sandwich norms, LayerNorm).

Pre-norm blocks read the stream through a norm and write to it linearly. An RMSNorm without gain is
radial, so a residual rotation passes through it (claim 1); its gain folds into the projections that
read it; a gain that cannot fold (a sandwich norm's, on what a block writes) leaves only the signed
permutations. LayerNorm subtracts the mean first: only the orthogonal maps with ``R 1 = +-1`` pass,
and every write may add a multiple of ``1`` (the mean is projected out of every read).
"""

from __future__ import annotations

import sympy as sp

from geodrift.proofs.activations import WITNESS_R, WITNESS_X, rotation2
from geodrift.proofs.claim import Assumption, Claim, Derivation, conjunction, is_zero, refine_under
from geodrift.proofs.interval import certify_nonzero

d = sp.Symbol("d")
R = sp.MatrixSymbol("R", d, d)
EPS = sp.Symbol("epsilon")
DIM = Assumption(sp.Q.integer(d) & sp.Q.positive(d), "symbolic $d$ for the RMSNorm steps; the gain and "
                 "LayerNorm steps are $d=2$ and $d=3$ instances")
ORTHOGONAL = Assumption(sp.Q.orthogonal(R), "one $R$ for the whole stream; `refine` turns $R^\\top R$ into $I$")
POSITIVE_EPS = Assumption(sp.Q.positive(EPS), "the norms' $\\epsilon>0$ (it keeps them defined at $0$ and is "
                          "what breaks their scale invariance); the witnesses use $\\epsilon=10^{-5}$, the symbolic "
                          "steps hold for every $\\epsilon$, so sympy never needs this predicate")
PREMISES = (DIM, ORTHOGONAL, POSITIVE_EPS)
# The witnesses' epsilon: Llama's rms_norm_eps 1e-5, exact.
EPS_WITNESS = sp.Rational(1, 100000)


def rms(v: sp.Matrix, eps: sp.Expr = EPS) -> sp.Matrix:
    """RMSNorm without gain of an explicit column vector: ``v / sqrt(mean(v^2) + eps)``."""
    return v / sp.sqrt((v.T * v)[0] / v.rows + eps)


def layer_norm(v: sp.Matrix, eps: sp.Expr = EPS) -> sp.Matrix:
    """LayerNorm without gain or bias: ``C v / sqrt(mean((C v)^2) + eps)``, ``C = I - 1 1^T / n``."""
    n = v.rows
    centred = (sp.eye(n) - sp.ones(n, n) / n) * v
    return centred / sp.sqrt((centred.T * centred)[0] / n + eps)


def rotation_about_ones() -> tuple[sp.Matrix, sp.Symbol]:
    """The rotation of R^3 by ``theta`` about the axis ``(1, 1, 1)/sqrt 3`` (Rodrigues), and ``theta``."""
    th = sp.Symbol("theta", real=True)
    k = sp.ones(3, 1) / sp.sqrt(3)
    cross = sp.Matrix([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return sp.cos(th) * sp.eye(3) + sp.sin(th) * cross + (1 - sp.cos(th)) * k * k.T, th


def _certified(out: Derivation, label: str, vec: sp.Matrix) -> list[list[float]]:
    boxes = [certify_nonzero(sp.nsimplify(e) if e.is_Rational else e) for e in vec]
    shown = ", ".join(f"[{b[0]:.6f}, {b[1]:.6f}]" for _, b in boxes if b)
    out.check(f"{label}: entries in ({shown}); an enclosure excludes $0$, so the map is not a symmetry.",
              True if any(ok for ok, _ in boxes) else None)
    return [list(b) if b else [float("nan")] * 2 for _, b in boxes]


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """RMSNorm (symbolic d), gains (d = 2), LayerNorm (d = 3), with certified witnesses for what breaks.

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
    h = sp.MatrixSymbol("h", d, 1)
    W = sp.MatrixSymbol("W", 4, d)
    f = sp.Function("f")

    def radial(v: sp.MatrixExpr) -> sp.MatrixExpr:
        return f(sp.Trace(v.T * v).doit()) * v

    out.say(
        "A pre-norm block reads the stream through a norm, $u = W\\,\\operatorname{diag}(g)\\,n(h)$, and "
        "writes to it linearly, $h \\mapsto h + W_{\\text{out}}\\,\\phi(u)$, where $\\phi$ (attention or MLP) "
        "never sees the stream otherwise. RMSNorm without gain is $n(x) = x/\\sqrt{x^\\top x/d + \\epsilon} = "
        "f(x^\\top x)\\,x$ with $f(s) = (s/d+\\epsilon)^{-1/2}$: radial."
    )
    reader = refine_under(W * R.T * radial(R * h) - W * radial(h), assumed)
    out.check(
        "**Folded gains, symbolic $d$.** The gain folds into the readers, $W\\operatorname{diag}(g) \\to W$; "
        "then with $h' = Rh$, $W' = WR^\\top$: `refine` gives $W'n(h') - Wn(h) = "
        f"{sp.latex(reader)}$, so every reader sees the same input and (writers $W_{{\\text{{out}}}}\\to "
        "RW_{\\text{out}}$) $h'_{l+1} = R h_{l+1}$; with $E\\to RE$ and the (folded) head $H \\to HR^\\top$, "
        "induction over layers leaves the logits unchanged. The residual group is $O(d)$.",
        is_zero(reader),
    )
    g1, g2, x1, x2 = sp.symbols("g_1 g_2 x_1 x_2", real=True)
    gains = sp.diag(g1, g2)
    Wg = sp.Matrix(2, 2, sp.symbols("w1:5", real=True))
    xv = sp.Matrix([x1, x2])
    out.check(
        "Folding is exact: $W(g\\odot n(x)) - (W\\operatorname{diag}(g))\\,n(x) = 0$ ($2\\times2$ symbolic).",
        is_zero(Wg * gains * rms(xv) - (Wg * gains) * rms(xv)),
    )
    c, s = sp.symbols("c s", real=True)
    Rcs = rotation2(c, s)
    off = sp.factor(sp.expand((Rcs * gains * Rcs.T)[0, 1]))
    out.check(
        "**A gain that stays** (a sandwich norm's $g\\odot n(W_{\\text{out}}\\phi)$ on what a block writes, "
        "or any unfolded gain): $h'=Rh$ needs $\\operatorname{diag}(g')R = R\\operatorname{diag}(g)$, i.e. "
        f"$R\\operatorname{{diag}}(g)R^\\top$ diagonal. For $R = {sp.latex(Rcs)}$ its off-diagonal entry is "
        f"${sp.latex(off)}$: zero only if $g_1 = g_2$ or $cs = 0$ (a signed permutation).",
        True if sp.simplify(off - (g1 - g2) * c * s) == 0 or sp.simplify(off + (g1 - g2) * c * s) == 0 else None,
    )
    swap = sp.Matrix([[0, 1], [1, 0]])
    signs = sp.diag(-1, 1)
    perm_ok = is_zero(sp.diag(*(swap * sp.Matrix([g1, g2]))) * rms(swap * xv) - swap * gains * rms(xv))
    sign_ok = is_zero(gains * rms(signs * xv) - signs * gains * rms(xv))
    out.check(
        "Signed permutations survive with the gains permuted: $\\operatorname{diag}(Pg)\\,n(Px) = "
        "P\\operatorname{diag}(g)\\,n(x)$ for the swap, and $\\operatorname{diag}(g)\\,n(Sx) = "
        "S\\operatorname{diag}(g)\\,n(x)$ for $S = \\operatorname{diag}(-1, 1)$.",
        True if perm_ok and sign_ok else None,
    )
    kpos = sp.Symbol("k", positive=True)
    zv = sp.Matrix(sp.symbols("z_1 z_2", real=True))
    post_sign = is_zero(sp.diag(-g1, g2) * rms(signs * zv, 0) - gains * rms(zv, 0))
    post_scale = is_zero((gains * rms(kpos * zv, 0) - gains * rms(zv, 0)).applyfunc(sp.simplify))
    out.check(
        "**A sandwich norm's own gauges** (on what one block writes, $g\\odot n(z)$, $z = W_{\\text{out}}\\phi$): a "
        "gain coordinate and the matching row of $W_{\\text{out}}$ may change sign together, "
        "$\\operatorname{diag}(Sg)\\,n(Sz) = \\operatorname{diag}(g)\\,n(z)$ for $S = \\operatorname{diag}(-1, 1)$; and "
        "at $\\epsilon = 0$ the writer's positive scale is divided out, $n(kz) = n(z)$ for $k > 0$ (up to $\\epsilon$ "
        "otherwise). Both act on one block alone (claim `dimension` counts the scale).",
        True if post_sign and post_scale else None,
    )
    g_w = sp.diag(1, 2)
    gain_break = _certified(
        out, "Witness: $g = (1, 2)$, $R^*$, $x^*$, $\\epsilon = 10^{-5}$: $\\operatorname{diag}(g)\\,n(R^*x^*) - "
        "R^*\\operatorname{diag}(g)\\,n(x^*)$", g_w * rms(WITNESS_R * WITNESS_X, EPS_WITNESS)
        - WITNESS_R * g_w * rms(WITNESS_X, EPS_WITNESS))
    # LayerNorm, d = 3.
    R3, th = rotation_about_ones()
    ones = sp.ones(3, 1)
    x3 = sp.Matrix(sp.symbols("x1:4", real=True))
    out.check(
        "**LayerNorm** $\\ell(x) = Cx/\\sqrt{x^\\top Cx/d+\\epsilon}$, $C = I - \\mathbb{1}\\mathbb{1}^\\top/d$. "
        "$d=3$, $R_\\theta$ the rotation by $\\theta$ about $\\mathbb{1}/\\sqrt3$ (Rodrigues): "
        "$R_\\theta^\\top R_\\theta = I$ and $R_\\theta\\mathbb{1} = \\mathbb{1}$ by simplification.",
        True if is_zero(sp.simplify(R3.T * R3 - sp.eye(3))) and is_zero(sp.simplify(R3 * ones - ones)) else None,
    )
    ln_diff = (layer_norm(R3 * x3) - R3 * layer_norm(x3)).applyfunc(lambda e: sp.trigsimp(sp.expand(e)))
    out.check("$\\ell(R_\\theta x) - R_\\theta\\,\\ell(x) = 0$ for all $\\theta$ and $x$.", is_zero(ln_diff, trig=True))
    refl = sp.Matrix([[0, 1, 0], [1, 0, 0], [0, 0, 1]])
    out.check(
        "The maps with $R\\mathbb{1} = -\\mathbb{1}$ pass too: $\\ell(-x) = -\\ell(x)$, and so does the "
        "reflection swapping two coordinates; so $\\{R\\in O(d): R\\mathbb{1} = \\pm\\mathbb{1}\\}\\cong "
        "O(d-1)\\times\\mathbb{Z}_2$ acts.",
        True if is_zero(layer_norm(-x3) + layer_norm(x3)) and is_zero(layer_norm(refl * x3) - refl * layer_norm(x3))
        else None,
    )
    a = sp.Symbol("a", real=True)
    out.check(
        "**Translations along $\\mathbb{1}$**: $\\ell(x + a\\mathbb{1}) = \\ell(x)$ since $C\\mathbb{1} = 0$, "
        "so every write may add a multiple of $\\mathbb{1}$ (output biases $b\\to b+a\\mathbb{1}$, output "
        "columns $W_{\\text{out}}\\to W_{\\text{out}} + \\mathbb{1}v^\\top$, embedding rows): exact, a "
        "non-compact gauge of LayerNorm networks. Biases of readers fold with the gain "
        "($W(g\\odot\\ell + b) + c = W\\operatorname{diag}(g)\\ell + (Wb + c)$); writers' biases rotate, $b\\to Rb$.",
        is_zero(layer_norm(x3 + a * ones) - layer_norm(x3)),
    )
    R12 = sp.diag(WITNESS_R, sp.Integer(1))
    image = (sp.eye(3) - sp.ones(3, 3) / 3) * R12 * ones
    out.say(
        "**Only if.** $\\ell(\\mathbb{1}) = 0$, so $R\\ell(\\mathbb{1}) = 0$, while $\\ell(R\\mathbb{1}) = 0$ "
        "iff $CR\\mathbb{1} = 0$ iff $R\\mathbb{1}\\in\\operatorname{span}\\mathbb{1}$, i.e. $R\\mathbb{1} = "
        "\\pm\\mathbb{1}$ for orthogonal $R$. Witness: $R^*$ in the $(1,2)$-plane of $\\mathbb{R}^3$, "
        f"$CR^*\\mathbb{{1}} = {sp.latex(image.T)}^\\top$."
    )
    ln_break = _certified(out, "$\\ell(R^*\\mathbb{1}) - R^*\\ell(\\mathbb{1})$ at $\\epsilon = 10^{-5}$",
                          layer_norm(R12 * ones, EPS_WITNESS) - R12 * layer_norm(ones, EPS_WITNESS))
    x_s = sp.Matrix([1, -1, 0])
    scale_break = _certified(out, "**Scale** is not a gauge ($\\epsilon>0$): $\\ell(2x) - \\ell(x)$ at "
                             "$x = (1,-1,0)$, $\\epsilon=10^{-5}$", layer_norm(2 * x_s, EPS_WITNESS)
                             - layer_norm(x_s, EPS_WITNESS))
    out.facts.update({
        # the maps the numeric twins measure (geodrift.prove.gauge_twins), by the twins' names
        "exact": ["rotation_folded", "signed_permutation", "rotation_uniform_post_gains",
                  "layernorm_rotation_fixing_ones", "layernorm_reflection_ones_to_minus", "layernorm_translation_ones"],
        "broken": ["rotation_keeping_gains", "rotation_through_sandwich", "layernorm_generic_rotation"],
        "witness": {"gain": gain_break, "layernorm": ln_break, "scale": scale_break},
    })
    return out


CLAIM = Claim(
    name="residual",
    title="The residual stream's group through the norms: O(d) folded, signed permutations with gains, "
          "LayerNorm's R1 = ±1 and translations",
    statement=(
        "In pre-norm residual networks with RMSNorm, once the norm gains are folded into the projections "
        "that read them, $E\\mapsto RE$, readers $W\\mapsto WR^\\top$, writers $W\\mapsto RW$, head "
        "$H\\mapsto HR^\\top$ leave the function unchanged for every $R\\in O(d)$. Where a gain cannot fold "
        "(Gemma's sandwich norms on what a block writes) only the signed permutations survive (gains "
        "permuted with them; for gains with distinct entries - equal entries leave rotations of their "
        "coordinates). With LayerNorm (GPT-2; gains and reader biases folded, writer biases "
        "$b\\mapsto Rb$) exactly the $R\\in O(d)$ with $R\\mathbb{1} = \\pm\\mathbb{1}$ act, together with "
        "the translations of every write along $\\mathbb{1}$; scaling the stream is not a gauge ($\\epsilon>0$)."
    ),
    premises=PREMISES,
    method="refine under Q.orthogonal(R) (symbolic d); commutant of diag(g); Rodrigues rotation about 1; "
           "certified witnesses",
    numeric="residual",
    derive=derive,
)
