"""What ``geodrift simulate``, ``geodrift sweep`` and ``geodrift reproduce`` run, as one typed spec built once.

:class:`Overrides` are the command-line changes to a preset (``--steps``, ``--track-every``,
``--ablation``, ``--data``, ``--tokenizer``, ``--vocab``); :meth:`Experiment.of` applies them to
every configuration of the preset and fixes the seeds. The command line fills these two, and the
library (``geodrift.sim.reproduce.reproduce``, ``geodrift.sweep.grid.preset_grid``,
``geodrift.reproduction``) consumes the :class:`Experiment` as it is: its run specs are built in
this module only.

Example:
    >>> exp = Experiment.of("mlp", "smoke", overrides=Overrides(steps=5, ablations=("gelu",)))
    >>> [s.label for s in exp.specs], exp.specs[0].train.steps, exp.seeds
    (['Res+GELU', 'Res+GELU #2'], 5, [42])
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geodrift.sim.config import ImageData, RunSpec, TextData, ablate
from geodrift.sim.presets import preset, preset_seeds
from geodrift.sim.simulator import Simulator, simulator


@dataclass(frozen=True)
class Overrides:
    """Changes applied to every configuration of a preset (None / empty: the preset's own value).

    Attributes:
        steps: optimiser steps per run.
        track_every: tracking interval in steps (0 = off).
        ablations: applied to every configuration's model, in order (``geodrift.sim.config.ablate``).
        data: the MLP's data set name or path, or the transformer's corpus path.
        tokenizer, vocab: the transformer's tokenizer (``bpe`` or ``bytes``) and BPE vocabulary size.
        view: the tracking view (``raw`` or ``canonical``; ``geodrift.sim.config.TrackConfig.view``).
    """

    steps: int | None = None
    track_every: int | None = None
    ablations: tuple[str, ...] = ()
    data: str | None = None
    tokenizer: str | None = None
    vocab: int | None = None
    view: str | None = None

    def apply(self, spec: RunSpec) -> RunSpec:
        """``spec`` with these overrides; an ablated spec is relabelled (``Simulator.ablated_label``).

        Raises:
            GeodriftError: an unknown ablation or field, or a value of the wrong type.
        """
        train = replace(spec.train, steps=self.steps) if self.steps is not None else spec.train
        track = replace(spec.track, every=self.track_every) if self.track_every is not None else spec.track
        track = replace(track, view=self.view) if self.view is not None else track
        data: ImageData | TextData = spec.data
        if self.data is not None:
            data = ImageData(self.data) if isinstance(data, ImageData) else replace(data, corpus=self.data)
        if isinstance(data, TextData):
            data = replace(data, tokenizer=self.tokenizer or data.tokenizer,
                           vocab=data.vocab if self.vocab is None else self.vocab)
        model, label = spec.model, spec.label
        if self.ablations:
            model = ablate(model, list(self.ablations))
            label = simulator(spec.sim).ablated_label(spec, model, list(self.ablations))
        return RunSpec(spec.sim, label, model, data, train, track)


def build_specs(sim: str, name: str, overrides: Overrides | None = None) -> list[RunSpec]:
    """The preset's run specs with ``overrides`` applied (labels kept distinct).

    Raises:
        GeodriftError: unknown simulator, preset, ablation or field.
    """
    specs: list[RunSpec] = []
    for spec in preset(sim, name):
        changed = (overrides or Overrides()).apply(spec)
        if any(s.label == changed.label for s in specs):  # ablations can make two rows identical
            changed = replace(changed, label=f"{changed.label} #{len(specs) + 1}")
        specs.append(changed)
    return specs


@dataclass(frozen=True)
class Experiment:
    """A simulator's named set of run specs and the seeds each runs with (a preset, or a sweep's grid).

    Attributes:
        sim: the simulator (``mlp`` or ``transformer``).
        name: the preset's (or the sweep's) name, stored as the records' ``preset``.
        specs: one per configuration, labels distinct.
        seeds: every spec runs once per seed.
    """

    sim: str
    name: str
    specs: list[RunSpec]
    seeds: list[int]

    @classmethod
    def of(cls, sim: str, name: str, seeds: list[int] | None = None,
           overrides: Overrides | None = None) -> Experiment:
        """Preset ``name`` of simulator ``sim`` with ``overrides``, for ``seeds`` (default: the preset's).

        Raises:
            GeodriftError: unknown simulator, preset, ablation or field.
        """
        return cls(sim, name, build_specs(sim, name, overrides), list(seeds or preset_seeds(sim, name)))

    @property
    def simulator(self) -> Simulator:
        """The simulator object of :attr:`sim`."""
        return simulator(self.sim)

    def total_steps(self, batched: bool = False) -> int:
        """Optimiser steps over every run (a batched ensemble counts once, ``Simulator.seed_groups``)."""
        groups = len(self.simulator.seed_groups(self.seeds, batched))
        return sum(s.train.steps for s in self.specs) * groups
