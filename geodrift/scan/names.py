"""Name tables: every checkpoint tensor name -> one canonical key ``(kind, layer)``.

The canonical vocabulary (Hugging Face transformers' layout; projections are ``(d_out, d_in)``):

=====================================  ===========================================================
key                                    meaning
=====================================  ===========================================================
``(role, layer)``                      a projection, role in ``geodrift.weights.TRANSFORMER_ROLES``
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

Fused tensors map to a *fused* kind that the reader splits: ``attn_qkv`` (rows ``[q; k; v]``,
phi3 ``qkv_proj``, gpt2 ``c_attn``, GGUF ``attn_qkv``) and ``mlp_gate_up`` (rows ``[gate; up]``,
phi3 ``gate_up_proj`` and phi3's GGUF ``ffn_up``). A :class:`NameRule` also says whether the
stored matrix must be transposed (gpt2's Conv1D stores ``(d_in, d_out)``).

Norm gains are given as Hugging Face stores them. Gemma's RMSNorm multiplies by ``(1 + w)``;
``geodrift.scan.readers.norm_gain`` returns that effective gain.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.scan.validate import check_file
from geodrift.weights import HF_LLAMA_PROJECTIONS, TRANSFORMER_ROLES

CanonicalKey = tuple[str, int | None]

ARCHITECTURES: tuple[str, ...] = (
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "gpt2",
)
FUSED_KINDS: tuple[str, ...] = ("attn_qkv", "mlp_gate_up", "attn_qkv_bias")
NORM_KINDS: tuple[str, ...] = (
    "norm_attn", "norm_mlp", "norm_attn_post", "norm_mlp_post", "norm_q", "norm_k", "norm_final",
)
GLOBAL_KINDS: tuple[str, ...] = ("embed", "pos_embed", "lm_head", "norm_final", "norm_final_bias")
KINDS: frozenset[str] = frozenset(
    list(TRANSFORMER_ROLES)
    + [r + "_bias" for r in TRANSFORMER_ROLES]
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


# A user's --names regex: at most this long, compiled by RE2 into at most this much memory.
MAX_PATTERN_CHARS = 1000
MAX_PATTERN_MEMORY = 8 << 20
MAX_MAPPING_BYTES = 1 << 20


@dataclass(frozen=True)
class NameRule:
    """One regex over tensor names and the canonical kind it yields.

    Attributes:
        pattern: a full-match regex; its first group, if any, is the layer index.
        kind: the canonical kind (see the module docstring).
        transpose: the stored matrix is ``(d_in, d_out)`` and must be transposed.
        bounded: a user's rule (``--names``): matched by RE2 in time linear in the name, never by
            a backtracking engine (see :func:`load_name_mapping`).
    """

    pattern: str
    kind: str
    transpose: bool = False
    bounded: bool = False


def _layer_rules(prefix: str, table: list[tuple[str, str]], transpose: bool = False) -> list[NameRule]:
    return [NameRule(prefix + r"(\d+)\." + re.escape(suffix), kind, transpose) for suffix, kind in table]


# Hugging Face prefixes seen for decoder layers (plain, CausalLM, multimodal language_model).
_HF_PREFIX = r"(?:model\.|model\.language_model\.|language_model\.model\.)?layers\."
_HF_GLOBAL = r"(?:model\.|model\.language_model\.|language_model\.model\.)?"

_LLAMA_LAYER = (
    [(f"{path}.weight", role) for role, path in HF_LLAMA_PROJECTIONS.items()]
    + [(f"{HF_LLAMA_PROJECTIONS[r]}.bias", f"{r}_bias") for r in ("attn_q", "attn_k", "attn_v", "attn_o")]
    + [("input_layernorm.weight", "norm_attn"),
       ("self_attn.q_norm.weight", "norm_q"), ("self_attn.k_norm.weight", "norm_k")]
)
_HF_GLOBALS = [
    NameRule(_HF_GLOBAL + r"embed_tokens\.weight", "embed"),
    NameRule(_HF_GLOBAL + r"norm\.weight", "norm_final"),
    NameRule(r"lm_head\.weight", "lm_head"),
]
_LLAMA = _layer_rules(_HF_PREFIX, _LLAMA_LAYER + [("post_attention_layernorm.weight", "norm_mlp")])
_GEMMA2 = _layer_rules(
    _HF_PREFIX,
    _LLAMA_LAYER
    + [
        ("post_attention_layernorm.weight", "norm_attn_post"),
        ("pre_feedforward_layernorm.weight", "norm_mlp"),
        ("post_feedforward_layernorm.weight", "norm_mlp_post"),
    ],
)
_PHI3 = _LLAMA + _layer_rules(
    _HF_PREFIX, [("self_attn.qkv_proj.weight", "attn_qkv"), ("mlp.gate_up_proj.weight", "mlp_gate_up")]
)
_GPT2_PREFIX = r"(?:transformer\.)?h\."
_GPT2 = (
    _layer_rules(
        _GPT2_PREFIX,
        [("attn.c_attn.weight", "attn_qkv"), ("attn.c_proj.weight", "attn_o"),
         ("mlp.c_fc.weight", "mlp_up"), ("mlp.c_proj.weight", "mlp_down")],
        transpose=True,
    )
    + _layer_rules(
        _GPT2_PREFIX,
        [("attn.c_attn.bias", "attn_qkv_bias"), ("attn.c_proj.bias", "attn_o_bias"),
         ("mlp.c_fc.bias", "mlp_up_bias"), ("mlp.c_proj.bias", "mlp_down_bias"),
         ("ln_1.weight", "norm_attn"), ("ln_1.bias", "norm_attn_bias"),
         ("ln_2.weight", "norm_mlp"), ("ln_2.bias", "norm_mlp_bias")],
    )
    + [
        NameRule(r"(?:transformer\.)?wte\.weight", "embed"),
        NameRule(r"(?:transformer\.)?wpe\.weight", "pos_embed"),
        NameRule(r"(?:transformer\.)?ln_f\.weight", "norm_final"),
        NameRule(r"(?:transformer\.)?ln_f\.bias", "norm_final_bias"),
        NameRule(r"lm_head\.weight", "lm_head"),
    ]
)

HF_TABLES: dict[str, list[NameRule]] = {
    "llama": _LLAMA + _HF_GLOBALS,
    "mistral": _LLAMA + _HF_GLOBALS,
    "qwen2": _LLAMA + _HF_GLOBALS,
    "qwen3": _LLAMA + _HF_GLOBALS,
    "gemma": _LLAMA + _HF_GLOBALS,
    "gemma2": _GEMMA2 + _HF_GLOBALS,
    "gemma3": _GEMMA2 + _HF_GLOBALS,
    "phi3": _PHI3 + _HF_GLOBALS,
    "gpt2": _GPT2,
}
# Tensors that are buffers or carry no weight information; silently skipped.
HF_IGNORED = re.compile(
    r".*(?:rotary_emb\.inv_freq|attn\.bias|attn\.masked_bias)$|^(?:vision_tower|multi_modal_projector|"
    r"model\.vision_tower|model\.multi_modal_projector)\..*"
)

_GGUF_LAYER = [
    ("attn_q.weight", "attn_q"), ("attn_k.weight", "attn_k"), ("attn_v.weight", "attn_v"),
    ("attn_output.weight", "attn_o"), ("attn_qkv.weight", "attn_qkv"),
    ("attn_q.bias", "attn_q_bias"), ("attn_k.bias", "attn_k_bias"), ("attn_v.bias", "attn_v_bias"),
    ("attn_output.bias", "attn_o_bias"), ("attn_qkv.bias", "attn_qkv_bias"),
    ("ffn_gate.weight", "mlp_gate"), ("ffn_up.weight", "mlp_up"), ("ffn_down.weight", "mlp_down"),
    ("ffn_up.bias", "mlp_up_bias"), ("ffn_down.bias", "mlp_down_bias"),
    ("attn_norm.weight", "norm_attn"), ("attn_norm.bias", "norm_attn_bias"),
    ("ffn_norm.weight", "norm_mlp"), ("ffn_norm.bias", "norm_mlp_bias"),
    ("post_attention_norm.weight", "norm_attn_post"), ("post_ffw_norm.weight", "norm_mlp_post"),
    ("attn_q_norm.weight", "norm_q"), ("attn_k_norm.weight", "norm_k"),
]
GGUF_TABLE: list[NameRule] = _layer_rules(r"blk\.", _GGUF_LAYER) + [
    NameRule(r"token_embd\.weight", "embed"),
    NameRule(r"position_embd\.weight", "pos_embed"),
    NameRule(r"output_norm\.weight", "norm_final"),
    NameRule(r"output_norm\.bias", "norm_final_bias"),
    NameRule(r"output\.weight", "lm_head"),
]
GGUF_IGNORED = re.compile(r"rope_freqs\.weight|rope_factors_(?:long|short)\.weight")


def gguf_rules(architecture: str) -> list[NameRule]:
    """GGUF names for ``architecture``; phi3 stores gate and up fused in ``ffn_up`` (rows [gate; up])."""
    if architecture == "phi3":
        return [NameRule(r"blk\.(\d+)\.ffn_up\.weight", "mlp_gate_up")] + GGUF_TABLE
    return GGUF_TABLE


def load_name_mapping(path: str | Path) -> list[NameRule]:
    """Read a user mapping: a JSON object ``{regex: kind}`` or ``{regex: {"kind": k, "transpose": b}}``.

    Each regex must match a whole tensor name; its first group (if any) is the layer index. These
    rules are tried before the built-in tables, so they can also override them. The regexes are
    RE2 syntax (Python's ``re`` without backreferences and lookarounds; ``\\d`` is ASCII), at most
    :data:`MAX_PATTERN_CHARS` characters and :data:`MAX_PATTERN_MEMORY` bytes compiled: matching
    takes time linear in the name, so no pattern can hang the scan (catastrophic backtracking).

    Args:
        path: the JSON file (the CLI's ``--names``).

    Returns:
        The rules, in file order.

    Raises:
        GeodriftError: when the file is missing, larger than 1 MiB or not JSON, a regex is too long,
            does not compile or needs a backtracking engine, or a kind is not in the canonical vocabulary.

    Example:
        ``{"layers\\\\.(\\\\d+)\\\\.attention\\\\.wq\\\\.weight": "attn_q"}``
    """
    path = Path(path)
    if not path.exists():
        raise GeodriftError(f"{path}: name mapping file not found; pass an existing JSON file to --names")
    size = check_file(path, "--names mapping").st_size  # a FIFO would block the read below
    if size > MAX_MAPPING_BYTES:
        raise GeodriftError(f"{path}: a name mapping of {size} bytes is more than the {MAX_MAPPING_BYTES} allowed; "
                            "write one regex per tensor family, not per tensor")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GeodriftError(f"{path}: name mapping file not found; pass an existing JSON file to --names") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GeodriftError(f"{path}: not a readable JSON name mapping ({exc}); write {{\"regex\": \"role\"}}") from None
    if not isinstance(payload, dict) or not payload:
        raise GeodriftError(f"{path}: a name mapping is a non-empty JSON object {{\"regex\": \"role\"}}")
    rules = []
    for pattern, value in payload.items():
        named = value.get("kind", value.get("role")) if isinstance(value, dict) else value
        if isinstance(named, str):
            kind = named
            transpose = bool(value.get("transpose", False)) if isinstance(value, dict) else False
        else:
            raise GeodriftError(f"{path}: value for {pattern!r} must be a role name or {{\"kind\": ..., \"transpose\": ...}}")
        if kind not in KINDS:
            raise GeodriftError(
                f"{path}: unknown role {kind!r} for {pattern!r}; use one of {', '.join(sorted(KINDS))}"
            )
        _bounded_regex(pattern, path)
        rules.append(NameRule(pattern, kind, transpose, bounded=True))
    return rules


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    import re2

    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    options.log_errors = False  # RE2 would print its own error on stderr, past the one error line
    return re2.compile(pattern, options)


def _bounded_regex(pattern: str, source: str | Path) -> Any:
    # RE2: linear-time matching, a bounded program; refuses what needs backtracking (\\1, lookarounds).
    import re2

    if len(pattern) > MAX_PATTERN_CHARS:
        raise GeodriftError(f"{source}: a regex of {len(pattern)} characters is longer than the "
                            f"{MAX_PATTERN_CHARS} allowed ({pattern[:40]!r}...); shorten it")
    try:
        return _compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise GeodriftError(f"{source}: regex {pattern!r} does not compile as RE2 ({reason}); --names takes RE2 "
                            "syntax: no backreferences or lookarounds, programs up to 8 MiB") from None


def match_name(name: str, rules: list[NameRule]) -> tuple[CanonicalKey, bool] | None:
    """The canonical key and transpose flag of ``name`` under ``rules`` (first match wins), or None."""
    for rule in rules:
        m = _bounded_regex(rule.pattern, "--names").fullmatch(name) if rule.bounded else re.fullmatch(rule.pattern, name)
        if m is None:
            continue
        group = m.group(1) if m.groups() else None
        if group is not None and not group.isdecimal():
            raise GeodriftError(
                f"name rule {rule.pattern!r} captures {group!r} from tensor {name!r} as the layer index, which "
                "is not an integer; make the rule's first group match the layer number, e.g. (\\d+)"
            )
        layer = int(group) if group is not None else None
        return (rule.kind, layer), rule.transpose
    return None


def guess_hf_architecture(names: list[str]) -> str:
    """Guess the architecture of a Hugging Face state dict from its tensor names alone.

    gemma and llama share every name; without a ``config.json`` a gemma file reads as llama
    (only the folded view differs: gemma's ``(1 + w)`` gain). Pass ``architecture=`` to override.
    """
    joined = "\n".join(names)
    if re.search(r"(?m)^(?:transformer\.)?h\.\d+\.attn\.c_attn\.", joined):
        return "gpt2"
    if "qkv_proj" in joined or "gate_up_proj" in joined:
        return "phi3"
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
        GeodriftError: for an architecture without a name table.
    """
    aliases = {"gemma3_text": "gemma3", "phi3small": "phi3", "qwen2_moe": "qwen2"}
    arch = aliases.get(model_type, model_type)
    if arch not in ARCHITECTURES:
        raise GeodriftError(
            f"{source + ': ' if source else ''}architecture {model_type!r} has no built-in name table (known: {', '.join(ARCHITECTURES)}); "
            "pass --names mapping.json ({\"regex\": \"role\"}) to map its tensors"
        )
    return arch
