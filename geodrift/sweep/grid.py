"""Sweep jobs: one run (a RunSpec and one seed) each, from a preset or from a grid file.

A grid file (``.toml`` or ``.json``) names the simulator, the seeds, optionally data sets and step
counts, and the configurations; the sweep is their product (configuration x data x steps x seed)::

    sim = "mlp"                 # or "transformer"
    name = "relu-vs-none"       # the sweep's name (stored as the records' preset)
    seeds = [42, 123]
    data = ["mnist5k", "digits"]  # optional: every configuration on every data set
    steps = [938, 9380]           # optional: every configuration at every step count

    [[configs]]
    label = "Res+ReLU"            # optional (default: the base's label, or the MLP's paper name)
    base = "smoke"                # optional: the preset whose first spec is the starting point
                                  # (default: every MLP default - a Table 1 row - or the cpu transformer)
    model = { activation = "relu" }      # fields of MLPConfig / LlamaConfig
    train = { lr = 0.001 }               # fields of TrainConfig
    track = { every = 469 }              # fields of TrackConfig
    ablations = ["nores"]                # named ablations, applied after `model`
    data = "digits"                      # optional: this configuration's data set

    [[configs]]
    model = { activation = "none" }

Or ``preset = "table1"`` instead of (or besides) ``configs``: that preset's rows. With more than one
data set or step count, each label gets `` [data]`` / `` N steps`` appended. The whole file is
checked before any run starts (:mod:`geodrift.sweep.grid_check`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.finetune.spec import FinetuneSpec
from geodrift.sim.config import (
    SIMULATORS,
    ImageData,
    LlamaConfig,
    MLPConfig,
    RunSpec,
    TextData,
    TrackConfig,
    TrainConfig,
    ablate,
)
from geodrift.sim.experiment import Experiment
from geodrift.sim.presets import data_label, preset
from geodrift.sim.record import slug
from geodrift.sim.simulator import simulator
from geodrift.sweep.grid_check import (
    MAX_JOBS,
    check_field,
    check_seeds,
    check_size,
    read_grid_file,
)

_GRID_KEYS = {"sim", "name", "seeds", "data", "steps", "configs", "preset"}
_CONFIG_KEYS = {"label", "base", "model", "train", "track", "ablations", "data"}


@dataclass(frozen=True)
class Job:
    """One independent run: a configuration, one seed, and the sweep (preset) it belongs to.

    Two kinds: a simulator run (``spec`` a :class:`~geodrift.sim.config.RunSpec`) and a fine-tuning run (``spec`` a
    :class:`~geodrift.finetune.spec.FinetuneSpec`, ``seed`` its ``spec.seed``; :func:`geodrift.sweep.execute.execute`
    dispatches on ``spec.to_dict()["kind"]``).
    """

    spec: RunSpec | FinetuneSpec
    seed: int
    preset: str
    folder: str = ""  # a sub-folder of --out holding this job's records (several presets in one sweep)

    @property
    def key(self) -> str:
        """``[<folder>/]<slug(label)>/seed<N>``: the run's folder under ``--out``."""
        return f"{self.folder + '/' if self.folder else ''}{slug(self.spec.label)}/seed{self.seed}"


@dataclass(frozen=True)
class Grid(Experiment):
    """A sweep: an :class:`~geodrift.sim.experiment.Experiment` run as independent jobs."""

    @property
    def jobs(self) -> list[Job]:
        """One job per spec and seed (spec-major)."""
        return [Job(spec, seed, self.name) for spec in self.specs for seed in self.seeds]


def preset_grid(experiment: Experiment) -> Grid:
    """A preset's experiment (its overrides applied, see ``Experiment.of``) as a sweep of one job per run."""
    return Grid(experiment.sim, experiment.name, experiment.specs, experiment.seeds)


def load_grid(path: str | Path) -> Grid:
    """Read a grid file (see the module docstring).

    Raises:
        GeodriftError: unreadable file, unknown keys or fields, bad values, duplicate labels.
    """
    path = Path(path)
    where = f"GRID {path}"
    return grid_from_dict(read_grid_file(path, where), where)


def grid_from_dict(payload: Any, where: str = "grid") -> Grid:
    """The :class:`Grid` of a parsed grid file (see :func:`load_grid`)."""
    if not isinstance(payload, dict):
        raise GeodriftError(f"{where}: the grid must be a table (a JSON object)")
    unknown = set(payload) - _GRID_KEYS
    if unknown:
        raise GeodriftError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; use {', '.join(sorted(_GRID_KEYS))}")
    sim = payload.get("sim", "mlp")
    if sim not in SIMULATORS:
        raise GeodriftError(f"{where}: sim = {sim!r}; use mlp or transformer")
    name = check_field("name", payload.get("name", "grid"), "str", f"{where}:")
    seeds = check_seeds(payload.get("seeds", [42]), f"{where}: seeds")
    base: list[RunSpec] = _preset(sim, payload["preset"], f"{where}: preset") if "preset" in payload else []
    configs = payload.get("configs", [])
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise GeodriftError(f"{where}: configs must be a list of tables ([[configs]])")
    base += [_config_spec(sim, c, f"{where}: configs[{i}]") for i, c in enumerate(configs)]
    if not base:
        raise GeodriftError(f"{where}: no configuration; add [[configs]] tables or preset = NAME")
    datas = [simulator(sim).check_data(d, f"{where}: data") for d in _str_list(payload["data"], f"{where}: data")] \
        if "data" in payload else None
    steps = [check_field("steps", n, "int", f"{where}:") for n in _int_list(payload["steps"], f"{where}: steps")] \
        if "steps" in payload else None
    runs = len(base) * len(datas or [None]) * len(steps or [None]) * len(seeds)
    if runs > MAX_JOBS:
        raise GeodriftError(f"{where}: {runs} runs (configurations x data x steps x seeds) is more than the "
                            f"{MAX_JOBS} a sweep takes; split the grid")
    specs = []
    for spec in base:
        for d in ([None] if datas is None else datas):
            for n in ([None] if steps is None else steps):
                label, data, train = spec.label, spec.data, spec.train
                if d is not None:
                    data = ImageData(d) if isinstance(data, ImageData) else replace(data, corpus=d)
                    label = data_label(label, d) if datas is not None and len(datas) > 1 else label
                if n is not None:
                    train = replace(train, steps=n)
                    label = f"{label} {n} steps" if steps is not None and len(steps) > 1 else label
                specs.append(RunSpec(sim, label, spec.model, data, train, spec.track))
    for spec in specs:
        vocab = spec.data.vocab if isinstance(spec.data, TextData) and spec.data.tokenizer == "bpe" else 256
        check_size(spec.model, vocab, f"{where}: {spec.label!r}")
    labels = [s.label for s in specs]
    duplicated = sorted({lab for lab in labels if labels.count(lab) > 1})
    if duplicated:
        raise GeodriftError(f"{where}: two configurations share the label {duplicated[0]!r}; give each a label")
    return Grid(sim, name, specs, seeds)


def _config_spec(sim: str, entry: dict[str, Any], where: str) -> RunSpec:
    unknown = set(entry) - _CONFIG_KEYS
    if unknown:
        raise GeodriftError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; use {', '.join(sorted(_CONFIG_KEYS))}")
    start = _preset(sim, entry["base"], f"{where}.base")[0] if "base" in entry else simulator(sim).default_spec()
    model = _replace(start.model, entry.get("model", {}), f"{where}.model")
    ablations = _str_list(entry.get("ablations", []), f"{where}.ablations")
    if ablations:
        try:
            model = ablate(model, ablations)
        except GeodriftError as error:
            raise GeodriftError(f"{where}.ablations: {error}") from None
    train: TrainConfig = _replace(start.train, entry.get("train", {}), f"{where}.train")
    track: TrackConfig = _replace(start.track, entry.get("track", {}), f"{where}.track")
    default = model.name() if isinstance(model, MLPConfig) else start.label
    label = check_field("label", entry.get("label", default), "str", where)
    if "label" not in entry and isinstance(model, LlamaConfig) and (entry.get("model") or ablations):
        label = f"{start.label}+{'+'.join([*ablations, *(f'{k}={v}' for k, v in entry.get('model', {}).items())])}"
    data = start.data
    if "data" in entry:
        name = simulator(sim).check_data(_str_list(entry["data"], f"{where}.data")[0], f"{where}.data")
        data = ImageData(name) if isinstance(data, ImageData) else replace(data, corpus=name)
    return RunSpec(sim, label, model, data, train, track)


def _replace(obj: Any, values: Any, where: str) -> Any:
    if not isinstance(values, dict):
        raise GeodriftError(f"{where}: expected a table of field = value")
    types = {f.name: str(f.type) for f in fields(obj)}
    unknown = set(values) - set(types)
    if unknown:
        raise GeodriftError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; use {', '.join(sorted(types))}")
    values = {key: check_field(key, value, types[key], where) for key, value in values.items()}
    if "activation" in values and isinstance(obj, MLPConfig):
        from geodrift.lm.activations import get_activation

        try:
            get_activation(values["activation"])
        except GeodriftError as error:
            raise GeodriftError(f"{where}.activation: {error}") from None
    try:
        return replace(obj, **values)
    except (TypeError, GeodriftError) as error:
        raise GeodriftError(f"{where}: {error}") from None


def _preset(sim: str, name: Any, where: str) -> list[RunSpec]:
    if not isinstance(name, str):
        raise GeodriftError(f"{where}: expected a preset name, got {name!r}")
    try:
        return preset(sim, name)
    except GeodriftError as error:
        raise GeodriftError(f"{where}: {error}") from None


def _int_list(value: Any, where: str) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise GeodriftError(f"{where}: expected an integer or a list of integers, got {value!r}")
    return list(values)


def _str_list(value: Any, where: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in values):
        raise GeodriftError(f"{where}: expected a string or a list of strings, got {value!r}")
    return list(values)
