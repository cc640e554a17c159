"""Transformer simulator configuration: a frozen dataclass, presets by name, ablations as functions.

Presets:
- ``paper``: the paper's section 5.1 model (D 256, 8 layers, 4 heads, SwiGLU d_ff 1024, RMSNorm,
  sequence 128, batch 128, 10k steps, init N(0, 0.02^2)); the vocabulary is what the tokenizer
  gives (the paper's GPT-2 tokenizer has 50257 ids; here a local BPE of ``vocab`` ids).
  The paper does not state optimiser, learning rate, schedule, weight decay, d_ff, tying or
  positional encoding: the values below (AdamW 3e-4, betas 0.9/0.95, wd 0.1, 100 warm-up steps,
  cosine to 10%, untied, RoPE) are standard LLM practice, chosen here, not the paper's.
- ``cpu``: the same architecture family shrunk to show the per-projection pattern on a 2-core
  machine within 20 minutes (one thread): D 128, 8 layers, 4 heads, d_ff 512, sequence 64,
  batch 16, 600 steps (about 3 minutes on one free core; far longer when the cores are shared),
  BPE 2048.
- ``tiny``: for tests (seconds).

Ablations (``ABLATIONS``, ``config -> config``): the MLP activation (``silu``, ``relu``, ``gelu``,
``none`` = bilinear, ``radial``), ``nores``, ``nonorm``, ``linear_attn`` (attention without the
softmax, test (a)) and ``v_silu``/``v_relu``/``v_tanh``/``v_gelu`` (an element-wise nonlinearity
on V's output, test (b)).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from geodrift.errors import GeodriftError


@dataclass(frozen=True)
class TransformerConfig:
    """Everything that defines one transformer-simulator run except the seed and the device.

    Attributes:
        name: preset name plus ablations, e.g. ``"cpu+linear_attn"``.
        d_model, n_layers, n_heads, n_kv_heads (None = n_heads), d_ff: the model's shape.
        activation, residual, norm, attention, v_activation: ablation switches (see sim/llama.py).
        init_std: N(0, init_std^2) init of every Linear and the embedding.
        rope_theta, norm_eps, tie_embeddings: as in a Llama config.
        tokenizer: ``"bpe"`` or ``"bytes"``; vocab: BPE size (ignored for bytes).
        corpus: None = the embedded stdlib-docs corpus, else a path; corpus_max_chars: cap on the
            training text (None = all).
        seq_len, batch_size, steps: data and length of training.
        lr, betas, weight_decay, warmup_steps, min_lr_ratio, grad_clip: AdamW with linear warm-up and
            cosine decay to ``lr * min_lr_ratio``; gradient-norm clipping (0 = off).
        track_every: steps between per-projection continuity snapshots (0 = only at the end).
        eval_every: steps between held-out evaluations (0 = only at the end); eval_windows: how many
            held-out windows of ``seq_len`` an evaluation uses.
        scan_k, null_draws: top-k and permutation-null draws of the final scan table.
    """

    name: str = "paper"
    d_model: int = 256
    n_layers: int = 8
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int = 1024
    activation: str = "silu"
    residual: bool = True
    norm: bool = True
    attention: str = "softmax"
    v_activation: str = "none"
    init_std: float = 0.02
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    tokenizer: str = "bpe"
    vocab: int = 8192
    corpus: str | None = None
    corpus_max_chars: int | None = None
    seq_len: int = 128
    batch_size: int = 128
    steps: int = 10_000
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    track_every: int = 250
    eval_every: int = 1000
    eval_windows: int = 256
    scan_k: int = 8
    null_draws: int = 50

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> TransformerConfig:
        """Inverse of :meth:`to_dict` (unknown keys are an error: the record is from another version).

        Raises:
            GeodriftError: on unknown keys.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(payload) - known)
        if unknown:
            raise GeodriftError(f"run record: unknown transformer config keys {', '.join(unknown)}; "
                                "the record was written by another geodrift version - rerun without --resume")
        values = dict(payload)
        if "betas" in values:
            values["betas"] = tuple(values["betas"])
        return cls(**values)


PRESETS: dict[str, TransformerConfig] = {
    "paper": TransformerConfig(),
    "cpu": TransformerConfig(
        name="cpu", d_model=128, n_layers=8, n_heads=4, d_ff=512, vocab=2048, seq_len=64, batch_size=16,
        steps=600, lr=1e-3, warmup_steps=30, track_every=50, eval_every=200, eval_windows=128,
    ),
    "tiny": TransformerConfig(
        name="tiny", d_model=32, n_layers=3, n_heads=2, d_ff=64, tokenizer="bytes", vocab=256,
        corpus_max_chars=60_000, seq_len=32, batch_size=8, steps=30, lr=3e-3, warmup_steps=5,
        track_every=10, eval_every=15, eval_windows=8, scan_k=4, null_draws=5,
    ),
}


def _act(name: str) -> Callable[[TransformerConfig], TransformerConfig]:
    return lambda c: replace(c, activation=name)


def _vact(name: str) -> Callable[[TransformerConfig], TransformerConfig]:
    return lambda c: replace(c, v_activation=name)


ABLATIONS: dict[str, Callable[[TransformerConfig], TransformerConfig]] = {
    "silu": _act("silu"),
    "relu": _act("relu"),
    "gelu": _act("gelu"),
    "none": _act("none"),
    "radial": _act("radial"),
    "nores": lambda c: replace(c, residual=False),
    "nonorm": lambda c: replace(c, norm=False),
    "linear_attn": lambda c: replace(c, attention="linear"),
    "v_silu": _vact("silu"),
    "v_relu": _vact("relu"),
    "v_gelu": _vact("gelu"),
    "v_tanh": _vact("tanh"),
}

# The paper's Table 2 row each configuration corresponds to (None: the paper has no such run).
PAPER_ROWS: dict[str, str | None] = {
    "silu": "Res+SiLU+Norm", "relu": "Res+ReLU+Norm", "gelu": "Res+GELU+Norm", "none": "Res+None+Norm",
    "nores": "NoRes+SiLU+Norm", "nonorm": "NoNorm (any)",
}


def make_config(preset: str = "cpu", ablations: list[str] | None = None, **overrides: Any) -> TransformerConfig:
    """A preset with ablations applied (in order), then explicit field overrides (None values ignored).

    Raises:
        GeodriftError: on an unknown preset, ablation or field.

    Example:
        >>> make_config("tiny", ["linear_attn"], steps=5).attention
        'linear'
    """
    if preset not in PRESETS:
        raise GeodriftError(f"--preset {preset!r}: choose one of {', '.join(PRESETS)}")
    config = PRESETS[preset]
    names = [a for a in (ablations or []) if a]
    for name in names:
        if name not in ABLATIONS:
            raise GeodriftError(f"--ablation {name!r}: choose one of {', '.join(ABLATIONS)}")
        config = ABLATIONS[name](config)
    known = {f.name for f in fields(TransformerConfig)}
    for key in overrides:
        if key not in known:
            raise GeodriftError(f"config: unknown field {key!r}")
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    return replace(config, name="+".join([preset, *names]))


def paper_row(config: TransformerConfig) -> str | None:
    """The paper's Table 2 row matching ``config``'s switches, or None when the paper has no such run."""
    if config.attention != "softmax" or config.v_activation != "none" or config.activation == "radial":
        return None
    if not config.norm:
        return PAPER_ROWS["nonorm"]
    if not config.residual:
        return PAPER_ROWS["nores"] if config.activation == "silu" else None
    return PAPER_ROWS[config.activation]


# The paper's Table 2 (section 3.6 of shared/reference/paper.md): reference column only, never an
# input. Each value is in the space the paper reports for that projection (v1: Q, K, Gate, Up, V;
# u1: O, Down). Llama-3.1-8B is the pretrained row.
PAPER_TABLE2_SPACE: dict[str, str] = {
    "attn_q": "v", "attn_k": "v", "mlp_gate": "v", "mlp_up": "v", "attn_o": "u", "mlp_down": "u", "attn_v": "v",
}
PAPER_TABLE2: dict[str, dict[str, float]] = {
    "Res+SiLU+Norm": {"ppl": 41.9, "attn_q": 0.405, "attn_k": 0.627, "mlp_gate": 0.662, "mlp_up": 0.225,
                      "attn_o": 0.129, "mlp_down": 0.554, "attn_v": 0.209},
    "Res+ReLU+Norm": {"ppl": 42.8, "attn_q": 0.398, "attn_k": 0.671, "mlp_gate": 0.820, "mlp_up": 0.308,
                      "attn_o": 0.339, "mlp_down": 0.532, "attn_v": 0.188},
    "Res+GELU+Norm": {"ppl": 41.9, "attn_q": 0.370, "attn_k": 0.609, "mlp_gate": 0.804, "mlp_up": 0.350,
                      "attn_o": 0.147, "mlp_down": 0.507, "attn_v": 0.115},
    "Res+None+Norm": {"ppl": 43.2, "attn_q": 0.492, "attn_k": 0.668, "mlp_gate": 0.366, "mlp_up": 0.359,
                      "attn_o": 0.221, "mlp_down": 0.517, "attn_v": 0.237},
    "Llama-3.1-8B": {"attn_q": 0.82, "attn_k": 0.77, "mlp_gate": 0.80, "mlp_up": 0.63, "attn_o": 0.89,
                     "mlp_down": 0.74, "attn_v": 0.14},
    "NoRes+SiLU+Norm": {"ppl": 1700.0, "attn_q": 0.036, "attn_k": 0.062, "mlp_gate": 0.045, "mlp_up": 0.036,
                        "attn_o": 0.066, "mlp_down": 0.052, "attn_v": 0.054},
}
