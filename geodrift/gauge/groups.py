"""Which exact symmetry group (gauge) acts on each weight matrix the scanner reports, per architecture family.

The table is what the proofs derived (``geodrift prove``: the sympy claims ``residual``, ``attention``,
``mlp``, ``experts`` and ``gauge``/``commutants``, each with numeric twins on real models); a family or
role outside it says ``derived=False``. A weight ``W`` (``(d_out, d_in)``) is moved by the group on its
row side (what it writes) and on its column side (what it reads): ``W -> G_rows W G_cols^-1``.

Group kinds (machine-readable; :data:`KINDS` says what each means):

Example:
    >>> gauge_of("qwen2", "attn_q").rows.kind
    'rope_commutant'
    >>> gauge_of("qwen2", "attn_q").cols.kind, gauge_of("gemma2", "attn_q").cols.kind
    ('orthogonal', 'signed_permutation')
    >>> gauge_of("phi3", "attn_q").derived
    False
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

KINDS: dict[str, str] = {
    "orthogonal": "O(d) on the residual stream, once the norm gains are folded (untying a tied head)",
    "orthogonal_fixing_ones": "{R in O(d): R 1 = +-1} on the residual stream (LayerNorm), gains folded, writer "
                              "biases rotated; plus translations of every write along 1",
    "signed_permutation": "signed permutations of the residual stream, the unfoldable (sandwich) gains permuted "
                          "with them; no continuous group",
    "gl_per_kv_head": "GL(d_head) per KV head (V rows B, O columns of its query heads B^-1), heads permutable",
    "gl_qk_per_head": "GL(d_head) per KV head acting as A on Q and A^-T on K (no RoPE), heads permutable",
    "rope_commutant": "one rotation-scaling r R(phi) per RoPE frequency pair per KV head (Q: r R(phi), "
                      "K: R(phi)/r), heads permutable",
    "qk_norm_pair_signs": "one sign per RoPE frequency pair per KV head on Q and K together (per-coordinate q/k "
                          "norm gains; a scale per pair moves between the gains, not the weights), heads permutable",
    "nonzero_scaling_permutation": "hidden units permuted (with Gate) and scaled by any nonzero s (Up rows s, "
                                   "Down columns 1/s)",
    "positive_scaling_permutation": "hidden units permuted and scaled by s > 0 (ReLU: input row and bias s, "
                                    "output column 1/s)",
    "signed_unit_permutation": "hidden units permuted and sign-flipped (tanh, odd)",
    "permutation": "hidden units permuted only (SiLU, GELU: no scale passes the activation)",
    "expert_permutation_shift": "experts permuted with the router's rows; one vector added to every router row",
    "residual_commutant": "the activation's commutant acting by conjugation on the simulator MLP's stream "
                          "(O(d) linear/radial; positive diagonal x permutations ReLU; signed permutations tanh; "
                          "permutations otherwise)",
    "orthogonal_per_kv_head": "O(d_head) per KV head (V rows R, O columns R^T): a radial nonlinearity on V "
                              "keeps the rotations of GL(d_head) only",
    "none": "no gauge acts on this side (inputs or outputs the network exposes)",
    "unknown": "not derived by geodrift",
}


@dataclass(frozen=True)
class Group:
    """One side's group: ``kind`` (a :data:`KINDS` key), the proofs (claim names) and numeric twins
    (``family:claim.map`` names measured by ``geodrift prove``), and the invariant it leaves."""

    kind: str
    claims: tuple[str, ...] = ()
    twins: tuple[str, ...] = ()
    invariant: str = ""

    @property
    def text(self) -> str:
        """What the group is, in words."""
        return KINDS[self.kind]

    @property
    def derived(self) -> bool:
        """Whether geodrift derived it (proved symbolically and checked numerically)."""
        return self.kind != "unknown"


@dataclass(frozen=True)
class RoleGauge:
    """The groups acting on one role's weight: on its rows (what it writes) and columns (what it reads)."""

    role: str
    rows: Group
    cols: Group

    @property
    def derived(self) -> bool:
        """Both sides derived."""
        return self.rows.derived and self.cols.derived

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, with each side's text and ``derived``."""
        return {"role": self.role, "derived": self.derived,
                **{side: {**asdict(g), "text": g.text, "derived": g.derived}
                   for side, g in (("rows", self.rows), ("cols", self.cols))}}


@dataclass(frozen=True)
class Family:
    """An architecture family: the scanner's architecture names it covers, its residual group and roles."""

    name: str
    architectures: tuple[str, ...]
    residual: Group
    roles: dict[str, RoleGauge] = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return {"family": self.name, "architectures": list(self.architectures), "note": self.note,
                "residual": {**asdict(self.residual), "text": self.residual.text, "derived": self.residual.derived},
                "roles": {r: g.to_dict() for r, g in self.roles.items()}}


def _g(kind: str, claims: str, twins: str = "", invariant: str = "") -> Group:
    return Group(kind, tuple(claims.split()), tuple(twins.split()), invariant)


_RES = _g("orthogonal", "residual equivariance", "smollm2:residual.rotation_folded qwen2:residual.rotation_folded")
_SANDWICH = _g("signed_permutation", "residual", "gemma2:residual.signed_permutation gemma3:residual.signed_permutation")
_LN = _g("orthogonal_fixing_ones", "residual", "gpt2:residual.layernorm_rotation_fixing_ones "
         "gpt2:residual.layernorm_translation_ones")
_VO = _g("gl_per_kv_head", "attention", "smollm2:attention.vo_per_kv_head qwen2:attention.vo_per_kv_head "
         "gemma2:attention.vo_per_kv_head smollm2:attention.head_permutation", "O_h V_h per query head h")
_VO_GPT2 = _g("gl_per_kv_head", "attention", "gpt2:attention.vo_per_head", "O_h V_h per head h")
_QK = _g("rope_commutant", "attention", "smollm2:attention.qk_rope_commutant qwen2:attention.qk_rope_commutant "
         "gemma2:attention.qk_rope_commutant", "Q_i^T Rot(theta) K_i per pair i, every theta")
_QK_NORM = _g("qk_norm_pair_signs", "attention", "gemma3:attention.qk_norm_pair_sign "
              "gemma3:attention.qk_norm_gain_scale", "the normalised scores")
_QK_GPT2 = _g("gl_qk_per_head", "attention", "gpt2:attention.qk_general_without_rope", "Q_h^T K_h per head h")
_UP = _g("nonzero_scaling_permutation", "mlp", "smollm2:mlp.up_down_scaling smollm2:mlp.permutation")
_GATE = _g("permutation", "mlp commutants", "smollm2:mlp.permutation", "")
_PLAIN = _g("permutation", "mlp commutants", "gpt2:mlp.gelu_new.permutation")
_ROUTER = _g("expert_permutation_shift", "experts", "mixtral:experts.expert_permutation mixtral:experts.router_shift")
_EXPERT_UP = _g("nonzero_scaling_permutation", "mlp experts", "mixtral:experts.expert_up_down_scaling")
_EXPERT_GATE = _g("permutation", "mlp experts", "mixtral:experts.expert_up_down_scaling")
_UNKNOWN = Group("unknown")


def _transformer(residual: Group, qk: Group, vo: Group = _VO, gate: Group = _GATE, up: Group = _UP,
                 moe: bool = False) -> dict[str, RoleGauge]:
    roles = {
        "attn_q": RoleGauge("attn_q", qk, residual), "attn_k": RoleGauge("attn_k", qk, residual),
        "attn_v": RoleGauge("attn_v", vo, residual), "attn_o": RoleGauge("attn_o", residual, vo),
        "mlp_gate": RoleGauge("mlp_gate", gate, residual), "mlp_up": RoleGauge("mlp_up", up, residual),
        "mlp_down": RoleGauge("mlp_down", residual, up),
    }
    if moe:
        roles.update({
            "router": RoleGauge("router", _ROUTER, residual),
            "expert_gate": RoleGauge("expert_gate", _EXPERT_GATE, residual),
            "expert_up": RoleGauge("expert_up", _EXPERT_UP, residual),
            "expert_down": RoleGauge("expert_down", residual, _EXPERT_UP),
        })
    return roles


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("llama", ("llama", "mistral", "qwen2", "gemma"), _RES, _transformer(_RES, _QK),
           "RMSNorm pre-norms, RoPE, GQA, SwiGLU/GeGLU; Qwen2's q/k/v biases move with their rows"),
    Family("qwen3", ("qwen3",), _RES, _transformer(_RES, _QK_NORM), "Llama with per-head q/k norms"),
    Family("gemma2", ("gemma2",), _SANDWICH, _transformer(_SANDWICH, _QK), "sandwich norms on every block's output"),
    Family("gemma3", ("gemma3",), _SANDWICH, _transformer(_SANDWICH, _QK_NORM), "sandwich norms and q/k norms"),
    Family("mixtral", ("mixtral",), _RES, _transformer(_RES, _QK, moe=True), "top-k softmax router over SwiGLU experts"),
    Family("gpt2", ("gpt2",), _LN, _transformer(_LN, _QK_GPT2, _VO_GPT2, gate=_UNKNOWN, up=_PLAIN),
           "LayerNorm with biases, learned positions, GELU MLP (no Gate); a tied head unties when ln_f folds"),
)}
# Read by the scanner but not derived here (fused or different routers / norms): their gauge is unknown.
NOT_DERIVED: dict[str, str] = {
    "phi3": "fused qkv and gate_up with partial rotary: not derived",
    "qwen2_moe": "softmax-then-top-k router with a sigmoid-gated shared expert: not derived",
    "qwen3_moe": "softmax-then-top-k router with q/k norms: not derived",
    "olmoe": "q/k norms over all heads jointly: not derived",
}
SIM_MLP_GROUPS: dict[str, str] = {  # the simulators' residual MLP: the commutant of the activation
    "none": "O(d)", "radial": "O(d)", "radial_rms": "O(d)", "relu": "positive diagonal x permutations",
    "leaky_relu": "positive diagonal x permutations", "abs": "positive diagonal x permutations",
    "tanh": "signed permutations", "gelu": "permutations", "silu": "permutations", "softplus": "permutations",
    "sigmoid": "permutations",
}


_V_ELEMENTWISE = {"relu": "positive_scaling_permutation", "tanh": "signed_unit_permutation",
                  "silu": "permutation", "gelu": "permutation"}
_GATE_OF = {"silu": "permutation", "gelu": "permutation", "radial": "permutation", "radial_rms": "permutation",
            "relu": "positive_scaling_permutation", "none": "nonzero_scaling_permutation"}


def sim_llama_family(activation: str = "silu", v_activation: str = "none", norm: str = "pre",
                     residual: bool = True) -> Family:
    """The simulators' Llama (:class:`geodrift.lm.llama.LlamaLM`) under its ablation switches.

    The default switches are the llama family. ``v_activation``: a radial one keeps the rotations of each
    V head only (claim ``gauge``), an element-wise one the commutant of the activation on V's rows
    (claim ``commutants``), undone on O's columns. ``activation`` (Gate's): ReLU adds positive scalings,
    none (bilinear) any nonzero scaling, the others permutations only (claim ``mlp``). ``norm="none"``
    (the stream is then acted on by more than O(d)) and ``residual=False`` are not derived.

    Example:
        >>> sim_llama_family(v_activation="relu").roles["attn_v"].rows.kind
        'positive_scaling_permutation'
        >>> sim_llama_family(norm="none").residual.derived
        False
    """
    res = _RES if norm == "pre" and residual else _UNKNOWN
    if v_activation == "none":
        vo = _VO
    elif v_activation in ("radial", "radial_rms"):
        vo = _g("orthogonal_per_kv_head", "gauge equivariance", "", "O_h V_h per query head h")
    else:
        vo = _g(_V_ELEMENTWISE.get(v_activation, "unknown"), "commutants gauge", "", "")
    gate = _g(_GATE_OF.get(activation, "unknown"), "mlp commutants", "", "")
    roles = _transformer(res, _QK, vo, gate=gate)
    return Family("sim_llama", ("simulator",), res, roles,
                  f"geodrift's Llama: activation={activation}, v_activation={v_activation}, norm={norm}, "
                  f"residual={residual}")


def family_of(architecture: str) -> Family | None:
    """The derived family of a scanner architecture name (``geodrift.scanner.names.ARCHITECTURES``), or None.

    Example:
        >>> family_of("mistral").name, family_of("olmoe")
        ('llama', None)
    """
    for fam in FAMILIES.values():
        if architecture in fam.architectures:
            return fam
    return None


def gauge_of(architecture: str, role: str) -> RoleGauge:
    """The groups acting on ``role``'s weight in ``architecture`` (``expert_up.3`` reads as ``expert_up``).

    Returns:
        The derived :class:`RoleGauge`, or one with both sides ``unknown`` (``derived`` False) for an
        architecture or role geodrift has not derived.
    """
    fam = family_of(architecture)
    base = role.split(".", 1)[0]
    if fam is None or base not in fam.roles:
        return RoleGauge(role, _UNKNOWN, _UNKNOWN)
    return fam.roles[base]


def unknown_reason(architecture: str, role: str | None = None) -> str:
    """Why no group is derived for ``architecture`` (and ``role``): one line naming the missing symmetry."""
    if architecture in NOT_DERIVED:
        return f"{architecture}: {NOT_DERIVED[architecture]}"
    fam = family_of(architecture)
    if fam is None:
        return f"{architecture}: no gauge group derived for this architecture"
    return f"{architecture}: no gauge group derived for role {role!r}"


def sim_mlp_group(activation: str) -> str:
    """The simulators' residual MLP's stream group for an activation name (``geodrift.lm.activations``).

    Example:
        >>> sim_mlp_group("relu")
        'positive diagonal x permutations'
    """
    return SIM_MLP_GROUPS.get(activation, "unknown")


def table() -> dict[str, Any]:
    """The whole table, JSON-able: families, the kinds' meanings, what is not derived."""
    return {"families": {n: f.to_dict() for n, f in FAMILIES.items()}, "kinds": KINDS, "not_derived": NOT_DERIVED,
            "sim_mlp": SIM_MLP_GROUPS}
