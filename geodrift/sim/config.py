"""Simulator configurations: frozen dataclasses, named presets and named ablations.

``MLPConfig`` describes the toy residual MLP (paper section 4.1), ``TrainConfig`` the optimisation
(shared with the transformer simulator), ``TrackConfig`` what is measured during training. A
*preset* is a named list of ``RunSpec`` (a label plus the three configs); an *ablation* is a named
function ``config -> config``. Only ``geodrift.sim.mlp.build_mlp`` turns an ``MLPConfig`` into
modules.

Step counts: the paper trains 20 epochs of the 60k MNIST training set at batch 128, i.e.
``20 * ceil(60000 / 128) = 9380`` steps. The embedded data set is a 5k subset, so the reproduction
presets run *the same number of optimiser steps* (many more passes over the smaller set) and report
time in "paper epochs" of ``PAPER_EPOCH_STEPS = 469`` steps (``epoch_steps``).

Example:
    >>> from dataclasses import replace
    >>> cfg = apply_ablations(MLPConfig(), ["nores", "gelu"])
    >>> (cfg.residual, cfg.activation)
    (False, 'gelu')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from geodrift.errors import GeodriftError

PAPER_EPOCH_STEPS = 469  # ceil(60000 / 128): one epoch of full MNIST at batch 128
PAPER_SEEDS: tuple[int, ...] = (42, 123, 777)
LAYERNORM_PLACEMENTS = ("none", "pre", "post", "branch")


@dataclass(frozen=True)
class MLPConfig:
    """The toy MLP: ``h0 = E x``; ``h_{l+1} = h_l + act(W_l h_l)`` (or ``act(W_l h_l)`` without residual).

    Attributes:
        width: hidden size D (256 in the paper).
        depth: number of residual blocks L (16).
        residual: keep the skip connection.
        activation: ``relu, gelu, silu, tanh, none, radial`` (``x * tanh(||x||)`` over the feature
            vector) or any element-wise function of ``torch.nn.functional`` / ``torch`` by name.
        layernorm: ``"none"``; ``"pre"``: ``h + act(W LN(h))`` (the paper does not state its
            placement; pre-norm on the branch input is the natural reading and the ``ln`` ablation's
            default); ``"post"``: ``LN(h + act(W h))``; ``"branch"``: ``h + LN(act(W h))``.
        init_std: when set, the block matrices ``W_l`` are drawn from ``N(0, init_std^2)`` instead of
            PyTorch's default ``U(-1/sqrt(D), 1/sqrt(D))``; embedding and head keep the default.
    """

    width: int = 256
    depth: int = 16
    residual: bool = True
    activation: str = "relu"
    layernorm: str = "none"
    init_std: float | None = None

    def __post_init__(self) -> None:
        if self.width < 2 or self.depth < 2:
            raise GeodriftError(f"MLPConfig: width and depth must be >= 2 (got {self.width}, {self.depth})")
        if self.layernorm not in LAYERNORM_PLACEMENTS:
            raise GeodriftError(
                f"MLPConfig.layernorm: unknown placement {self.layernorm!r}; use one of {LAYERNORM_PLACEMENTS}"
            )
        if self.init_std is not None and not self.init_std > 0:
            raise GeodriftError(f"MLPConfig.init_std must be > 0, got {self.init_std}")

    def name(self) -> str:
        """The paper's label, e.g. ``Res+ReLU+LN``."""
        act = {"relu": "ReLU", "gelu": "GELU", "silu": "SiLU", "tanh": "Tanh", "none": "None",
               "radial": "Radial"}.get(self.activation, self.activation)
        label = ("Res+" if self.residual else "NoRes+") + act
        if self.layernorm != "none":
            label += "+LN" if self.layernorm == "pre" else f"+LN({self.layernorm})"
        return label


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings, shared by every simulator.

    Attributes:
        optimizer: ``adam``, ``adamw`` or ``sgd`` (SGD with ``momentum``).
        lr, beta1, beta2, eps, weight_decay, momentum: optimiser hyper-parameters.
        batch_size: examples per step (per ensemble member).
        steps: optimiser steps.
        epoch_steps: length of the "epoch" used for the time axis and the rotation reference;
            ``None`` = one pass over the training data.
        seed: the run's only source of randomness (init and batch order).
        device: ``cpu``, ``cuda`` or ``auto``.
        checkpoint_every: save a resumable checkpoint every this many steps (0 = only at the end).
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
    epoch_steps: int | None = PAPER_EPOCH_STEPS
    seed: int = 42
    device: str = "cpu"
    checkpoint_every: int = 0

    def __post_init__(self) -> None:
        if self.optimizer not in ("adam", "adamw", "sgd"):
            raise GeodriftError(f"TrainConfig.optimizer: unknown {self.optimizer!r}; use adam, adamw or sgd")
        if self.device not in ("cpu", "cuda", "auto"):
            raise GeodriftError(f"--device: unknown {self.device!r}; use cpu, cuda or auto")
        if self.steps < 1 or self.batch_size < 1:
            raise GeodriftError(f"steps and batch size must be >= 1 (got {self.steps}, {self.batch_size})")


@dataclass(frozen=True)
class TrackConfig:
    """What the tracker measures and how often.

    Attributes:
        every: track every this many steps (plus step 0 = the first backward pass, the rotation
            reference step and the final step). ``0`` turns tracking off (the compute floor).
        null_draws: permutation-null draws per tracked quantity.
        ema_betas: gradient EMAs kept every step for the weight-gradient alignment (each costs one
            pass over the block weights per step; ``()`` turns them off).
        reference_step: step of the rotation-angle reference; ``None`` = one epoch (``epoch_steps``).
    """

    every: int = PAPER_EPOCH_STEPS
    null_draws: int = 8
    ema_betas: tuple[float, ...] = (0.9, 0.99, 0.999)
    reference_step: int | None = None


@dataclass(frozen=True)
class RunSpec:
    """One configuration of a preset (trained once per seed)."""

    label: str
    mlp: MLPConfig
    train: TrainConfig
    track: TrackConfig = field(default_factory=TrackConfig)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "mlp": asdict(self.mlp), "train": asdict(self.train),
                "track": asdict(self.track)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        track = dict(data["track"])
        track["ema_betas"] = tuple(track["ema_betas"])
        return cls(data["label"], MLPConfig(**data["mlp"]), TrainConfig(**data["train"]), TrackConfig(**track))


# ---- ablations: named functions config -> config -------------------------------------------
ABLATIONS: dict[str, Callable[[MLPConfig], MLPConfig]] = {
    "nores": lambda c: replace(c, residual=False),
    "ln": lambda c: replace(c, layernorm="pre"),
    "ln_post": lambda c: replace(c, layernorm="post"),
    "ln_branch": lambda c: replace(c, layernorm="branch"),
    **{act: (lambda a: (lambda c: replace(c, activation=a)))(act)
       for act in ("relu", "gelu", "silu", "tanh", "none", "radial")},
}


def apply_ablations(cfg: MLPConfig, names: list[str]) -> MLPConfig:
    """Apply named ablations in order; ``init=STD``, ``width=N``, ``depth=N``, ``act=NAME`` too.

    Raises:
        GeodriftError: on an unknown name.
    """
    for name in names:
        key, _, value = name.partition("=")
        try:
            if key in ABLATIONS and not value:
                cfg = ABLATIONS[key](cfg)
            elif key == "init" and value:
                cfg = replace(cfg, init_std=float(value))
            elif key == "width" and value:
                cfg = replace(cfg, width=int(value))
            elif key == "depth" and value:
                cfg = replace(cfg, depth=int(value))
            elif key == "act" and value:
                cfg = replace(cfg, activation=value)
            else:
                raise KeyError(name)
        except (KeyError, ValueError):
            raise GeodriftError(
                f"--ablation: unknown {name!r}; use {', '.join(ABLATIONS)}, init=STD, width=N, depth=N, act=NAME"
            ) from None
    return cfg


# ---- presets ---------------------------------------------------------------------------------
TABLE1_ROWS: tuple[tuple[str, MLPConfig], ...] = tuple(
    (c.name(), c) for c in (
        MLPConfig(activation="gelu"), MLPConfig(activation="silu"), MLPConfig(activation="relu"),
        MLPConfig(activation="tanh"), MLPConfig(activation="none"), MLPConfig(activation="radial"),
        MLPConfig(activation="none", layernorm="pre"), MLPConfig(activation="relu", layernorm="pre"),
        MLPConfig(residual=False, activation="gelu"), MLPConfig(residual=False, activation="relu"),
        MLPConfig(residual=False, activation="none"),
    )
)
_NO_EMA = TrackConfig(ema_betas=())


def _table1() -> list[RunSpec]:
    return [RunSpec(label, cfg, TrainConfig(), _NO_EMA) for label, cfg in TABLE1_ROWS]


def _table3() -> list[RunSpec]:
    base, b2 = TrainConfig(), TrainConfig(beta2=0.0, eps=1.0)
    return [
        RunSpec("Adam default", MLPConfig(), base, _NO_EMA),
        RunSpec("Adam β1=0, β2=.999", MLPConfig(), replace(base, beta1=0.0), _NO_EMA),
        RunSpec("Adam β1=.9, β2=0 (ε=1), default init", MLPConfig(), b2, _NO_EMA),
        RunSpec("β2=0, init std 0.005", MLPConfig(init_std=0.005), b2, _NO_EMA),
        RunSpec("β2=0, init std 0.001", MLPConfig(init_std=0.001), b2, _NO_EMA),
        RunSpec("β2=0, init std 0.0001", MLPConfig(init_std=1e-4), b2, _NO_EMA),
    ]


def _drift() -> list[RunSpec]:
    train = TrainConfig(steps=50 * PAPER_EPOCH_STEPS)
    return [RunSpec(f"{c.name()} init 1e-4", c, train, _NO_EMA)
            for c in (MLPConfig(activation="none", init_std=1e-4), MLPConfig(activation="relu", init_std=1e-4))]


def _ema() -> list[RunSpec]:
    return [RunSpec("Res+ReLU", MLPConfig(), TrainConfig(), TrackConfig())]


def _smoke() -> list[RunSpec]:
    train = TrainConfig(steps=30, batch_size=32, epoch_steps=10)
    track = TrackConfig(every=10, null_draws=4, ema_betas=(0.9, 0.99))
    return [RunSpec(c.name(), c, train, track)
            for c in (MLPConfig(width=32, depth=4), MLPConfig(width=32, depth=4, activation="none"))]


PRESETS: dict[str, Callable[[], list[RunSpec]]] = {
    "table1": _table1, "table3": _table3, "drift": _drift, "ema": _ema, "smoke": _smoke,
    "single": lambda: [RunSpec("Res+ReLU", MLPConfig(), TrainConfig(), TrackConfig())],
}
PRESET_SEEDS: dict[str, tuple[int, ...]] = {"smoke": (42,), "single": (42,)}


def preset(name: str) -> list[RunSpec]:
    """The run specs of a named preset.

    Raises:
        GeodriftError: on an unknown preset name.
    """
    if name not in PRESETS:
        raise GeodriftError(f"--preset: unknown {name!r}; use one of {', '.join(PRESETS)}")
    return PRESETS[name]()
