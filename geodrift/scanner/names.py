"""Names: every checkpoint tensor name -> one canonical key ``(kind, layer)``, through ``gguf.TensorNameMap``.

The names come from llama.cpp's own tables in the ``gguf`` package: ``gguf.TensorNameMap`` (the
Hugging Face names of each architecture, as ``convert_hf_to_gguf.py`` reads them) and
``gguf.TENSOR_NAMES`` (the GGUF names). geodrift adds only :data:`GEODRIFT_ROWS`, where the library
is wrong or missing for what geodrift needs; ``tests/test_names.py`` says why for each.

The canonical vocabulary (Hugging Face transformers' layout; projections are ``(d_out, d_in)``):

=====================================  ===========================================================
key                                    meaning
=====================================  ===========================================================
``(role, layer)``                      a projection, role in ``geodrift.weights.TRANSFORMER_ROLES``
``("router", layer)``                  a mixture-of-experts router ``(n_experts, d_model)``
``("expert_gate.E", layer)`` ...       expert E's Gate/Up/Down (``geodrift.weights.EXPERT_ROLES``)
``("shared_gate", layer)`` ...         the shared expert's Gate/Up/Down (Qwen2-MoE)
``("shared_router", layer)``           the shared expert's one-row gate ``(1, d_model)`` (not scanned)
``(role + "_bias", layer)``            its bias, when the model has one (qwen2 q/k/v, gpt2 all)
``("norm_attn", layer)``               the attention block's input norm gain (``input_layernorm``)
``("norm_mlp", layer)``                the MLP block's input norm gain
``("norm_attn_post", layer)``          gemma2/3: norm applied to the attention output
``("norm_mlp_post", layer)``           gemma2/3: norm applied to the MLP output
``("norm_q", layer)``, ``("norm_k", layer)``  qwen3/gemma3 per-head q/k norms (size head_dim)
``("norm_final", None)``               the final norm
``("embed", None)``                    token embedding ``(vocab, d_model)``
``("pos_embed", None)``                gpt2 learned positions ``(n_ctx, d_model)``
``("lm_head", None)``                  output projection ``(vocab, d_model)`` (absent when tied)
``<norm> + "_bias"``                   LayerNorm biases (gpt2)
=====================================  ===========================================================

*Stacked* and *fused* tensors map to a kind that the reader splits (``geodrift.scanner.checkpoint``):
``attn_qkv`` (rows ``[q; k; v]``: phi3 ``qkv_proj``, gpt2 ``c_attn``, GGUF ``attn_qkv``),
``mlp_gate_up`` (rows ``[gate; up]``: phi3 ``gate_up_proj`` and phi3's GGUF ``ffn_up``) and the
bare expert families ``expert_gate``/``expert_up``/``expert_down`` of a 3-D tensor
``(n_experts, d_out, d_in)`` (GGUF ``ffn_gate_exps`` ...). A match also says whether the stored
matrix must be transposed (gpt2's Conv1D stores ``(d_in, d_out)``).

A user's ``--names`` mapping (``geodrift.scanner.mapping``) is tried before these tables.

Norm gains are given as Hugging Face stores them. Gemma's RMSNorm multiplies by ``(1 + w)``;
``geodrift.scanner.readers.norm_gain`` returns that effective gain.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from geodrift.architectures import ARCHITECTURES as REGISTRY
from geodrift.errors import GeodriftError
from geodrift.weights import EXPERT_ROLES, MOE_ROLES, TRANSFORMER_ROLES, expert_role

CanonicalKey = tuple[str, int | None]

# geodrift's architectures -> the gguf.MODEL_ARCH whose TensorNameMap holds their Hugging Face names: the
# registry's rows (geodrift.architectures). (Mixtral is llama's map: llama.cpp converts it as "llama" with experts.)
LIBRARY_ARCH: dict[str, str] = {name: row.gguf_arch for name, row in REGISTRY.items() if row.gguf_arch}
ARCHITECTURES: tuple[str, ...] = tuple(LIBRARY_ARCH)
# Other spellings of them (config.json model_type, GGUF general.architecture).
ARCHITECTURE_ALIASES: dict[str, str] = {"gemma3_text": "gemma3", "phi3small": "phi3", "qwen2moe": "qwen2_moe",
                                        "qwen3moe": "qwen3_moe"}
MOE_ARCHITECTURES: frozenset[str] = frozenset(name for name in LIBRARY_ARCH if REGISTRY[name].moe)
FUSED_KINDS: tuple[str, ...] = ("attn_qkv", "mlp_gate_up", "attn_qkv_bias")
NORM_KINDS: tuple[str, ...] = (
    "norm_attn", "norm_mlp", "norm_attn_post", "norm_mlp_post", "norm_q", "norm_k", "norm_final",
)
GLOBAL_KINDS: tuple[str, ...] = ("embed", "pos_embed", "lm_head", "norm_final", "norm_final_bias")
KINDS: frozenset[str] = frozenset(
    list(TRANSFORMER_ROLES)
    + [r + "_bias" for r in TRANSFORMER_ROLES]
    + list(MOE_ROLES) + list(EXPERT_ROLES) + ["shared_router"]
    + list(NORM_KINDS)
    + [n + "_bias" for n in NORM_KINDS]
    + list(GLOBAL_KINDS)
    + list(FUSED_KINDS)
    + ["ignore"]  # a user mapping may skip a tensor
)
# Architectures whose RMSNorm multiplies by (1 + w) (Hugging Face stores w).
GEMMA_FAMILY: frozenset[str] = frozenset({"gemma", "gemma2", "gemma3"})
# GGUF architectures whose Q/K rows llama.cpp's converter permuted (LlamaModel.permute).
GGUF_PERMUTED_QK: frozenset[str] = frozenset({"llama", "mistral"})

# gguf.MODEL_TENSOR member -> geodrift kind (tensors not listed here are not geodrift's business).
KIND_OF_TENSOR: dict[str, str] = {
    "ATTN_Q": "attn_q", "ATTN_K": "attn_k", "ATTN_V": "attn_v", "ATTN_OUT": "attn_o", "ATTN_QKV": "attn_qkv",
    "FFN_GATE": "mlp_gate", "FFN_UP": "mlp_up", "FFN_DOWN": "mlp_down",
    "ATTN_NORM": "norm_attn", "FFN_NORM": "norm_mlp", "FFN_PRE_NORM": "norm_mlp",
    "ATTN_POST_NORM": "norm_attn_post", "FFN_POST_NORM": "norm_mlp_post",
    "ATTN_Q_NORM": "norm_q", "ATTN_K_NORM": "norm_k",
    "TOKEN_EMBD": "embed", "POS_EMBD": "pos_embed", "OUTPUT": "lm_head", "OUTPUT_NORM": "norm_final",
    "FFN_GATE_INP": "router", "FFN_GATE_EXP": "expert_gate", "FFN_UP_EXP": "expert_up",
    "FFN_DOWN_EXP": "expert_down", "FFN_GATE_SHEXP": "shared_gate", "FFN_UP_SHEXP": "shared_up",
    "FFN_DOWN_SHEXP": "shared_down", "FFN_GATE_INP_SHEXP": "shared_router",
}

# Where the library is wrong or missing for geodrift (each row has a test in tests/test_names.py):
GEODRIFT_ROWS: dict[str, str] = {
    "prefixes": "multimodal and bare prefixes (model.language_model., language_model.model., layers.) "
                "are read as model. - the library lists only the text models' own prefix",
    "own_names": "an architecture's map in the library also lists other families' names (gpt2's h.N.mlp.c_fc, "
                 "llama-pth's layers.N.attention.wq, internlm2's ... in llama's) whose layouts differ (Conv1D "
                 "orientation, rotary row order); geodrift reads transformers' own modules (model.layers.N. "
                 "self_attn/mlp/block_sparse_moe/*layernorm, gpt2's h.N.), so a mislabelled file is refused",
    "lm_head": "gemma/gemma2 lm_head.weight is the output head - llama.cpp ties it, so the library's "
               "gemma tables have no output tensor",
    "fused": "fused tensors are split only in the layouts geodrift knows: [q; k; v] of phi3's qkv_proj and "
             "gpt2's c_attn, [gate; up] of phi3's gate_up_proj (which the library calls ffn_up, like phi3's GGUF "
             "ffn_up); the library also maps other fused names (persimmon's query_key_value, glm4's "
             "gate_up_proj) whose rows interleave differently, so those are refused",
    "conv1d": "gpt2's Conv1D weights (c_attn, c_proj, c_fc) are stored (d_in, d_out) - a name map says "
              "nothing about orientation",
    "llama_layout": "self_attn.q_norm/k_norm (in every llama-family architecture) and phi3's unfused "
                    "mlp.gate_proj are read as before the library, whose llama, mistral, qwen2, gemma and phi3 "
                    "maps lack them",
    "experts": "Hugging Face stores experts one by one (experts.3.w1); the library knows only the stacked "
               "name llama.cpp's converter writes (experts.w1), so the expert index is taken out first",
}
_MULTIMODAL_PREFIX = re.compile(r"^(?:model\.language_model\.|language_model\.model\.)")
_BARE_PREFIX = re.compile(r"^(?=layers\.\d|embed_tokens$|norm$)")
# The architecture's own layout (GEODRIFT_ROWS["own_names"]), after the prefixes are normalised.
_OWN_NAMES = re.compile(r"model\.layers\.\d+\.(?:(?:self_attn|mlp|block_sparse_moe)\..+|\w*layernorm)"
                        r"|model\.embed_tokens|model\.norm|lm_head")
_QKV_OWN = re.compile(r".*\.(?:self_attn\.qkv_proj|attn\.c_attn)")
_GPT2_NAMES = re.compile(r"(?:transformer\.)?(?:h\.\d+\..+|wte|wpe|ln_f)|lm_head")
_CONV1D = re.compile(r"(?:^|\.)(?:attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$")
_LLAMA_LAYOUT = re.compile(r"model\.layers\.(\d+)\.(self_attn\.q_norm|self_attn\.k_norm|mlp\.gate_proj)\.weight")
_LLAMA_LAYOUT_KINDS = {"self_attn.q_norm": "norm_q", "self_attn.k_norm": "norm_k", "mlp.gate_proj": "mlp_gate"}
_SUFFIXES = (".weight", ".bias")

# Tensors that are buffers or carry no weight information; silently skipped.
HF_IGNORED = re.compile(
    r".*(?:rotary_emb\.inv_freq|attn\.bias|attn\.masked_bias)$|^(?:vision_tower|multi_modal_projector|"
    r"model\.vision_tower|model\.multi_modal_projector)\..*"
)
GGUF_IGNORED = re.compile(r"rope_freqs\.weight|rope_factors_(?:long|short)\.weight")


@dataclass(frozen=True)
class NameTable:
    """The built-in names of one architecture in one format (``"hf"`` or ``"gguf"``).

    Example:
        >>> NameTable("mixtral", "hf").match("model.layers.2.block_sparse_moe.experts.5.w3.weight")
        (('expert_up.5', 2), False)
        >>> NameTable("llama", "gguf").match("blk.2.ffn_down_exps.weight")
        (('expert_down', 2), False)
    """

    architecture: str
    fmt: str

    def match(self, name: str) -> tuple[CanonicalKey, bool] | None:
        """The canonical key and transpose flag of ``name``, or None when the tables do not know it."""
        if self.fmt == "gguf":
            return _gguf_match(name, self.architecture)
        return _hf_match(name, self.architecture)


def hf_table(architecture: str) -> NameTable | None:
    """The Hugging Face names of ``architecture`` (None for an architecture without built-in names)."""
    return NameTable(architecture, "hf") if architecture in LIBRARY_ARCH else None


def gguf_table(architecture: str) -> NameTable:
    """The GGUF names (llama.cpp's, the same for every architecture; phi3's ``ffn_up`` is fused)."""
    return NameTable(architecture, "gguf")


def _split_suffix(name: str) -> tuple[str, str]:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def _with_suffix(kind: str, suffix: str) -> str:
    return kind + "_bias" if suffix == ".bias" else kind


@functools.cache
def _gguf_templates() -> list[tuple[re.Pattern[str], str]]:
    # gguf.TENSOR_NAMES ("blk.{bid}.attn_q", ...) as full-match regexes, for the kinds geodrift reads.
    from gguf.constants import TENSOR_NAMES

    out = []
    for tensor, template in TENSOR_NAMES.items():
        kind = KIND_OF_TENSOR.get(tensor.name)
        if kind is not None:
            out.append((re.compile(re.escape(template).replace(r"\{bid\}", r"(\d+)")), kind))
    return out


@functools.lru_cache(maxsize=4096)
def _gguf_match(name: str, architecture: str) -> tuple[CanonicalKey, bool] | None:
    base, suffix = _split_suffix(name)
    if not suffix:
        return None
    for pattern, kind in _gguf_templates():
        m = pattern.fullmatch(base)
        if m is None:
            continue
        if kind == "mlp_up" and architecture == "phi3" and suffix == ".weight":
            kind = "mlp_gate_up"  # GEODRIFT_ROWS["fused"]
        return (_with_suffix(kind, suffix), int(m.group(1)) if m.groups() else None), False
    return None


@functools.cache
def _library_map(architecture: str) -> Any:
    # One block is enough: the layer number is put back by _hf_match (a map of n blocks is n times larger).
    import gguf

    return gguf.get_tensor_name_map(gguf.MODEL_ARCH[LIBRARY_ARCH[architecture]], 1)


@functools.lru_cache(maxsize=8192)
def _hf_match(name: str, architecture: str) -> tuple[CanonicalKey, bool] | None:
    base, suffix = _split_suffix(name)
    if not suffix:
        return None
    base = _BARE_PREFIX.sub("model.", _MULTIMODAL_PREFIX.sub("model.", base))  # GEODRIFT_ROWS["prefixes"]
    if (_GPT2_NAMES if architecture == "gpt2" else _OWN_NAMES).fullmatch(base) is None:
        return None
    parts = base.split(".")
    expert = None
    if "experts" in parts:  # GEODRIFT_ROWS["experts"]
        at = parts.index("experts") + 1
        if at < len(parts) and parts[at].isdecimal():
            expert = int(parts.pop(at))
    hit = _library_lookup(parts, architecture)
    if hit is None:
        return _geodrift_row(base, suffix, architecture)
    kind, layer = hit
    if base.endswith(".gate_up_proj"):  # GEODRIFT_ROWS["fused"]: the library calls it ffn_up
        if architecture != "phi3":
            return None
        kind = "mlp_gate_up"
    if kind == "attn_qkv" and _QKV_OWN.fullmatch(base) is None:
        return None
    if expert is not None:
        if kind not in EXPERT_ROLES:
            return None
        kind = expert_role(kind, expert)
    transpose = architecture == "gpt2" and suffix == ".weight" and _CONV1D.search(name) is not None
    return (_with_suffix(kind, suffix), layer), transpose  # transpose: GEODRIFT_ROWS["conv1d"]


def _library_lookup(parts: list[str], architecture: str) -> tuple[str, int | None] | None:
    # Each numeric part in turn is tried as the block number (the map holds block 0); then none is.
    mapping = _library_map(architecture)
    for i, part in enumerate(parts):
        if part.isdecimal():
            hit = mapping.get_type_and_name(".".join(parts[:i] + ["0"] + parts[i + 1:]))
            if hit is not None and hit[1].startswith("blk.0."):
                kind = KIND_OF_TENSOR.get(hit[0].name)
                return (kind, int(part)) if kind is not None else None
    hit = mapping.get_type_and_name(".".join(parts))
    if hit is None or hit[1].startswith("blk."):
        return None
    kind = KIND_OF_TENSOR.get(hit[0].name)
    return (kind, None) if kind is not None else None


def _geodrift_row(base: str, suffix: str, architecture: str) -> tuple[CanonicalKey, bool] | None:
    # The names the library does not have (GEODRIFT_ROWS "lm_head", "llama_layout").
    name = base + suffix
    if name == "lm_head.weight":
        return ("lm_head", None), False
    m = _LLAMA_LAYOUT.fullmatch(name)
    if m is not None and architecture != "gpt2":
        return (_LLAMA_LAYOUT_KINDS[m.group(2)], int(m.group(1))), False
    return None


def guess_hf_architecture(names: list[str]) -> str:
    """Guess the architecture of a Hugging Face state dict from its tensor names alone.

    gemma and llama share every name; without a ``config.json`` a gemma file reads as llama
    (only the folded view differs: gemma's ``(1 + w)`` gain), and an OLMoE file reads as
    qwen3_moe (the same names). Pass ``architecture=`` to override.
    """
    joined = "\n".join(names)
    if re.search(r"(?m)^(?:transformer\.)?h\.\d+\.attn\.c_attn\.", joined):
        return "gpt2"
    if "block_sparse_moe." in joined:
        return "mixtral"
    if ".mlp.experts." in joined:
        return "qwen3_moe" if "self_attn.q_norm" in joined else "qwen2_moe"
    if "qkv_proj" in joined or "gate_up_proj" in joined:
        return "phi3"
    if "post_feedforward_layernorm" in joined and "input_layernorm" not in joined:
        return "olmo2"  # post-norms only
    if "pre_feedforward_layernorm" in joined:
        return "gemma3" if "q_norm" in joined else "gemma2"
    if "self_attn.q_norm" in joined:
        return "qwen3"
    if "self_attn.q_proj.bias" in joined:
        return "qwen2"
    return "llama"


def normalise_model_type(model_type: str, source: str | None = None) -> str:
    """Map a config.json ``model_type`` / GGUF ``general.architecture`` onto ARCHITECTURES.

    Args:
        model_type: the name as the file states it.
        source: where it was read (``"model/config.json model_type"``), named in the message.

    Raises:
        GeodriftError: for an architecture without built-in names.
    """
    arch = ARCHITECTURE_ALIASES.get(model_type, model_type)
    if arch not in ARCHITECTURES:
        raise GeodriftError(
            f"{source + ': ' if source else ''}architecture {model_type!r} has no built-in names (known: {', '.join(ARCHITECTURES)}); "
            "pass --names mapping.json ({\"regex\": \"role\"}, roles as in --roles) to map its tensors"
        )
    return arch
