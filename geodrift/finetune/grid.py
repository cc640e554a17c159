"""The forgetting grid: which runs answer the question, as presets.

``full`` (``benchmarks/bench_forgetting.py``): the embedded SmolLM2-135M fully fine-tuned for 24 steps of
2 x 128 tokens on three shifted domains and the in-domain control, at two learning rates - 8 runs, 3 checkpoints
each (24 measured points) - with 32 probe windows, the domain's held-out windows (up to 24), a 4-window
Taylor / EWC baseline, and single-layer reverts (8 windows) on the higher learning rate's runs; only each run's final
checkpoint is kept on disk (the merge stage reads it). ``toy``: the same shape, two corpora, one learning rate,
a few steps and windows (the script's own check). ``tiny`` takes a model path (the tests' small Llama).

Example:
    >>> [s.label for s in grid_specs("toy")]
    ['stdlib-docs lr0.0005 full', 'django-de lr0.0005 full']
"""

from __future__ import annotations

from geodrift.errors import GeodriftError
from geodrift.finetune.spec import PROBE_CORPUS, FinetuneSpec

SHIFTED = ("django-de", "django-ja", "sympy-code")
CONTROL = PROBE_CORPUS
LEARNING_RATES = (1e-4, 5e-4)
PRESETS = ("full", "toy", "tiny")


def grid_specs(preset: str, model: str | None = None) -> list[FinetuneSpec]:
    """The runs of a preset: the higher learning rate first (its runs carry the reverts and the merges, so a grid
    cut short still answers the per-layer question), the control first within each rate.

    Raises:
        GeodriftError: an unknown preset.
    """
    if preset == "full":
        return [FinetuneSpec(corpus=c, lr=lr, steps=24, model=model, checkpoints=(8, 16, 24), probe_windows=32,
                             domain_windows=24, taylor_windows=4, reverts=lr == max(LEARNING_RATES),
                             revert_windows=8, keep="final")
                for lr in sorted(LEARNING_RATES, reverse=True) for c in (CONTROL, *SHIFTED)]
    if preset == "toy":
        return [FinetuneSpec(corpus=c, lr=5e-4, steps=2, model=model, checkpoints=(1, 2), probe_windows=4,
                             domain_windows=4, taylor_windows=2, reverts=True, revert_windows=2, keep="final")
                for c in (CONTROL, "django-de")]
    if preset == "tiny":
        return [FinetuneSpec(corpus=c, lr=lr, steps=3, model=model, checkpoints=(1, 2, 3), seq_len=16, probe_windows=6,
                             domain_windows=4, taylor_windows=2, reverts=lr == 3e-3, revert_windows=3, keep="final")
                for lr in (1e-3, 3e-3) for c in (CONTROL, "django-de", "sympy-code")]
    raise GeodriftError(f"--preset {preset!r}: use {', '.join(PRESETS)}")
