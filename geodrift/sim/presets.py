"""Named presets: the paper's experiments (and the fast ones) as lists of run specs, with their default seeds.

``preset(sim, name)`` returns the run specs of a preset (one per configuration); ``preset_seeds`` the
seeds it runs by default. The vocabulary the specs are made of (``MLPConfig``, ``LlamaConfig``,
``TrainConfig``, ...) lives in :mod:`geodrift.sim.config`; this module only chooses values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from geodrift.errors import GeodriftError
from geodrift.sim.config import (
    PAPER_EPOCH_STEPS,
    PAPER_SEEDS,
    SIMULATORS,
    ImageData,
    LlamaConfig,
    MLPConfig,
    RunSpec,
    TextData,
    TrackConfig,
    TrainConfig,
)

# ---- presets ---------------------------------------------------------------------------------
TABLE1_ROWS: tuple[MLPConfig, ...] = (
    MLPConfig(activation="gelu"), MLPConfig(activation="silu"), MLPConfig(activation="relu"),
    MLPConfig(activation="tanh"), MLPConfig(activation="none"), MLPConfig(activation="radial"),
    MLPConfig(activation="none", norm="pre"), MLPConfig(activation="relu", norm="pre"),
    MLPConfig(residual=False, activation="gelu"), MLPConfig(residual=False, activation="relu"),
    MLPConfig(residual=False, activation="none"),
)
_EMA = TrackConfig(ema_betas=(0.9, 0.99, 0.999))


def _mlp(label: str, model: MLPConfig, train: TrainConfig | None = None, track: TrackConfig | None = None) -> RunSpec:
    return RunSpec("mlp", label, model, ImageData(), train or TrainConfig(), track or TrackConfig())


def _table3() -> list[RunSpec]:
    b2 = TrainConfig(beta2=0.0, eps=1.0)
    return [
        _mlp("Adam default", MLPConfig()),
        _mlp("Adam β1=0, β2=.999", MLPConfig(), TrainConfig(beta1=0.0)),
        _mlp("Adam β1=.9, β2=0 (ε=1), default init", MLPConfig(), b2),
        _mlp("β2=0, init std 0.005", MLPConfig(init_std=0.005), b2),
        _mlp("β2=0, init std 0.001", MLPConfig(init_std=0.001), b2),
        _mlp("β2=0, init std 0.0001", MLPConfig(init_std=1e-4), b2),
    ]


APPF_ROWS: tuple[MLPConfig, ...] = (MLPConfig(), MLPConfig(activation="none"), MLPConfig(residual=False))
APPF_DATA: tuple[str, ...] = ("mnist5k", "digits")  # every data set available offline (+ any --data)
DATASIZE_DATA: tuple[str, ...] = ("digits", "mnist5k", "mnist5k-aug60k")
DATASIZE_STEPS: tuple[int, ...] = (2 * PAPER_EPOCH_STEPS, 5 * PAPER_EPOCH_STEPS, 20 * PAPER_EPOCH_STEPS)  # 938, 2345, 9380 (the paper's)


def data_label(label: str, data: str) -> str:
    """A grid row's label: the configuration and its data set, e.g. ``Res+ReLU [digits]``."""
    return f"{label} [{data}]"


def _appf(extra: tuple[str, ...] = ()) -> list[RunSpec]:
    # App. F: the three toy architectures on every data set (the paper: six image sets).
    return [RunSpec("mlp", data_label(c.name(), d), c, ImageData(d), TrainConfig(), TrackConfig())
            for d in (*APPF_DATA, *extra) for c in APPF_ROWS]


def _datasize() -> list[RunSpec]:
    # The MLP gap experiment: distinct training images x optimiser steps, three symmetry cases.
    rows = (MLPConfig(), MLPConfig(activation="none"), MLPConfig(activation="radial"),
            MLPConfig(activation="radial_rms"))
    return [RunSpec("mlp", f"{data_label(c.name(), d)} {n} steps", c, ImageData(d), TrainConfig(steps=n),
                    TrackConfig()) for n in DATASIZE_STEPS for d in DATASIZE_DATA for c in rows]


def _smoke() -> list[RunSpec]:
    train = TrainConfig(steps=30, batch_size=32, epoch_steps=10)
    track = TrackConfig(every=10, null_draws=4, ema_betas=(0.9, 0.99), final_k=4, final_null_draws=8)
    return [_mlp(c.name(), c, train, track)
            for c in (MLPConfig(d_model=32, n_layers=4), MLPConfig(d_model=32, n_layers=4, activation="none"))]


# The transformer presets. The paper (section 5.1) states D 256, 8 layers, 4 heads, sequence 128,
# batch 128, 10k steps, init N(0, 0.02^2); it does not state optimiser, learning rate, schedule,
# weight decay, d_ff, tying or positional encoding: AdamW 3e-4, betas 0.9/0.95, wd 0.1, warm-up then
# cosine to 10%, clipping 1.0, untied, RoPE are standard LLM practice, chosen here.
_LLAMA_TRAIN = TrainConfig(optimizer="adamw", lr=3e-4, beta1=0.9, beta2=0.95, weight_decay=0.1, batch_size=128,
                           steps=10_000, schedule="cosine", warmup_steps=100, min_lr_ratio=0.1, grad_clip=1.0,
                           epoch_steps=None)


def _transformer(label: str, model: LlamaConfig, data: TextData, train: TrainConfig, track: TrackConfig) -> RunSpec:
    return RunSpec("transformer", label, model, data, train, track)


PRESETS: dict[str, dict[str, Callable[[], list[RunSpec]]]] = {
    "mlp": {
        "table1": lambda: [_mlp(c.name(), c) for c in TABLE1_ROWS],
        "table3": _table3,
        "drift": lambda: [_mlp(f"{c.name()} init 1e-4", c, TrainConfig(steps=50 * PAPER_EPOCH_STEPS))
                          for c in (MLPConfig(activation="none", init_std=1e-4),
                                    MLPConfig(activation="relu", init_std=1e-4))],
        "ema": lambda: [_mlp("Res+ReLU", MLPConfig(), track=_EMA)],
        "appf": _appf,
        "datasize": _datasize,
        "smoke": _smoke,
        "single": lambda: [_mlp("Res+ReLU", MLPConfig(), track=_EMA)],
    },
    "transformer": {
        "paper": lambda: [_transformer("paper", LlamaConfig(), TextData(), _LLAMA_TRAIN,
                                       TrackConfig(every=250, k=1, null_draws=8, eval_every=1000))],
        # The paper's architecture family shrunk to show the per-projection pattern on a 2-core machine
        # (about 3 minutes on one free core).
        "cpu": lambda: [_transformer(
            "cpu", LlamaConfig(d_model=128, n_heads=4, d_ff=512), TextData(vocab=2048, seq_len=64, eval_windows=128),
            replace(_LLAMA_TRAIN, lr=1e-3, batch_size=16, steps=600, warmup_steps=30),
            TrackConfig(every=50, k=1, null_draws=8, eval_every=200))],
        # The paper's width (D 256, 8 layers, 4 heads, d_ff 1024) with the local tokenizer, sized for a
        # few CPU hours per run at full length; run shorter with --steps (the README states the count).
        "mid": lambda: [_transformer(
            "mid", LlamaConfig(), TextData(vocab=2048, seq_len=64, eval_windows=128),
            replace(_LLAMA_TRAIN, lr=6e-4, batch_size=16, steps=3000, warmup_steps=60),
            TrackConfig(every=100, k=1, null_draws=8, eval_every=500))],
        # For tests (seconds).
        "tiny": lambda: [_transformer(
            "tiny", LlamaConfig(d_model=32, n_layers=3, n_heads=2, d_ff=64),
            TextData(tokenizer="bytes", vocab=256, max_chars=60_000, seq_len=32, eval_windows=8),
            replace(_LLAMA_TRAIN, lr=3e-3, batch_size=8, steps=30, warmup_steps=5),
            TrackConfig(every=10, k=1, null_draws=4, eval_every=15, final_k=4, final_null_draws=5))],
    },
}
PRESET_SEEDS: dict[str, dict[str, tuple[int, ...]]] = {
    "mlp": {"smoke": (42,), "single": (42,)},
    "transformer": {"paper": (42,), "cpu": (42,), "mid": (42,), "tiny": (42,)},
}


def preset(sim: str, name: str) -> list[RunSpec]:
    """The run specs of a named preset of simulator ``sim``.

    Raises:
        GeodriftError: on an unknown simulator or preset name.
    """
    if sim not in SIMULATORS:
        raise GeodriftError(f"simulator: unknown value {sim!r}; choose one of {', '.join(SIMULATORS)}")
    if name not in PRESETS[sim]:
        raise GeodriftError(f"--preset: unknown {name!r} for simulate {sim}; use one of {', '.join(PRESETS[sim])}")
    return PRESETS[sim][name]()


def preset_seeds(sim: str, name: str) -> tuple[int, ...]:
    """The default seeds of a preset (the paper's 42, 123, 777 unless the preset says otherwise)."""
    return PRESET_SEEDS[sim].get(name, PAPER_SEEDS)
