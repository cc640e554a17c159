"""Every architecture geodrift reads, in one table: names, forward pass, gauge group, views, notes.

:data:`ARCHITECTURES` holds one :class:`Architecture` per model type the scanner accepts (and the two
simulators). Each row says

- its tensor names: the ``gguf.MODEL_ARCH`` whose ``gguf.TensorNameMap`` holds its Hugging Face names
  (:mod:`geodrift.scanner.names` reads them through the library);
- who runs its forward pass (geodrift's own Llama, transformers, or the simulators);
- its gauge group: every generator by name (:data:`GENERATORS`: what it acts on, continuous or
  discrete, exact or exact up to the norms' epsilon, which reported numbers it moves) with its
  dimension as a formula in the model's sizes (:data:`SIZES`);
- its canonical view (the steps of :mod:`geodrift.gauge.families` that remove every generator from the
  numbers) or why there is none, and whether ``--align`` handles it;
- the note a user sees, and the small model ``geodrift prove`` builds to *measure* the group's
  continuous dimension (:mod:`geodrift.prove.jacobian`).

The scanner (names, views, ``moved_by``), the canonical view, alignment, ``geodrift prove`` and
docs/models.md all read this table. A new architecture is one row (and the proofs and maps of any
generator it adds). This module imports only the standard library.

Example:
    >>> ARCHITECTURES["qwen3"].continuous()
    ('fold', 'rotate', 'stream_scale', 'vo', 'qk_head_scale', 'qk_gain_pair', 'mlp_scale')
    >>> derived_dimension("llama", {"L": 2, "d": 16, "H": 4, "Hkv": 2, "hd": 4, "f": 8, "V": 24})
    297
    >>> ARCHITECTURES["gemma3"].view, ARCHITECTURES["mistral"].family
    ('canonical', 'llama')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The sizes a dimension formula may use.
SIZES: dict[str, str] = {
    "L": "layers", "d": "residual width", "H": "query heads", "Hkv": "key-value heads", "hd": "head dimension",
    "f": "MLP hidden units", "V": "vocabulary", "n_pos": "learned positions", "E": "experts per layer",
    "fe": "hidden units per expert", "fs": "shared expert's hidden units",
}
# What a generator's numbers-moving tokens mean (Generator.moves): a role moves in both spaces; "role.u"/"role.v"
# one space; "residual" every residual-side space (the permutation null and z, not the mean |cos|); "hidden:"
# the head/hidden side of the roles named after it.
READERS = ("attn_q", "attn_k", "attn_v", "attn_ov.v", "mlp_gate", "mlp_up", "router", "expert_gate", "expert_up",
           "shared_gate", "shared_up")
WRITER_ROWS = ("attn_o.u", "attn_ov.u", "mlp_down.u", "expert_down.u", "shared_down.u")


@dataclass(frozen=True)
class Generator:
    """One generator of a gauge group: an exact reparametrisation of the weights.

    Attributes:
        text: what it does, in words.
        continuous: a Lie group's direction (counted by the Jacobian's null space) or a discrete map (signs,
            permutations: checked one by one).
        dimension: its dimension as a formula in :data:`SIZES` (discrete ones: ``"0"``); a row may override it.
        exact: ``""`` (exact) or why it is exact only in a limit (``"up to the norms' epsilon"``).
        moves: the reported numbers it moves in the raw view (see :data:`READERS` for the tokens).
        removed_by: the view that first leaves those numbers unchanged: ``folded`` or ``canonical``
            (``raw`` for a generator that moves no number).
        claim: the ``geodrift prove`` claim that derives it.
        part_of: for a discrete generator that is another's other component (a reflection of ``rotate``, the sign
            of ``fold``), that generator: ``moved_by`` names it alone.
    """

    text: str
    continuous: bool
    dimension: str = "0"
    exact: str = ""
    moves: tuple[str, ...] = ()
    removed_by: str = "canonical"
    claim: str = "attention"
    part_of: str = ""


EPS = "up to the norms' epsilon (exact for epsilon = 0; a scale change is relative epsilon/||x||^2)"
GENERATORS: dict[str, Generator] = {
    # residual stream
    "fold": Generator("each pre-norm gain coordinate times s != 0, the columns of the projections that read it "
                      "divided by s (a LayerNorm's bias with the gain)", True, "(2*L+1)*d", moves=READERS,
                      removed_by="folded", claim="residual"),
    "gain_sign": Generator("a pre-norm gain coordinate and the matching reader columns change sign (fold's s = -1)",
                           False, moves=READERS, removed_by="folded", claim="residual", part_of="fold"),
    "rotate": Generator("R in O(d) on the residual stream, the pre-norm gains kept in the readers "
                        "(W -> W diag(g) R^T diag(g)^-1, writers R W, embedding E R^T)", True, "d*(d-1)/2",
                        moves=("residual",), claim="residual"),
    "reflect": Generator("the reflections of O(d) (det R = -1): rotate's other component", False,
                         moves=("residual",), claim="residual", part_of="rotate"),
    "rotate_fixing_ones": Generator("R in O(d) with R 1 = 1 (LayerNorm centres along 1), gains kept in the readers, "
                                    "LayerNorm biases g * R(b / g)", True, "(d-1)*(d-2)/2", moves=("residual",),
                                    claim="residual"),
    "reflect_ones": Generator("R 1 = -1 (LayerNorm is odd): rotate_fixing_ones' other component", False,
                              moves=("residual",), claim="residual", part_of="rotate_fixing_ones"),
    "signed_permute": Generator("the residual coordinates permuted and sign-flipped, every norm gain permuted "
                                "with them (sandwich norms leave nothing continuous)", False, moves=("residual",),
                                claim="residual"),
    "stream_scale": Generator("the whole residual stream times c > 0: the embeddings, every write (post-norm gains "
                              "instead of writers where there are post-norms) and every raw reader by 1/c", True,
                              "1", EPS, removed_by="raw", claim="residual"),
    "post_scale": Generator("a post-normed writer (O, Down) times c > 0", True, "2*L", EPS, removed_by="raw",
                            claim="residual"),
    "post_gain_sign": Generator("a post-norm gain coordinate and the matching row of its writer change sign", False,
                                moves=WRITER_ROWS, removed_by="folded", claim="residual"),
    # attention
    "vo": Generator("B in GL(d_head) per KV head: V rows (and bias) B, the O columns of its query heads B^-1", True,
                    "L*Hkv*hd**2", moves=("attn_v", "attn_o")),
    "qk_rope": Generator("r R(phi) per RoPE frequency pair per KV head: Q's pair rows (every query head of the "
                         "group) r R(phi), K's R(phi)/r (biases too)", True, "L*Hkv*hd", moves=("attn_q", "attn_k")),
    "qk_gl": Generator("A in GL(d_head) per head without RoPE: Q rows (and bias) A, K rows A^-T", True, "L*H*hd**2",
                       moves=("attn_q", "attn_k")),
    "qk_head_scale": Generator("a per-head q/k norm divides out a positive scale of each query head's Q rows and of "
                               "each KV head's K rows", True, "L*(H+Hkv)", EPS, moves=("attn_q", "attn_k")),
    "qk_scale": Generator("a q/k norm over all heads together divides out a positive scale of all of Q (of K)", True,
                          "2*L", EPS, removed_by="raw"),
    "qk_gain_pair": Generator("a scale rho per RoPE pair moves between the q-norm and k-norm gains (rho, 1/rho)", True,
                              "L*hd/2", removed_by="raw"),
    "qk_pair_sign": Generator("a sign per RoPE pair per KV head on Q's pair rows (its query heads) and K's together",
                              False, moves=("hidden:attn_q", "hidden:attn_k")),
    "head_permute": Generator("KV heads permuted with their query groups, query heads within a group", False,
                              moves=("hidden:attn_q", "hidden:attn_k", "hidden:attn_v", "hidden:attn_o")),
    "k_bias": Generator("K's bias, a shift of every score of a query by one constant: no effect (softmax)", True,
                        "L*H*hd", removed_by="raw"),
    "v_bias": Generator("V's bias shift delta per head, undone on O's bias by O_h delta (attention weights sum to 1)",
                        True, "L*H*hd", removed_by="raw"),
    # MLP
    "mlp_scale": Generator("each hidden unit's Up row times s != 0 and its Down column divided by s (Up is linear)",
                           True, "L*f", moves=("mlp_up", "mlp_down"), claim="mlp"),
    "mlp_sign": Generator("a hidden unit's Up row and Down column change sign (mlp_scale's s = -1)", False,
                          moves=("hidden:mlp_up", "hidden:mlp_down"), claim="mlp", part_of="mlp_scale"),
    "mlp_permute": Generator("hidden units permuted (Gate/Up rows and Down columns together)", False,
                             moves=("hidden:mlp_gate", "hidden:mlp_up", "hidden:mlp_down"), claim="mlp"),
    # mixtures of experts
    "router_shift": Generator("one vector added to every router row (softmax and top-k see only differences)", True,
                              "L*d", moves=("router",), claim="experts"),
    "expert_scale": Generator("each expert's hidden units: Up row times s != 0, Down column divided by s", True,
                              "L*E*fe", moves=("expert_up", "expert_down"), claim="experts"),
    "shared_scale": Generator("the shared expert's hidden units: Up row times s != 0, Down column divided by s",
                              True, "L*fs", moves=("shared_up", "shared_down"), claim="experts"),
    "expert_permute": Generator("experts permuted with the router's rows", False,
                                moves=("expert_gate", "expert_up", "expert_down", "hidden:router"), claim="experts"),
    "expert_unit_permute": Generator("each expert's hidden units permuted", False,
                                     moves=("hidden:expert_gate", "hidden:expert_up", "hidden:expert_down"),
                                     claim="experts"),
    # LayerNorm with biases (gpt2)
    "ln_bias": Generator("a LayerNorm's bias shifted by delta, undone in its readers' biases (W delta), or without "
                         "a reader bias in the reader (W + a (1/g)^T)", True, "(2*L+1)*d", removed_by="raw",
                         claim="residual"),
    "reader_ones": Generator("a reader row plus a multiple of 1/g (LayerNorm's output is orthogonal to 1/g after "
                             "the gain), its bias compensating", True, "L*(3*d+f)", moves=("attn_q", "attn_k",
                             "attn_v", "attn_ov.v", "mlp_up"), claim="residual"),
    "writer_ones": Generator("every write plus a multiple of 1: writer columns and biases, token and position rows "
                             "(LayerNorm subtracts the mean)", True, "L*(d+f+2)+V+n_pos",
                             moves=("attn_o", "attn_ov.u", "mlp_down"), claim="residual"),
    "token_position_shift": Generator("one vector (orthogonal to 1) added to every token row and subtracted from "
                                      "every position row", True, "d-1", removed_by="raw", claim="residual"),
    # the simulators' residual MLP h -> h + act(W h): the activation's commutant acting by conjugation
    "stream_orthogonal": Generator("E -> R E, W -> R W R^T, H -> H R^T with R in O(d) (linear or radial "
                                   "activation)", True, "d*(d-1)/2", moves=("residual",), claim="gauge"),
    "stream_positive_scale": Generator("conjugation by a positive diagonal (ReLU and other positively homogeneous "
                                       "activations)", True, "d", moves=("residual",), claim="commutants"),
    "stream_permute": Generator("conjugation by a permutation (every element-wise activation)", False,
                                moves=("residual",), claim="commutants"),
    "stream_sign": Generator("conjugation by a sign flip (odd activations: tanh)", False, moves=("residual",),
                             claim="commutants"),
}


@dataclass(frozen=True)
class Architecture:
    """One architecture: names, forward pass, gauge group, views.

    Attributes:
        gguf_arch: the ``gguf.MODEL_ARCH`` member whose ``TensorNameMap`` holds its names ("" for the simulators).
        family: the group it shares (rows of one family have one group and one canonical form).
        forward: who runs it: ``geodrift`` (geodrift's own Llama), ``transformers``, ``simulator``.
        group: generator name -> its dimension formula in this architecture (:data:`GENERATORS`).
        pre_norms: the norms read by projections (``norm_attn``, ``norm_mlp``; the final norm is always one).
        post_norms: the norms on what a block writes (sandwich or post-norm).
        canonical: the canonical steps (:mod:`geodrift.gauge.families`) or () where the group is not done.
        not_canonical: why not (the default view is then ``folded``, with the generators that still move numbers).
        alignable: ``--align`` handles it (:mod:`geodrift.gauge.align`).
        note: what a user sees beside the scan.
        probe: how ``geodrift prove`` builds a small random model of it through transformers (config class,
            model class, extra config fields; the sizes come from :mod:`geodrift.prove.jacobian`).
    """

    gguf_arch: str
    family: str
    forward: str
    group: dict[str, str]
    pre_norms: tuple[str, ...] = ("norm_attn", "norm_mlp")
    post_norms: tuple[str, ...] = ()
    canonical: tuple[str, ...] = ()
    not_canonical: str = ""
    alignable: bool = False
    moe: bool = False
    note: str = ""
    probe: tuple[str, str, dict[str, Any]] | None = None

    def generators(self) -> tuple[str, ...]:
        """Every generator of the group (continuous first)."""
        return self.continuous() + self.discrete()

    def continuous(self) -> tuple[str, ...]:
        """The continuous generators, in table order."""
        return tuple(g for g in self.group if GENERATORS[g].continuous)

    def discrete(self) -> tuple[str, ...]:
        """The discrete generators (signs, permutations, reflections), in table order."""
        return tuple(g for g in self.group if not GENERATORS[g].continuous)

    @property
    def view(self) -> str:
        """The scan's default view: ``canonical`` where the group is done, else ``folded``."""
        return "canonical" if self.canonical else "folded"

    def still_moving(self, view: str) -> tuple[str, ...]:
        """The generators that can still move a reported number in ``view`` (raw, folded, canonical)."""
        if view == "canonical" and self.canonical:
            return ()
        order = {"raw": 0, "folded": 1, "canonical": 2}
        return tuple(g for g in self.group if order[GENERATORS[g].removed_by] > order.get(view, 0))


def _group(*parts: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in parts:
        out.update(part)
    return out


def _default(*names: str) -> dict[str, str]:
    return {name: GENERATORS[name].dimension for name in names}


PRE_NORM = _default("fold", "rotate", "stream_scale")
SANDWICH = _group(_default("fold", "stream_scale", "post_scale"))
ROPE_HEADS = _default("vo", "qk_rope")
QK_NORM_HEADS = _default("vo", "qk_head_scale", "qk_gain_pair")
GATED = _default("mlp_scale")
DISCRETE_PRE = _default("gain_sign", "reflect", "head_permute", "mlp_sign", "mlp_permute")
DISCRETE_SANDWICH = _default("gain_sign", "post_gain_sign", "signed_permute", "head_permute", "mlp_sign",
                             "mlp_permute")
MOE = _default("router_shift", "expert_scale", "expert_permute", "expert_unit_permute")
LLAMA_GROUP = _group(PRE_NORM, ROPE_HEADS, GATED, DISCRETE_PRE)
LLAMA_STEPS = ("fold", "signs", "heads", "vo", "qk_rope", "mlp")
QK_NORM_STEPS = ("fold", "signs", "heads", "vo", "qk_head_norm", "mlp")
SANDWICH_STEPS = ("fold", "fold_post", "signs", "heads", "vo", "qk_rope", "mlp")
_SMALL = {"max_position_embeddings": 8, "tie_word_embeddings": False}


def _probe(config: str, model: str, **extra: Any) -> tuple[str, str, dict[str, Any]]:
    return config, model, {**_SMALL, **extra}


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture(
        "LLAMA", "llama", "geodrift", LLAMA_GROUP, canonical=LLAMA_STEPS, alignable=True,
        note="RMSNorm pre-norms, RoPE, GQA, SwiGLU", probe=_probe("LlamaConfig", "LlamaForCausalLM")),
    "mistral": Architecture(
        "LLAMA", "llama", "geodrift", LLAMA_GROUP, canonical=LLAMA_STEPS, alignable=True,
        note="Llama's layout (a sliding window changes no weight)",
        probe=_probe("MistralConfig", "MistralForCausalLM")),
    "qwen2": Architecture(
        "QWEN2", "llama", "transformers", LLAMA_GROUP, canonical=LLAMA_STEPS,
        note="Llama with q/k/v biases (they move with their rows)", probe=_probe("Qwen2Config", "Qwen2ForCausalLM")),
    "qwen3": Architecture(
        "QWEN3", "qwen3", "transformers", _group(PRE_NORM, QK_NORM_HEADS, GATED, DISCRETE_PRE,
                                                 _default("qk_pair_sign")), canonical=QK_NORM_STEPS,
        note="Llama with per-head q/k RMSNorms (gains shared by the heads): each head's Q and K scale is divided "
             "out, the canonical view normalises every head of W_q and W_k",
        probe=_probe("Qwen3Config", "Qwen3ForCausalLM")),
    "olmo2": Architecture(
        "OLMO2", "olmo2", "transformers",
        _group(_default("fold", "stream_scale", "post_scale", "vo", "qk_scale"), {"fold": "d",
               "qk_gain_pair": "L*Hkv*hd/2"}, GATED,
               _default("post_gain_sign", "signed_permute", "qk_pair_sign", "head_permute", "mlp_sign",
                        "mlp_permute")),
        pre_norms=(), post_norms=("norm_attn_post", "norm_mlp_post"),
        canonical=("fold_post", "signs", "heads", "vo", "qk_joint_norm", "mlp"),
        note="post-norms only (every block reads the raw stream, writes through an RMSNorm) and q/k RMSNorms over "
             "all heads together: no continuous residual gauge",
        probe=_probe("Olmo2Config", "Olmo2ForCausalLM")),
    "gemma": Architecture(
        "GEMMA", "llama", "transformers", LLAMA_GROUP, canonical=LLAMA_STEPS,
        note="Llama's group: gains stored as w (the gain is 1 + w), GeGLU, the embedding scaled by sqrt(d)",
        probe=_probe("GemmaConfig", "GemmaForCausalLM", pad_token_id=None)),
    "gemma2": Architecture(
        "GEMMA2", "gemma2", "transformers", _group(SANDWICH, ROPE_HEADS, GATED, DISCRETE_SANDWICH),
        post_norms=("norm_attn_post", "norm_mlp_post"), canonical=SANDWICH_STEPS,
        note="sandwich norms (a gain on every block's output) leave no continuous residual gauge; soft-capping, "
             "1 + w gains, GeGLU",
        probe=_probe("Gemma2Config", "Gemma2ForCausalLM", pad_token_id=None, sliding_window=4)),
    "gemma3": Architecture(
        "GEMMA3", "gemma3", "transformers", _group(SANDWICH, QK_NORM_HEADS, GATED, DISCRETE_SANDWICH,
                                                   _default("qk_pair_sign")),
        post_norms=("norm_attn_post", "norm_mlp_post"),
        canonical=("fold", "fold_post", "signs", "heads", "vo", "qk_head_norm", "mlp"),
        note="sandwich norms and per-head q/k norms: no continuous residual gauge; each head's Q and K scale is "
             "divided out, the canonical view normalises every head of W_q and W_k",
        probe=_probe("Gemma3TextConfig", "Gemma3ForCausalLM", pad_token_id=None, sliding_window=4,
                     layer_types=["sliding_attention", "full_attention"])),
    "gpt2": Architecture(
        "GPT2", "gpt2", "transformers",
        _group(_default("fold", "ln_bias", "reader_ones", "writer_ones", "token_position_shift",
                        "rotate_fixing_ones", "stream_scale", "qk_gl"), {"vo": "L*H*hd**2"},
               _default("k_bias", "v_bias", "gain_sign", "reflect_ones", "head_permute", "mlp_permute")),
        canonical=("fold", "center_ones", "signs", "heads", "vo", "qk_gl", "mlp_order"),
        note="LayerNorm with biases (centred along 1), learned positions, GELU MLP (no Gate), fused Conv1D QKV",
        probe=("GPT2Config", "GPT2LMHeadModel", {"tie_word_embeddings": False, "n_positions": 8, "resid_pdrop": 0.0,
                                                 "embd_pdrop": 0.0, "attn_pdrop": 0.0})),
    "phi3": Architecture(
        "PHI3", "llama", "transformers", LLAMA_GROUP, canonical=LLAMA_STEPS,
        note="Llama's group once the fused qkv_proj and gate_up_proj are split (full rotary; a partial rotary factor "
             "leaves GL on the unrotated dimensions, not done: folded)",
        probe=_probe("Phi3Config", "Phi3ForCausalLM", pad_token_id=None)),
    "mixtral": Architecture(
        "LLAMA", "mixtral", "transformers", _group(PRE_NORM, ROPE_HEADS, MOE, _default("gain_sign", "reflect",
                                                                                       "head_permute")),
        moe=True, canonical=("fold", "signs", "heads", "vo", "qk_rope", "experts"),
        note="Llama attention; a top-k softmax router over SwiGLU experts (renormalised top-k weights)",
        probe=_probe("MixtralConfig", "MixtralForCausalLM")),
    "qwen2_moe": Architecture(
        "QWEN2MOE", "qwen2_moe", "transformers",
        _group(PRE_NORM, ROPE_HEADS, MOE, _default("shared_scale", "gain_sign", "reflect", "head_permute")),
        moe=True, canonical=("fold", "signs", "heads", "vo", "qk_rope", "experts", "shared"),
        note="Qwen2 attention; a softmax-then-top-k router over experts and an always-on shared expert behind a "
             "sigmoid gate",
        probe=_probe("Qwen2MoeConfig", "Qwen2MoeForCausalLM", decoder_sparse_step=1)),
    "qwen3_moe": Architecture(
        "QWEN3MOE", "qwen3_moe", "transformers",
        _group(PRE_NORM, QK_NORM_HEADS, MOE, _default("gain_sign", "reflect", "head_permute", "qk_pair_sign")),
        moe=True, canonical=("fold", "signs", "heads", "vo", "qk_head_norm", "experts"),
        note="Qwen3 attention (per-head q/k norms); a softmax-then-top-k router over experts",
        probe=_probe("Qwen3MoeConfig", "Qwen3MoeForCausalLM", decoder_sparse_step=1)),
    "olmoe": Architecture(
        "OLMOE", "olmoe", "transformers",
        _group(PRE_NORM, _default("vo", "qk_scale"), {"qk_gain_pair": "L*Hkv*hd/2"}, MOE,
               _default("gain_sign", "reflect", "head_permute", "qk_pair_sign")),
        moe=True, canonical=("fold", "signs", "heads", "vo", "qk_joint_norm", "experts"),
        note="pre-norms, q/k RMSNorms over all heads together, a softmax-then-top-k router over experts",
        probe=_probe("OlmoeConfig", "OlmoeForCausalLM")),
    "sim_llama": Architecture(
        "", "llama", "simulator", LLAMA_GROUP, canonical=LLAMA_STEPS,
        note="geodrift's Llama (geodrift.lm.llama.LlamaLM) with its default switches: the llama group"),
    "sim_mlp": Architecture(
        "", "sim_mlp", "simulator", _default("stream_positive_scale", "stream_permute"),
        note="the simulators' residual MLP h -> h + act(W h) (ReLU shown; the group is the activation's commutant: "
             "geodrift.gauge.groups.sim_mlp_group)"),
}
SCANNED: tuple[str, ...] = tuple(a for a, row in ARCHITECTURES.items() if row.forward != "simulator")


def dimension(formula: str, sizes: dict[str, int]) -> int:
    """A dimension formula evaluated at ``sizes`` (:data:`SIZES` names; integer arithmetic).

    Example:
        >>> dimension("L*Hkv*hd**2", {"L": 2, "Hkv": 2, "hd": 4})
        64
    """
    value = eval(formula, {"__builtins__": {}}, dict(sizes))  # noqa: S307 - our own table's formulas, never input
    if value != int(value):
        raise ValueError(f"dimension {formula!r} is not an integer at {sizes}")
    return int(value)


def derived_dimension(architecture: str, sizes: dict[str, int]) -> int:
    """The continuous gauge group's dimension of ``architecture`` at ``sizes``: its continuous generators' sum."""
    row = ARCHITECTURES[architecture]
    return sum(dimension(row.group[g], sizes) for g in row.continuous())


def row(architecture: str) -> Architecture | None:
    """The row of a scanner architecture name (None: not in the table, e.g. a ``--names`` mapping)."""
    return ARCHITECTURES.get(architecture)


def moved_by(architecture: str | None, view: str, role: str, space: str, residual_side: bool) -> tuple[str, ...]:
    """The generators of ``architecture`` that move the numbers of ``role``'s ``space`` in ``view``.

    Args:
        architecture: the scanner's architecture name (None or unknown: the llama group is assumed).
        view: raw, folded or canonical.
        role: a base role (``expert_up.3`` reads as ``expert_up``).
        space: ``u`` or ``v``.
        residual_side: whether that space is the residual stream's.

    Example:
        >>> moved_by("llama", "folded", "mlp_up", "v", True)
        ('rotate', 'mlp_scale')
        >>> moved_by("gemma3", "folded", "attn_q", "v", True)
        ('qk_head_scale', 'signed_permute')
    """
    arch = ARCHITECTURES.get(architecture or "llama", ARCHITECTURES["llama"])
    base = role.split(".", 1)[0]
    out = []
    for name in arch.still_moving(view):
        if GENERATORS[name].part_of in arch.group:
            continue  # named by the continuous generator it is a component of
        moves = GENERATORS[name].moves
        hit = (base in moves or f"{base}.{space}" in moves or ("residual" in moves and residual_side)
               or (f"hidden:{base}" in moves and not residual_side))
        if hit:
            out.append(name)
    return tuple(out)


@dataclass(frozen=True)
class Summary:
    """One architecture's row as docs/models.md and ``geodrift prove`` show it."""

    architecture: str
    family: str
    continuous: list[str] = field(default_factory=list)
    discrete: list[str] = field(default_factory=list)
    view: str = ""
    note: str = ""


def summaries() -> list[Summary]:
    """Every scanned architecture's :class:`Summary`, in table order."""
    return [Summary(a, r.family, list(r.continuous()), list(r.discrete()), r.view, r.note)
            for a, r in ARCHITECTURES.items()]


def docs_table() -> str:
    """The architectures as docs/models.md lists them (a test keeps the page equal to this)."""
    lines = ["| architecture | family | forward pass | continuous generators (dimension) | discrete generators | "
             "default view | checked by |", "|---|---|---|---|---|---|---|"]
    for name, r in ARCHITECTURES.items():
        continuous = ", ".join(f"`{g}` {r.group[g]}" + (" (up to ε)" if GENERATORS[g].exact else "")
                               for g in r.continuous())
        check = "`geodrift prove dimension`" + (f"; `pytest tests/test_family_views.py -k {name}`"
                                               if r.probe is not None else "")
        lines.append(f"| {name} | {r.family} | {r.forward} | {continuous or '—'} | "
                     f"{', '.join(f'`{g}`' for g in r.discrete()) or '—'} | "
                     f"{r.view if r.canonical or r.forward != 'simulator' else '—'} | {check} |")
    return "\n".join(lines)
