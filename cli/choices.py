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
    """``--view``: the stored weights, or the norm gains folded into the projections."""

    raw = "raw"
    folded = "folded"


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


class SharePolicy(Choice):
    """``compress share --save-policy`` (``geodrift.compress.share.POLICIES``)."""

    theory = "theory"
    swapped = "swapped"
    basis_sharing = "basis-sharing"
    all_input = "all-input"
    svd = "svd"
