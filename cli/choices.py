"""The command line's closed choices as ``str`` Enums (Typer's pattern): ``--help`` lists them, click refuses
any other value with one line naming the option, and no command checks them by hand.

This module imports nothing but the standard library and ``geodrift.compress.table`` (itself the standard library
only), so ``geodrift --help`` stays fast (no torch). The
values are the library's own names (``tests/test_cli_choices.py`` checks each Enum against the list the
library accepts), and a member is a ``str``: the library receives it as the plain name.

Example:
    >>> View("folded") == "folded", f"--view {View.raw}", [p.value for p in TransformerPreset]
    (True, '--view raw', ['paper', 'cpu', 'mid', 'tiny'])
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from geodrift.compress.table import DEFAULT_PRUNE_SAVE, DEFAULT_SAVE, METHODS, RANKINGS, enum_member, names


class Choice(str, Enum):
    """A closed choice: compares, hashes, prints and formats as its value (``str(View.raw) == "raw"``)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)


class View(Choice):
    """``--view``: the stored weights, the norm gains folded into the projections, or each layer at the
    canonical point of its gauge orbit (``geodrift.scanner.canonical_view``)."""

    raw = "raw"
    folded = "folded"
    canonical = "canonical"


class HeadMaps(Choice):
    """``compare/drift --head-maps``: the per-head V/O and Q/K maps ``--align`` fits
    (``geodrift.gauge.align.DEFAULT_HEAD_MAPS`` says why orthogonal is the default)."""

    orthogonal = "orthogonal"
    general = "general"
    none = "none"


class TrackView(Choice):
    """``simulate transformer --view``: the tracked projections as trained, or at the canonical point of their
    gauge orbit (``geodrift.sim.canonical``)."""

    raw = "raw"
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


def _method_choice(name: str, methods: tuple[str, ...], doc: str) -> type[Choice]:
    # A Choice whose members are the method table's names (geodrift.compress.table: no name is spelled here).
    choice = Choice(name, {enum_member(m): m for m in methods}, module=__name__, qualname=name)  # type: ignore[call-overload]
    choice.__doc__ = doc
    return choice  # type: ignore[no-any-return]


if TYPE_CHECKING:  # to a type checker each is a Choice; at run time, an Enum of exactly the table's names
    PruneMethod = ShareMethod = Choice
else:
    PruneMethod = _method_choice("PruneMethod", names(RANKINGS),
                                 "``compress prune --save-method`` (``geodrift.compress.table.RANKINGS``).")
    ShareMethod = _method_choice("ShareMethod", names(METHODS),
                                 "``compress share --save-method`` (``geodrift.compress.table.METHODS``).")
# The option texts and defaults the compress commands declare, read from the method table here so that the
# commands' only library entry is their job (tests/test_layering.py).
RANKING_NAMES, METHOD_NAMES = ", ".join(RANKINGS), ", ".join(METHODS)
DEFAULT_PRUNE_SAVE_METHOD, DEFAULT_SHARE_SAVE_METHOD = PruneMethod(DEFAULT_PRUNE_SAVE), ShareMethod(DEFAULT_SAVE)


class SaveFormat(Choice):
    """``compress share --save-format``: low-rank factors (shared bases once), or dense weights."""

    factored = "factored"
    dense = "dense"


class SaveDtype(Choice):
    """``compress share --save-dtype``: the dtype of the saved tensors (``geodrift.compress.factorized.DTYPES``)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class MergeMethod(Choice):
    """``merge --method`` (``geodrift.merging.names.METHODS``)."""

    linear = "linear"
    slerp = "slerp"
    task_arithmetic = "task-arithmetic"
    ties = "ties"
    dare = "dare"


class AlignMode(Choice):
    """``merge --align`` (``geodrift.merging.names.ALIGN_MODES``)."""

    auto = "auto"
    on = "on"
    off = "off"
