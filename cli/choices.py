"""The command line's closed choices as ``str`` Enums (Typer's pattern): ``--help`` lists them, click refuses
any other value with one line naming the option, and no command checks them by hand.

This module imports nothing but the standard library, so ``geodrift --help`` stays fast (no torch). The
values are the library's own names (``tests/test_cli_choices.py`` checks each Enum against the list the
library accepts), and a member is a ``str``: the library receives it as the plain name.

Example:
    >>> View("folded") == "folded", f"--view {View.raw}", [p.value for p in TransformerPreset]
    (True, '--view raw', ['paper', 'cpu', 'mid', 'tiny'])
"""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """A closed choice: compares, hashes, prints and formats as its value (``str(View.raw) == "raw"``)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)


class View(Choice):
    """``--view``: the stored weights, the norm gains folded into the projections, or each layer at the
    canonical point of its gauge orbit (``geodrift.scan.canonical_view``)."""

    raw = "raw"
    folded = "folded"
    canonical = "canonical"


class Backend(Choice):
    """``--backend``: where a sweep's runs execute (``geodrift.sweep.runner.BACKENDS``)."""

    local = "local"
    ray = "ray"


class Device(Choice):
    """``--device``: where a simulator trains (``auto``: CUDA when available)."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class MLPPreset(Choice):
    """``simulate mlp --preset`` (``geodrift.sim.presets.PRESETS["mlp"]``)."""

    table1 = "table1"
    table3 = "table3"
    drift = "drift"
    ema = "ema"
    appf = "appf"
    datasize = "datasize"
    smoke = "smoke"
    single = "single"


class TransformerPreset(Choice):
    """``simulate transformer --preset`` (``geodrift.sim.presets.PRESETS["transformer"]``)."""

    paper = "paper"
    cpu = "cpu"
    mid = "mid"
    tiny = "tiny"


class Tokenizer(Choice):
    """``simulate transformer --tokenizer``: BPE trained on the training split, or raw bytes."""

    bpe = "bpe"
    bytes = "bytes"


class PruneMethod(Choice):
    """``compress prune --save-method`` (``geodrift.compress.prune.METHODS``)."""

    geom_v1 = "geom-v1"
    geom_s2wa = "geom-s2wa"
    block_influence = "block-influence"
    angular = "angular"
    greedy = "greedy"


class ShareMethod(Choice):
    """``compress share --save-method`` (``geodrift.compress.methods.METHODS``)."""

    svd_llm = "svd-llm"
    svd_llm_v2 = "svd-llm-v2"
    basis_sharing = "basis-sharing"
    prune_bi = "prune-bi"
    prune_greedy = "prune-greedy"
    theory = "theory"
    geodrift = "geodrift"
    laco = "laco"
    geodrift_random_groups = "geodrift:random-groups"
    geodrift_swapped = "geodrift:swapped"
    geodrift_loss_allocation = "geodrift:loss-allocation"
    geodrift_no_refit = "geodrift:no-refit"


class SaveFormat(Choice):
    """``compress share --save-format``: low-rank factors (shared bases once), or dense weights."""

    factored = "factored"
    dense = "dense"


class SaveDtype(Choice):
    """``compress share --save-dtype``: the dtype of the saved tensors (``geodrift.compress.factorized.DTYPES``)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
