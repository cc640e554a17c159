"""Claim 9: mixture-of-experts layers: each expert's own group, the permutation of experts, router shifts.

``y = sum_e G_e(W_r x) F_e(x)`` with ``G`` a top-k softmax (Mixtral: softmax over the k largest router
logits). ``G`` commutes with permutations of the logits and ignores a common shift, so the experts may
be permuted with the router's rows, any vector may be added to every router row, and each expert keeps
its own MLP group (``G_e`` is a scalar weight on ``F_e``). Scaling the router is not a gauge.
"""

from __future__ import annotations

import itertools

import sympy as sp

from geodrift.proofs.claim import Assumption, Claim, Derivation, conjunction, is_zero
from geodrift.proofs.interval import certify_nonzero

N_EXPERTS, TOP_K = 3, 2
LOGITS = sp.symbols("z1:4", real=True)
DISTINCT = Assumption(sp.And(*(sp.Ne(a, b) for a, b in itertools.combinations(LOGITS, 2))),
                      "the router logits are distinct (ties, a null set, are broken by index in `torch.topk`); "
                      "the derivation splits on their order")
PREMISES = (DISTINCT,)


def top_k_gate(z: list[sp.Expr], order: tuple[int, ...], k: int = TOP_K) -> list[sp.Expr]:
    """Mixtral's gate for logits ``z`` whose decreasing order is ``order``: softmax over the top ``k``, else 0.

    Example:
        >>> top_k_gate([sp.Integer(0), sp.Integer(0), sp.Integer(5)], (2, 0, 1), 1)
        [0, 0, 1]
    """
    chosen = set(order[:k])
    total = sum(sp.exp(z[f]) for f in chosen)
    return [sp.exp(z[e]) / total if e in chosen else sp.Integer(0) for e in range(len(z))]


def derive(assumed: sp.Basic | None = None) -> Derivation:
    """Case split over the 3! orders of 3 logits, top-2; certified witness for router scaling.

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
    distinct = [c for c in sp.And.make_args(assumed) if isinstance(c, sp.Ne)]
    z = list(LOGITS)
    F = [sp.Symbol(f"F_{e + 1}") for e in range(N_EXPERTS)]  # the experts' outputs (any functions of x)
    out.say(
        f"{N_EXPERTS} experts, top-{TOP_K}: $y = \\sum_e G_e(z)F_e$, $z = W_rx$. Under the premise that the "
        f"logits are distinct ({len(distinct)} inequalities), exactly one order $z_{{o_1}}>z_{{o_2}}>z_{{o_3}}$ "
        "holds; each of the 6 orders is a case."
    )
    perm_ok = shift_ok = len(distinct) == 3
    c = sp.Symbol("c", real=True)
    for order in itertools.permutations(range(N_EXPERTS)):
        y = sum(g * f for g, f in zip(top_k_gate(z, order), F, strict=True))
        for p in itertools.permutations(range(N_EXPERTS)):
            # router rows permuted: z'_i = z_{p(i)}; expert i of the new layer is old expert p(i)
            z_new = [z[p[i]] for i in range(N_EXPERTS)]
            order_new = tuple(p.index(o) for o in order)
            y_new = sum(g * F[p[i]] for i, g in enumerate(top_k_gate(z_new, order_new)))
            perm_ok = perm_ok and is_zero(y_new - y) is True
        y_shift = sum(g * f for g, f in zip(top_k_gate([v + c for v in z], order), F, strict=True))
        shift_ok = shift_ok and is_zero(sp.simplify(y_shift - y)) is True
    out.check(
        "**Permutation of experts**: for every order and each of the 6 permutations $\\pi$, router rows "
        "$W_r\\to PW_r$ with the experts relabelled ($F'_i = F_{\\pi(i)}$) give $y'-y = 0$: top-$k$ picks the "
        "same experts and softmax is permutation-equivariant.",
        True if perm_ok else None,
    )
    out.check(
        "**Router shift**: $W_r\\to W_r + \\mathbb{1}v^\\top$ adds $c = v^\\top x$ to every logit; the order is "
        "unchanged and $e^{z_e+c}/\\sum_f e^{z_f+c} = e^{z_e}/\\sum_f e^{z_f}$, so $y'-y = 0$ in every case.",
        True if shift_ok else None,
    )
    out.check(
        "**Each expert's own group**: $G_e$ is a scalar weight on $F_e$, so any reparametrisation that leaves "
        "$F_e$ unchanged (claim `mlp`: permutations and Up/Down scalings of that expert's hidden units) leaves "
        "$y$ unchanged; shared experts likewise. Nothing more: an expert's SiLU Gate rows do not scale (claim `mlp`).",
        True,
    )
    zw = [sp.Integer(1), sp.Integer(0), sp.Integer(-1)]
    order = (0, 1, 2)
    scaled = top_k_gate([2 * v for v in zw], order)[0] - top_k_gate(zw, order)[0]
    ok, box = certify_nonzero(scaled)
    out.check(
        f"**Router scaling is not a gauge**: $z = (1, 0, -1)$, $W_r\\to2W_r$ moves $G_1$ by "
        f"${sp.latex(sp.simplify(scaled))}\\in[{box[0]:.6f}, {box[1]:.6f}]$, excluding 0." if box else "no enclosure",
        ok,
    )
    out.facts.update({"exact": ["expert_permutation", "router_shift", "expert_up_down_scaling"],
                      "broken": ["router_scaling", "expert_gate_scaling"],
                      "witness": {"router_scaling": list(box) if box else []}})
    return out


CLAIM = Claim(
    name="experts",
    title="Mixture of experts: each expert's group, the permutation of experts, and router shifts",
    statement=(
        "For a top-$k$ softmax router (Mixtral), permuting the experts together with the router's rows, "
        "adding one vector to every router row ($W_r\\mapsto W_r + \\mathbb{1}v^\\top$) and applying any "
        "expert's own MLP gauge leave the layer's output unchanged (distinct logits); scaling the router does not."
    ),
    premises=PREMISES,
    method="case split over the orders of the logits (3 experts, top-2); certified witness",
    numeric="experts",
    derive=derive,
)
