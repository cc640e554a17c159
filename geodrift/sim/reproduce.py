"""Reproduction presets: train every configuration for every seed, aggregate, and judge the claims.

``reproduce(name, ...)`` returns a ``Reproduction``: per configuration the mean +- std over seeds
of each column (``COLUMNS[preset]``), the paper's values beside them (``paper_reference``, a
reference column only) and one ``Verdict`` per claim. Criteria come from the theory's noise floors,
never from the paper's numbers:

- ``floor = sqrt(2 / (pi d))``: mean ``|cos|`` of random unit vectors in ``R^d``;
- ``noise = sqrt((1 - 2/pi) / d) / sqrt(L - 1)``: the standard deviation of Eq. 1 (a mean over
  ``L - 1`` adjacent pairs) for random vectors - 0.0097 for ``d = 256, L = 16``;
- a value is *coherent* when it exceeds ``floor + 5 noise`` and *near the floor* otherwise;
- ``A`` *exceeds* ``B`` when ``mean_A - mean_B > 5 max(pooled seed std, noise)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.metrics import random_baseline
from geodrift.sim.claims import Stat, Verdict, judge
from geodrift.sim.config import PAPER_SEEDS, PRESET_SEEDS, RunSpec, apply_ablations, preset
from geodrift.sim.data import load_dataset
from geodrift.sim.ensemble import run_spec
from geodrift.sim.paper_reference import PAPER, TABLE1_NOTES, PaperCell
from geodrift.sim.record import RunRecord

COLUMNS: dict[str, tuple[str, ...]] = {
    "table1": ("acc", "G v1", "G s2wa(v)", "Gcum v1", "W v1", "W s2wa(v)", "delta_gw", "W u1",
               "G0 v1", "rel_change"),
    "table3": ("acc", "G v1", "G s2wa(v)", "W v1", "W v2", "W s2wa(v)", "W u1", "rel_change"),
    "drift": ("acc", "acc min", "W v1 peak", "W v1", "G v1", "rotation_deg", "delta_gw"),
    "ema": ("acc", "W v1", "align G", "align Gcum", "align EMA0.9", "align EMA0.99", "align EMA0.999"),
}
DEFAULT_COLUMNS = ("acc", "G0 v1", "G v1", "G s2wa(v)", "Gcum v1", "W v1", "W s2wa(v)", "delta_gw", "W u1",
                   "rel_change", "rotation_deg")
COLUMN_TITLES = {"G s2wa(v)": "G σ²-WA", "W s2wa(v)": "W σ²-WA", "Gcum v1": "Ḡ v1", "delta_gw": "Δ_GW",
                 "G0 v1": "G v1 @step0", "rel_change": "‖ΔW‖/‖W0‖", "rotation_deg": "rot. (°)"}


@dataclass
class Reproduction:
    preset: str
    seeds: list[int]
    specs: list[RunSpec]
    records: list[RunRecord]
    columns: tuple[str, ...]
    stats: dict[str, dict[str, Stat]] = field(default_factory=dict)
    paper: dict[str, dict[str, PaperCell]] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    floor: float = float("nan")
    noise: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset, "seeds": self.seeds, "floor": self.floor, "noise": self.noise,
            "columns": list(self.columns),
            "configs": [{"label": s.label, "geodrift": {c: vars(st) for c, st in self.stats[s.label].items()},
                         "paper_reference": self.paper.get(s.label, {})} for s in self.specs],
            "verdicts": [vars(v) for v in self.verdicts], "notes": self.notes,
            "runs": [{"label": r.label, "seed": r.seed, "summary": r.summary, "timing": r.timing,
                      "status": r.status} for r in self.records],
        }


def noise_floor(d: int, layers: int) -> tuple[float, float]:
    """``(floor, noise)`` of Eq. 1 for random unit vectors in ``R^d`` over ``layers`` layers."""
    # E|cos| ~ sqrt(2/(pi d)); Var|cos| ~ (1 - 2/pi)/d; the layer mean averages L-1 pairs.
    return random_baseline(d), math.sqrt((1.0 - 2.0 / math.pi) / d) / math.sqrt(max(1, layers - 1))


def derived_summary(record: RunRecord) -> dict[str, float | None]:
    """The record's summary plus series-derived values (peak W v1; lowest test accuracy from epoch 1 on)."""
    out = dict(record.summary)
    w = [v for _, v in record.select("W", "cont", "v", 1)]
    # the dip of Fig. 2 is after training has started: ignore tracks before the first epoch
    start = record.config.get("train", {}).get("epoch_steps") or 1
    acc = [v for step, v in record.select("test", "acc") if step >= start]
    out["W v1 peak"] = max(w) if w else None
    out["acc min"] = min(acc) if acc else None
    return out


def aggregate(specs: list[RunSpec], records: list[RunRecord], columns: tuple[str, ...]
              ) -> dict[str, dict[str, Stat]]:
    """Mean +- std over seeds of each column, per configuration label."""
    out: dict[str, dict[str, Stat]] = {}
    for spec in specs:
        runs = [derived_summary(r) for r in records if r.label == spec.label]
        out[spec.label] = {c: Stat.of([run.get(c) for run in runs]) for c in columns}  # type: ignore[misc]
    return out


def build_specs(name: str, *, steps: int | None = None, epochs: float | None = None,
                track_every: int | None = None, device: str = "cpu",
                ablations: list[str] | None = None, checkpoint_every: int = 0) -> list[RunSpec]:
    """The preset's specs with command-line overrides applied (steps/epochs, interval, device, ablations).

    Raises:
        GeodriftError: unknown preset/ablation, or both steps and epochs given.
    """
    if steps is not None and epochs is not None:
        raise GeodriftError("--steps and --epochs: give one of them, not both")
    specs: list[RunSpec] = []
    for spec in preset(name):
        train, track, mlp = spec.train, spec.track, spec.mlp
        if steps is not None:
            train = replace(train, steps=steps)
        if epochs is not None:
            train = replace(train, steps=max(1, round(epochs * (train.epoch_steps or 1))))
        train = replace(train, device=device, checkpoint_every=checkpoint_every)
        if track_every is not None:
            track = replace(track, every=track_every)
        label = spec.label
        if ablations:
            mlp = apply_ablations(mlp, ablations)
            label = mlp.name() if spec.label == spec.mlp.name() else f"{spec.label} [{', '.join(ablations)}]"
        if any(s.label == label for s in specs):  # ablations can make two rows identical
            label = f"{label} #{len(specs) + 1}"
        specs.append(RunSpec(label, mlp, train, track))
    return specs


def reproduce(
    name: str,
    *,
    seeds: list[int] | None = None,
    steps: int | None = None,
    epochs: float | None = None,
    track_every: int | None = None,
    device: str = "cpu",
    out: str | None = None,
    resume: bool = False,
    batched: bool = False,
    data: str = "mnist5k",
    ablations: list[str] | None = None,
    checkpoint_every: int = 0,
    on_run: Callable[[str, int], None] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> Reproduction:
    """Train a preset for every seed and judge its claims.

    Args:
        name: preset name (``table1``, ``table3``, ``drift``, ``ema``, ``smoke``, ``single``).
        seeds: default 42, 123, 777 (one seed for ``smoke``/``single``).
        steps, epochs: override the step count (``epochs`` in units of the spec's ``epoch_steps``).
        track_every: override the tracking interval (0 = off).
        device, out, resume, batched, data, ablations: see ``geodrift simulate mlp --help``.
        on_run: called with ``(label, seed)`` before each run; on_step: progress per step.

    Returns:
        The Reproduction (records, aggregated stats, paper reference, verdicts, notes).

    Example:
        >>> rep = reproduce("smoke")  # doctest: +SKIP
    """
    seeds = list(seeds or PRESET_SEEDS.get(name, PAPER_SEEDS))
    specs = build_specs(name, steps=steps, epochs=epochs, track_every=track_every, device=device,
                        ablations=ablations, checkpoint_every=checkpoint_every)
    dataset = load_dataset(data)
    records: list[RunRecord] = []
    for spec in specs:
        if on_run is not None:
            on_run(spec.label, seeds[0])
        records += run_spec(spec, seeds, dataset, batched=batched, out=out, resume=resume, preset=name,
                            on_step=on_step)
    return assemble(name, specs, records, seeds, data_note=_data_note(dataset.name, len(dataset.y_train), specs))


def assemble(name: str, specs: list[RunSpec], records: list[RunRecord], seeds: list[int],
             data_note: str = "") -> Reproduction:
    """Aggregate records into a Reproduction (also used to re-render saved records)."""
    columns = COLUMNS.get(name, DEFAULT_COLUMNS)
    floor, noise = noise_floor(specs[0].mlp.width, specs[0].mlp.depth)
    rep = Reproduction(name, seeds, specs, records, columns, aggregate(specs, records, columns),
                       PAPER.get(name, {}), floor=floor, noise=noise)
    rep.verdicts = judge(name, rep.stats, {s.label: derived_summary_runs(records, s.label) for s in specs},
                         floor, noise)
    train = specs[0].train
    rep.notes.append(
        f"{train.steps} optimiser steps per run (paper: 20 epochs of 60k MNIST at batch 128 = 9380 steps; "
        f"time axis in epochs of {train.epoch_steps} steps); seeds {', '.join(map(str, seeds))}.")
    if data_note:
        rep.notes.append(data_note)
    rep.notes.append(f"Noise floor of Eq. 1 for d={specs[0].mlp.width}, L={specs[0].mlp.depth}: random "
                     f"{floor:.4f}, sd of the layer mean {noise:.4f}; 'coherent' = above {floor + 5 * noise:.3f}.")
    rep.notes.append("G and σ²-WA columns use the mini-batch gradient at the last step (the paper does not "
                     "say when its gradient columns were sampled); 'G v1 @step0' is the first backward pass.")
    if name == "table1":
        rep.notes.append(TABLE1_NOTES)
    partial = [f"{r.label}/seed{r.seed}" for r in records if r.status != "complete"]
    if partial:
        rep.notes.append(f"Incomplete runs (resume with --resume): {', '.join(partial)}")
    return rep


def derived_summary_runs(records: list[RunRecord], label: str) -> list[dict[str, float | None]]:
    return [derived_summary(r) for r in records if r.label == label]


def _data_note(name: str, n_train: int, specs: list[RunSpec]) -> str:
    train = specs[0].train
    passes = train.steps * train.batch_size / max(1, n_train)
    return (f"Data: {name} ({n_train} training images); each run makes {passes:.1f} passes over it "
            "(the paper: 20 passes over 60k MNIST).")
