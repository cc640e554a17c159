"""One configuration vocabulary for both simulators: frozen dataclasses and ablations by name.

A run is a :class:`RunSpec`: which simulator (``"mlp"`` or ``"transformer"``), a label, the model
(:class:`MLPConfig` or :class:`LlamaConfig`, which share the names ``d_model, n_layers,
activation, residual, norm, init_std``), the data (:class:`ImageData` or :class:`TextData`), one
:class:`TrainConfig` and one :class:`TrackConfig`. The seed is not part of a spec: it is an argument
of ``geodrift.sim.run.run`` (one spec, many seeds). Device and checkpoint interval are run options
too: they do not change the numbers.

- ``geodrift.sim.presets.preset(sim, name)`` gives a named preset's specs (the paper's experiments);
- ``ablate(model, names)`` applies named ablations (``ABLATIONS[sim]``) in order, and any
  ``field=value`` of the model config (``d_model=128``, ``init_std=1e-4``, ``activation=gelu``).

Only ``geodrift.sim.simulator`` turns a spec into modules (``Simulator.parts``, through ``build_mlp`` /
``build_llama``); ``geodrift.sim.experiment`` applies command-line overrides to a preset's specs.

MLP step counts: the paper trains 20 epochs of the 60k MNIST training set at batch 128, i.e.
``20 * ceil(60000 / 128) = 9380`` steps. The embedded data set is a 5k subset, so the MLP presets
run *the same number of optimiser steps* (many more passes over the smaller set) and report time in
"paper epochs" of ``PAPER_EPOCH_STEPS = 469`` steps (``epoch_steps``).

Example:
    >>> cfg = ablate(MLPConfig(), ["nores", "gelu"])
    >>> (cfg.residual, cfg.activation)
    (False, 'gelu')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.lm.activations import LLAMA_MLP_ACTIVATIONS, LLAMA_V_ACTIVATIONS

PAPER_EPOCH_STEPS = 469  # ceil(60000 / 128): one epoch of full MNIST at batch 128
PAPER_SEEDS: tuple[int, ...] = (42, 123, 777)
SIMULATORS: tuple[str, ...] = ("mlp", "transformer")
MLP_NORMS = ("none", "pre", "post", "branch")
LLAMA_NORMS = ("pre", "none")
_ACT_NAMES = {"relu": "ReLU", "gelu": "GELU", "silu": "SiLU", "tanh": "Tanh", "none": "None", "radial": "Radial",
              "radial_rms": "RadialRMS"}


@dataclass(frozen=True)
class MLPConfig:
    """The toy MLP: ``h0 = E x``; ``h_{l+1} = h_l + act(W_l h_l)`` (or ``act(W_l h_l)`` without residual).

    Attributes:
        d_model: hidden size D (256 in the paper).
        n_layers: number of residual blocks L (16).
        activation: ``relu, gelu, silu, tanh, none, radial`` (``x * tanh(||x||)`` over the feature
            vector), ``radial_rms`` (``x * tanh(||x|| / sqrt(D))``) or any element-wise function of
            ``torch.nn.functional`` / ``torch`` by name.
        residual: keep the skip connection.
        norm: LayerNorm placement: ``"none"``; ``"pre"``: ``h + act(W LN(h))`` (the paper does not
            state its placement; pre-norm on the branch input is the natural reading);
            ``"post"``: ``LN(h + act(W h))``; ``"branch"``: ``h + LN(act(W h))``.
        init_std: when set, the block matrices ``W_l`` are drawn from ``N(0, init_std^2)`` instead of
            PyTorch's default ``U(-1/sqrt(D), 1/sqrt(D))``; embedding and head keep the default.
    """

    d_model: int = 256
    n_layers: int = 16
    activation: str = "relu"
    residual: bool = True
    norm: str = "none"
    init_std: float | None = None

    def __post_init__(self) -> None:
        if self.d_model < 2 or self.n_layers < 2:
            raise GeodriftError(f"d_model and n_layers must be >= 2 (got {self.d_model}, {self.n_layers})")
        _check("norm", self.norm, MLP_NORMS)
        if self.init_std is not None and not self.init_std > 0:
            raise GeodriftError(f"init_std must be > 0, got {self.init_std}")

    def name(self) -> str:
        """The paper's label, e.g. ``Res+ReLU+LN``."""
        label = ("Res+" if self.residual else "NoRes+") + _ACT_NAMES.get(self.activation, self.activation)
        if self.norm != "none":
            label += "+LN" if self.norm == "pre" else f"+LN({self.norm})"
        return label


@dataclass(frozen=True)
class LlamaConfig:
    """A Llama-style decoder (see ``geodrift.lm.llama``) with the paper's ablation switches.

    Attributes:
        d_model, n_layers, n_heads, n_kv_heads (None = n_heads), d_ff: the shape.
        activation: the MLP nonlinearity on Gate's output (``silu`` = SwiGLU, ``relu``, ``gelu``,
            ``none`` = bilinear, ``radial``).
        residual: keep the skip connections.
        norm: ``"pre"`` (RMSNorm pre-norm, Llama) or ``"none"`` (every norm is the identity).
        init_std: N(0, init_std^2) init of every Linear and the embedding.
        attention: ``softmax`` or ``linear`` (no softmax; test (a)).
        v_activation: a nonlinearity on V's output (test (b)): element-wise ``silu, relu, gelu, tanh``
            or the rotation-equivariant ``radial``; ``none`` by default.
        rope_theta, norm_eps, tie_embeddings: as in a Llama config.
    """

    d_model: int = 256
    n_layers: int = 8
    activation: str = "silu"
    residual: bool = True
    norm: str = "pre"
    init_std: float = 0.02
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int = 1024
    attention: str = "softmax"
    v_activation: str = "none"
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        _check("norm", self.norm, LLAMA_NORMS)
        _check("activation", self.activation, LLAMA_MLP_ACTIVATIONS)
        _check("attention", self.attention, ("softmax", "linear"))
        _check("v_activation", self.v_activation, LLAMA_V_ACTIVATIONS)
        if self.d_model % self.n_heads:
            raise GeodriftError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")


@dataclass(frozen=True)
class ImageData:
    """MLP data: ``mnist5k`` (embedded), ``digits`` (scikit-learn), an IDX folder or a ``.npz`` file."""

    name: str = "mnist5k"


@dataclass(frozen=True)
class TextData:
    """Transformer data: a corpus and its tokenizer.

    Attributes:
        corpus: None = the embedded stdlib-docs corpus, else a text file, a folder of .txt files or a
            WikiText folder.
        max_chars: cap on the training text (None = all).
        tokenizer: ``bpe`` (trained on the training split) or ``bytes``; vocab: the BPE size.
        seq_len: tokens per training window; eval_windows: held-out windows per evaluation.
    """

    corpus: str | None = None
    max_chars: int | None = None
    tokenizer: str = "bpe"
    vocab: int = 8192
    seq_len: int = 128
    eval_windows: int = 256


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, shared by both simulators. The loop runs clip -> step -> schedule, in that order.

    Attributes:
        optimizer: ``adam``, ``adamw`` or ``sgd`` (SGD with ``momentum``).
        lr, beta1, beta2, eps, weight_decay, momentum: optimiser hyper-parameters.
        batch_size: examples (windows) per step (per ensemble member).
        steps: optimiser steps.
        schedule: ``constant`` or ``cosine`` (linear warm-up over ``warmup_steps``, then cosine to
            ``lr * min_lr_ratio`` at the last step), as a ``torch.optim.lr_scheduler.LambdaLR``.
        grad_clip: clip the global gradient norm to this before each step (0 = off).
        epoch_steps: the "epoch" of the time axis and of the rotation reference; None = one pass
            over the training data.
    """

    optimizer: str = "adam"
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.9
    batch_size: int = 128
    steps: int = 20 * PAPER_EPOCH_STEPS
    schedule: str = "constant"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    grad_clip: float = 0.0
    epoch_steps: int | None = PAPER_EPOCH_STEPS

    def __post_init__(self) -> None:
        _check("optimizer", self.optimizer, ("adam", "adamw", "sgd"))
        _check("schedule", self.schedule, ("constant", "cosine"))
        if self.steps < 1:
            raise GeodriftError(f"--steps: must be >= 1, got {self.steps}")
        if self.batch_size < 1:
            raise GeodriftError(f"batch size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True)
class TrackConfig:
    """What is measured during training and at the end, and how often.

    Attributes:
        every: track every this many steps (plus step 0 = the first backward pass, the rotation
            reference step and the final step); 0 turns tracking off (the compute floor).
        k: singular vectors per space tracked (``k = 1..K``).
        null_draws: permutation-null draws of every tracked statistic.
        ema_betas: gradient EMAs kept every step (MLP; each costs one pass over the blocks per step).
        reference_step: step of the rotation-angle reference; None = one epoch (``epoch_steps``).
        eval_every: steps between held-out evaluations (transformer; 0 = only at the end).
        final_k, final_null_draws: the final report of the trained weights (the scan's table).
        view: ``raw`` (the projections as trained) or ``canonical`` (transformer only: each layer at the
            canonical point of its gauge orbit, :mod:`geodrift.sim.canonical`; gradients are then not recorded).
    """

    every: int = PAPER_EPOCH_STEPS
    k: int = 2
    null_draws: int = 8
    ema_betas: tuple[float, ...] = ()
    reference_step: int | None = None
    eval_every: int = 0
    final_k: int = 8
    final_null_draws: int = 50
    view: str = "raw"

    def __post_init__(self) -> None:
        if self.every < 0:
            raise GeodriftError(f"--track-every: must be >= 0 (0 = off), got {self.every}")
        if self.null_draws < 2 or self.final_null_draws < 2:
            raise GeodriftError("null draws must be at least 2")
        if self.view not in ("raw", "canonical"):
            raise GeodriftError(f"--view: {self.view!r} is not a tracking view; use raw or canonical")


# The simulators' Llama switches whose gauge group the canonical view is for (LlamaLM's defaults: the llama family).
CANONICAL_SWITCHES: dict[str, Any] = {"activation": "silu", "residual": True, "norm": "pre", "attention": "softmax",
                                      "v_activation": "none"}


def check_canonical_spec(sim: str, model: Any) -> None:
    """Refuse ``view="canonical"`` where the canonical view does not know the group, in one line.

    The residual MLP: its group (the activation's commutant on the shared residual stream, e.g. positive
    diagonal x permutations for ReLU) has one element for the whole network, which geodrift does not
    canonicalise. The Llama: any switch that changes its group (:data:`CANONICAL_SWITCHES`).

    Raises:
        GeodriftError: naming the simulator or the switch.

    Example:
        >>> check_canonical_spec("transformer", LlamaConfig())
    """
    if sim == "mlp":
        raise GeodriftError("--view canonical: the residual MLP's gauge group (the activation's commutant acting on "
                            "the shared residual stream, e.g. ReLU: positive diagonal x permutations) has one element "
                            "for the whole network, which geodrift does not canonicalise; track it with --view raw")
    changed = {k: getattr(model, k) for k, v in CANONICAL_SWITCHES.items() if getattr(model, k, v) != v}
    if changed:
        what = ", ".join(f"{k}={v}" for k, v in changed.items())
        raise GeodriftError(f"--view canonical: the ablation {what} changes the Llama's gauge group (geodrift prove "
                            "lists it), and the canonical convention is the llama family's; track it with --view raw")


Model = MLPConfig | LlamaConfig
Data = ImageData | TextData
_MODEL = {"mlp": MLPConfig, "transformer": LlamaConfig}
_DATA = {"mlp": ImageData, "transformer": TextData}


@dataclass(frozen=True)
class RunSpec:
    """One configuration of a preset (trained once per seed)."""

    sim: str
    label: str
    model: Model
    data: Data
    train: TrainConfig
    track: TrackConfig = field(default_factory=TrackConfig)

    def __post_init__(self) -> None:
        if self.track.view == "canonical":
            check_canonical_spec(self.sim, self.model)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (tuples become lists)."""
        return {"sim": self.sim, "label": self.label, "model": asdict(self.model), "data": asdict(self.data),
                "train": asdict(self.train), "track": {**asdict(self.track), "ema_betas": list(self.track.ema_betas)}}

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> RunSpec:
        """Inverse of :meth:`to_dict`.

        Raises:
            GeodriftError: on unknown keys (a record written by another version).
        """
        try:
            sim = payload["sim"]
            track = dict(payload["track"])
            track["ema_betas"] = tuple(track["ema_betas"])
            return cls(sim, payload["label"], _MODEL[sim](**payload["model"]), _DATA[sim](**payload["data"]),
                       TrainConfig(**payload["train"]), TrackConfig(**track))
        except (KeyError, TypeError) as error:
            raise GeodriftError(f"run record: not a run spec of this geodrift version ({error}); "
                                "re-run without --resume/--reload") from None


# ---- ablations: named functions config -> config -------------------------------------------
def _set(**values: Any) -> Callable[[Any], Any]:
    return lambda c: replace(c, **values)


_ACTIVATIONS = {a: _set(activation=a) for a in ("relu", "gelu", "silu", "none", "radial", "radial_rms")}
ABLATIONS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "mlp": {
        **_ACTIVATIONS, "tanh": _set(activation="tanh"), "nores": _set(residual=False),
        "ln": _set(norm="pre"), "ln_post": _set(norm="post"), "ln_branch": _set(norm="branch"),
    },
    "transformer": {
        **_ACTIVATIONS, "nores": _set(residual=False), "nonorm": _set(norm="none"),
        "linear_attn": _set(attention="linear"),
        **{f"v_{a}": _set(v_activation=a) for a in ("silu", "relu", "gelu", "tanh", "radial", "radial_rms")},
    },
}


def ablate(model: Model, names: list[str]) -> Model:
    """Apply named ablations in order; ``field=value`` sets any field of the model config.

    Raises:
        GeodriftError: on an unknown name or field, or a value of the wrong type.
    """
    sim = "mlp" if isinstance(model, MLPConfig) else "transformer"
    types = {f.name: f.type for f in fields(model)}
    for name in names:
        key, eq, value = name.partition("=")
        if not eq and key in ABLATIONS[sim]:
            model = ABLATIONS[sim][key](model)
        elif eq and key in types:
            model = replace(model, **{key: _parse(key, value, str(types[key]))})
        else:
            raise GeodriftError(f"--ablation: unknown {name!r}; use {', '.join(ABLATIONS[sim])} or FIELD=VALUE "
                                f"with FIELD in {', '.join(types)}")
    return model


def _parse(key: str, value: str, kind: str) -> Any:
    try:
        if kind.startswith("bool"):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        if kind.startswith("int"):
            return None if value.lower() == "none" else int(value)
        if kind.startswith("float"):
            return None if value.lower() == "none" else float(value)
    except ValueError:
        raise GeodriftError(f"--ablation {key}={value}: expected {kind.split()[0]}") from None
    return value


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise GeodriftError(f"{name}: unknown value {value!r}; choose one of {', '.join(allowed)}")
