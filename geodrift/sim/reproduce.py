"""Reproduction presets for both simulators: train every configuration for every seed, aggregate, judge.

``reproduce(experiment, ...)`` returns a :class:`Reproduction`: per configuration the mean +- std
over seeds of each column (``Simulator.columns``), the paper's values beside them
(``geodrift.sim.reference``, a reference column only) and one ``Verdict`` per claim, each with its
criterion. Criteria come from the noise floors, never from the paper's numbers:

- ``floor = sqrt(2 / (pi d))``: mean ``|cos|`` of random unit vectors in ``R^d``;
- ``noise = sqrt((1 - 2/pi) / d) / sqrt(L - 1)``: the standard deviation of Eq. 1 (a mean over
  ``L - 1`` adjacent pairs) for random vectors - 0.0097 for ``d = 256, L = 16``;
- MLP claims: ``coherent`` / ``exceeds`` of ``geodrift.continuity.verdicts.Judge``;
- transformer claims: the theory's prediction per projection, tested on every seed's final report,
  twice: a shared frame (``geodrift.continuity.verdicts.projection_verdict``, against each space's
  permutation null: Eq. 1, the paper's claim) and a depth path (``path_verdict``: nearby layers agree
  more than far ones).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geodrift.continuity.verdicts import Judge, Stat, Verdict, spearman
from geodrift.errors import GeodriftError
from geodrift.metrics import random_baseline
from geodrift.sim.config import LlamaConfig, RunSpec
from geodrift.sim.experiment import Experiment
from geodrift.sim.presets import preset
from geodrift.sim.record import RunRecord
from geodrift.sim.reference import (
    PAPER,
    PAPER_BY_ARCHITECTURE,
    PAPER_TABLE2,
    PAPER_TABLE2_SPACE,
    TABLE1_NOTES,
    PaperCell,
    paper_row,
)
from geodrift.sim.run import RunResult, StepStatus, default_batched, load_results, run_seeds
from geodrift.sim.simulator import Simulator, simulator
from geodrift.weights import ROLE_LABELS

COLUMN_TITLES = {"W v1 null": "W v1 null", "G erank": "G erank", "train acc": "train acc", "G s2wa(v)": "G σ²-WA", "W s2wa(v)": "W σ²-WA", "Gcum v1": "Ḡ v1", "delta_gw": "Δ_GW",
                 "G0 v1": "G v1 @step0", "rel_change": "‖ΔW‖/‖W0‖", "rotation_deg": "rot. (°)",
                 **{f"final {r} {s}1": f"{ROLE_LABELS[r]} {s}1" for r, s in PAPER_TABLE2_SPACE.items()}}


@dataclass
class Reproduction:
    """A preset's runs over seeds, aggregated and judged."""

    sim: str
    preset: str
    seeds: list[int]
    specs: list[RunSpec]
    results: list[RunResult]
    columns: tuple[str, ...]
    stats: dict[str, dict[str, Stat]] = field(default_factory=dict)
    paper: dict[str, dict[str, PaperCell]] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    floor: float = float("nan")
    noise: float = float("nan")

    @property
    def records(self) -> list[RunRecord]:
        return [r.record for r in self.results]

    @property
    def simulator(self) -> Simulator:
        """The simulator object of :attr:`sim` (what the tables and figures ask instead of comparing names)."""
        return simulator(self.sim)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sim": self.sim, "preset": self.preset, "seeds": self.seeds, "floor": self.floor, "noise": self.noise,
            "columns": list(self.columns),
            "configs": [{"label": s.label, "geodrift": {c: vars(st) for c, st in self.stats[s.label].items()},
                         "paper_reference": self.paper.get(s.label, {})} for s in self.specs],
            "verdicts": [vars(v) for v in self.verdicts], "notes": self.notes,
            "runs": [{"label": r.record.label, "seed": r.record.seed, "path": str(r.path) if r.path else None,
                      "summary": r.record.summary, "timing": r.record.timing, "status": r.record.status,
                      "report": r.report.to_dict()} for r in self.results],
        }


def noise_floor(d: int, layers: int) -> tuple[float, float]:
    """``(floor, noise)`` of Eq. 1 for random unit vectors in ``R^d`` over ``layers`` layers."""
    # E|cos| ~ sqrt(2/(pi d)); Var|cos| ~ (1 - 2/pi)/d; the layer mean averages L-1 pairs.
    return random_baseline(d), math.sqrt((1.0 - 2.0 / math.pi) / d) / math.sqrt(max(1, layers - 1))


def reproduce(experiment: Experiment, *, batched: bool | None = None, device: str = "auto", out: str | None = None,
              resume: bool = False, checkpoint_every: int = 0, save_hf_every: int = 0,
              on_run: Callable[[str, int], None] | None = None, on_step: Callable[[StepStatus], None] | None = None,
              on_stage: Callable[[str], None] | None = None) -> Reproduction:
    """Train every spec of ``experiment`` for every seed and judge its claims.

    Args:
        experiment: the preset, its overrides applied, and its seeds (``Experiment.of``).
        batched: train the seeds as one ensemble where the simulator can (default: only on CUDA).
        device, out, resume, checkpoint_every, save_hf_every: see :func:`geodrift.sim.run.run`.
        on_run: called with ``(label, seed)`` before each group; on_step: after each step
            (:class:`geodrift.sim.run.StepStatus`); on_stage: before slow start-up work, with a message.

    Returns:
        The Reproduction (results, aggregated stats, paper reference, verdicts, notes).

    Example:
        >>> rep = reproduce(Experiment.of("mlp", "smoke"))  # doctest: +SKIP
    """
    seeds = experiment.seeds
    batched = default_batched(device) if batched is None else batched
    results: list[RunResult] = []
    stage = {"on_stage": on_stage} if on_stage is not None else {}
    for spec in experiment.specs:
        if on_run is not None:
            on_run(spec.label, seeds[0])
        results += run_seeds(spec, seeds, batched=batched, out=out, resume=resume, device=device,
                             checkpoint_every=checkpoint_every, preset=experiment.name, on_step=on_step,
                             save_hf_every=save_hf_every, **stage)
    return assemble(experiment.sim, experiment.name, experiment.specs, results, seeds)


def assemble(sim: str, name: str, specs: list[RunSpec], results: list[RunResult], seeds: list[int]) -> Reproduction:
    """Aggregate results into a Reproduction (also used to re-render saved runs)."""
    columns = simulator(sim).columns(name)
    floor, noise = noise_floor(specs[0].model.d_model, specs[0].model.n_layers)
    summaries = {s.label: [_derived(r.record) for r in results if r.record.label == s.label] for s in specs}
    stats = {label: {c: Stat.of([run.get(c) for run in runs]) for c in columns} for label, runs in summaries.items()}
    rep = Reproduction(sim, name, seeds, specs, results, columns, stats, floor=floor, noise=noise)
    train = specs[0].train
    if rep.simulator.per_projection:  # the paper's Table 2: one claim per projection of the final report
        rep.paper = {s.label: _table2(s) for s in specs}
        rep.verdicts = _projection_claims(specs, results)
        rep.notes.append(f"{train.steps} optimiser steps per run; seeds {', '.join(map(str, seeds))}; "
                         f"data: {results[0].record.data}.")
    else:
        rep.paper = PAPER.get(name, {})
        if name in PAPER_BY_ARCHITECTURE:
            by_arch = PAPER_BY_ARCHITECTURE[name]
            rep.paper = {s.label: by_arch.get(s.label.split(" [")[0], {}) for s in specs}
        rep.verdicts = _mlp_claims(name, Judge(stats, summaries, floor, noise))
        rep.notes.append(
            f"{train.steps} optimiser steps per run (paper: 20 epochs of 60k MNIST at batch 128 = 9380 steps; "
            f"time axis in epochs of {train.epoch_steps} steps); seeds {', '.join(map(str, seeds))}; "
            f"data: {', '.join(sorted({r.record.data for r in results}))}.")
        rep.notes.append("G and σ²-WA columns use the mini-batch gradient at the last step (the paper does not "
                         "say when its gradient columns were sampled); 'G v1 @step0' is the first backward pass.")
        if name == "table1":
            rep.notes.append(TABLE1_NOTES)
    rep.notes.append(f"Noise floor of Eq. 1 for d={specs[0].model.d_model}, L={specs[0].model.n_layers}: random "
                     f"{floor:.4f}, sd of the layer mean {noise:.4f}; 'coherent' = above {floor + 5 * noise:.3f}. "
                     "Every tracked similarity also carries its permutation null (in the records).")
    partial = [f"{r.record.label}/seed{r.record.seed}" for r in results if r.record.status != "complete"]
    if partial:
        rep.notes.append(f"Incomplete runs (resume with --resume): {', '.join(partial)}")
    return rep


GATE_DROP_CRITERION = ("Gate v1's excess over its permutation null, mean over seeds, is lower without the MLP "
                       "activation by more than 5·max(pooled seed std, layer-mean noise) (holds); higher by more "
                       "than that (fails); otherwise tie")


def gate_drop_verdict(with_act: Reproduction, without: Reproduction) -> Verdict:
    """The paper's one direct ablation (claim 11): removing the MLP activation lowers Gate's input-space continuity.

    Compares the first configuration of two transformer reproductions (e.g. ``--preset mid`` and the
    same with ``--ablation none``) by each seed's final Gate v1 minus its permutation-null mean.

    Args:
        with_act, without: transformer reproductions (the activation kept / removed).

    Returns:
        A ``Verdict`` (``holds``, ``fails`` or ``tie``; criterion :data:`GATE_DROP_CRITERION`).

    Raises:
        GeodriftError: when either reproduction is not a transformer's.
    """
    if not (with_act.simulator.per_projection and without.simulator.per_projection):
        raise GeodriftError("gate_drop_verdict: needs two transformer reproductions")
    col = "final mlp_gate v1"

    def excess(rep: Reproduction) -> tuple[Stat, Stat]:
        runs = [r.record.summary for r in rep.results if r.record.label == rep.specs[0].label]
        pairs = [(r.get(col), r.get(f"{col} null")) for r in runs]
        return (Stat.of([v for v, _ in pairs]),
                Stat.of([v - n if v is not None and n is not None else None for v, n in pairs]))

    (kept, kept_x), (gone, gone_x) = excess(with_act), excess(without)
    margin = Judge({}, {}, with_act.floor, with_act.noise).margin(kept_x, gone_x)
    drop = kept_x.mean - gone_x.mean
    verdict = "holds" if drop > margin else "fails" if drop < -margin else "tie"
    measured = (f"Gate v1 {kept.mean:.3f} → {gone.mean:.3f} (excess over the null {kept_x.mean:+.3f} → "
                f"{gone_x.mean:+.3f}; margin {margin:.3f}; seeds {', '.join(map(str, with_act.seeds))})")
    return Verdict(f"Removing the MLP activation lowers Gate v1 ({with_act.specs[0].label} → "
                   f"{without.specs[0].label}; paper 0.662 → 0.366)", GATE_DROP_CRITERION, measured, verdict)


def reload_reproduction(sim: str, out: str | Path) -> Reproduction:
    """Re-assemble the runs of simulator ``sim`` saved under ``out`` (no training).

    Raises:
        GeodriftError: when ``out`` holds no finished run of ``sim``.
    """
    results = [r for r in load_results(out) if r.record.config.get("sim") == sim]
    if not results:
        raise GeodriftError(f"--reload: no {sim} run (run.json + report.json) under {out}; run without --reload first")
    specs: dict[str, RunSpec] = {}
    for r in results:
        specs.setdefault(r.record.label, RunSpec.from_dict(r.record.config))
    name = results[0].record.preset or "custom"
    try:  # keep the preset's row order
        order = [s.label for s in preset(sim, name)]
    except GeodriftError:
        order = []
    ranked = sorted(specs.values(), key=lambda s: order.index(s.label) if s.label in order else len(order))
    rank = {s.label: i for i, s in enumerate(ranked)}
    results.sort(key=lambda r: (rank[r.record.label], r.record.seed))  # training's order (seeds ascending)
    return assemble(sim, name, ranked, results, sorted({r.record.seed for r in results}))


def _derived(record: RunRecord) -> dict[str, float | None]:
    # The record's summary plus series-derived values (peak W v1; lowest test accuracy from epoch 1 on).
    out = dict(record.summary)
    w = [v for _, v in record.select("W", "block", "cont", "v", 1)]
    start = record.config.get("train", {}).get("epoch_steps") or 1  # the dip of Fig. 2 is after epoch 1
    acc = [v for step, v in record.select("test", None, "acc") if step >= start]
    out["W v1 peak"] = max(w) if w else None
    out["acc min"] = min(acc) if acc else None
    return out


def _table2(spec: RunSpec) -> dict[str, PaperCell]:
    assert isinstance(spec.model, LlamaConfig)
    row = PAPER_TABLE2.get(paper_row(spec.model) or "", {})
    out: dict[str, PaperCell] = {f"final {r} {s}1": row[r] for r, s in PAPER_TABLE2_SPACE.items() if r in row}
    if "ppl" in row:
        out["ppl"] = f"{row['ppl']} (GPT-2 tokens, WikiText-103: not comparable)"
    return out


def _projection_claims(specs: list[RunSpec], results: list[RunResult]) -> list[Verdict]:
    # Two claims per projection: a shared frame (Eq. 1, the paper's claim) and a depth path, on every seed.
    out = []
    for spec in specs:
        runs = [r for r in results if r.record.label == spec.label]
        for role in PAPER_TABLE2_SPACE:
            found = [(r.record.seed, rr, r.report.trajectory) for r in runs if (rr := r.report.role(role)) is not None]
            if not found:
                continue
            first = found[0][1]
            space = {"v": "input space (v1)", "u": "output space (u1)", None: "neither space"}[first.predicted_space]
            # V is predicted to have neither: its claims say so ("has no frame"), not "shares a frame in neither space"
            measured = "; ".join(
                f"seed {seed}: v1 {rr.spaces['v'].vectors[0].mean:.3f} (null {rr.spaces['v'].vectors[0].null_mean:.3f}, "
                f"z {rr.spaces['v'].vectors[0].z:.0f}), u1 {rr.spaces['u'].vectors[0].mean:.3f} "
                f"(null {rr.spaces['u'].vectors[0].null_mean:.3f}, z {rr.spaces['u'].vectors[0].z:.0f})"
                for seed, rr, _ in found)
            frame_claim, path_claim = (f"shares a frame across layers in {space} (Eq. 1, the paper's claim)",
                                       f"follows a depth path in {space}") if first.predicted_space else (
                "has no frame across layers in either space (Eq. 1, the paper's claim)", "has no depth path in either space")
            out.append(Verdict(f"{spec.label}: {first.label} {frame_claim}", f"on every seed: {first.criterion}", measured,
                               _on_every_seed([rr.verdict for _, rr, _ in found])))
            order = "; ".join(f"seed {seed}: " + ", ".join(
                f"{t.space}1 layer-order z {t.order_z:.1f} (p {t.order_p:.2g})" for t in shapes if t.role == role)
                for seed, _, shapes in found)
            out.append(Verdict(f"{spec.label}: {first.label} {path_claim}",
                               f"on every seed: {first.path_criterion}", order or "no trajectory measured",
                               _on_every_seed([rr.path_verdict for _, rr, _ in found])))
    return out


def _on_every_seed(verdicts: list[str]) -> str:
    # holds only if every seed holds; n/a when no seed could be judged (e.g. too few layers for a path).
    judged = [v for v in verdicts if v in ("holds", "fails")]
    if not judged:
        return "n/a"
    return "holds" if len(judged) == len(verdicts) and all(v == "holds" for v in judged) else "fails"


def _mlp_claims(preset_name: str, j: Judge) -> list[Verdict]:
    # The paper's toy-MLP claims (section 4), each from Judge primitives.
    thr = f"{j.threshold:.3f}"
    coh = f"coherent (> {thr}, null excess > {5 * j.noise:.3f})"
    ex = "by more than 5·max(seed std, noise)"
    if preset_name == "table1":
        j.add("Condition 1: with a residual, gradients are coherent at the first backward pass",
              f"Res+ReLU G v1 at step 0 {coh} while W v1 at step 0 is not",
              [("Res+ReLU", "G0 v1"), ("Res+ReLU", "W0 v1")],
              j.coherent("Res+ReLU", "G0 v1") and not j.coherent("Res+ReLU", "W0 v1"))
        nores = [("NoRes+GELU", "G v1"), ("NoRes+ReLU", "G v1"), ("NoRes+None", "G v1")]
        j.add("No residual, no gradient coherence", f"no NoRes G v1 is {coh}", nores,
              not any(j.coherent(*p) for p in nores))
        j.add("Residual alone is not enough (Res+None)",
              f"Res+None G v1 {coh} and Res+ReLU W v1 exceeds Res+None W v1 {ex}",
              [("Res+None", "G v1"), ("Res+ReLU", "W v1"), ("Res+None", "W v1")],
              j.coherent("Res+None", "G v1") and j.exceeds(("Res+ReLU", "W v1"), ("Res+None", "W v1")))
        j.add("Coherence lost between Ḡ and W without a symmetry breaker (Δ_GW)",
              f"Δ_GW of Res+None and of Res+Radial each exceed Res+ReLU's {ex}",
              [("Res+None", "delta_gw"), ("Res+Radial", "delta_gw"), ("Res+ReLU", "delta_gw")],
              j.exceeds(("Res+None", "delta_gw"), ("Res+ReLU", "delta_gw"))
              and j.exceeds(("Res+Radial", "delta_gw"), ("Res+ReLU", "delta_gw")))
        rad = [("Res+ReLU", "W v1"), ("Res+Radial", "W v1"), ("Res+None", "W v1")]
        j.add("Symmetry, not nonlinearity: the rotation-equivariant Radial behaves like None",
              f"Res+ReLU W v1 exceeds Res+Radial W v1 {ex}, and Radial is closer to None than to ReLU", rad,
              j.exceeds(rad[0], rad[1])
              and abs(j.s(*rad[1]).mean - j.s(*rad[2]).mean) < abs(j.s(*rad[1]).mean - j.s(*rad[0]).mean))
        acts = [("Res+GELU", "W v1"), ("Res+SiLU", "W v1"), ("Res+ReLU", "W v1"), ("Res+None", "W v1")]
        j.add("Element-wise activations (GELU, SiLU, ReLU) all transfer coherence to weights",
              f"each of GELU/SiLU/ReLU W v1 exceeds Res+None W v1 {ex}", acts,
              all(j.exceeds(a, acts[3]) for a in acts[:3]))
        j.add("Tanh keeps v1 but kills u1", f"Res+Tanh W v1 {coh}, W u1 not",
              [("Res+Tanh", "W v1"), ("Res+Tanh", "W u1")],
              j.coherent("Res+Tanh", "W v1") and not j.coherent("Res+Tanh", "W u1"))
        j.add("LayerNorm partly breaks the symmetry without an activation",
              f"Res+None+LN W v1 exceeds Res+None W v1 {ex}", [("Res+None+LN", "W v1"), ("Res+None", "W v1")],
              j.exceeds(("Res+None+LN", "W v1"), ("Res+None", "W v1")))
        res_labels = [lab for lab in j.stats if lab.startswith("Res+")]
        best = max(res_labels, key=lambda lab: j.s(lab, "W s2wa(v)").mean, default="")
        j.add("LayerNorm distributes: Res+None+LN has the highest W σ²-WA of the Res configurations",
              "Res+None+LN W σ²-WA is the largest among Res+* (ordering only)", [("Res+None+LN", "W s2wa(v)")],
              best == "Res+None+LN", [j.fmt("Res+None+LN", "W s2wa(v)"), f"largest: {best}"])
        j.add("NoRes+ReLU: output-space u1 above input-space v1",
              f"NoRes+ReLU W u1 {coh} and exceeds its W v1 {ex}",
              [("NoRes+ReLU", "W u1"), ("NoRes+ReLU", "W v1")],
              j.coherent("NoRes+ReLU", "W u1") and j.exceeds(("NoRes+ReLU", "W u1"), ("NoRes+ReLU", "W v1")))
    elif preset_name == "table3":
        b2 = "Adam β1=.9, β2=0 (ε=1), default init"
        j.add("‖ΔW‖/‖W0‖ small (β2=0, ε=1): gradients coherent, weights not",
              f"G v1 {coh} and W v1 near the floor", [(b2, "G v1"), (b2, "W v1")],
              j.coherent(b2, "G v1") and not j.coherent(b2, "W v1"))
        small = "β2=0, init std 0.0001"
        j.add("Shrinking the init restores transfer", f"W v1 at init std 1e-4 exceeds W v1 at default init {ex}",
              [(small, "W v1"), (b2, "W v1")], j.exceeds((small, "W v1"), (b2, "W v1")))
        chain = [b2, "β2=0, init std 0.005", "β2=0, init std 0.001", small]
        pairs = [(lab, col) for lab in chain for col in ("W v1", "rel_change")]
        shown = None
        test = False
        if j.have(*pairs):
            rc = [j.s(lab, "rel_change").mean for lab in chain]
            wv = [j.s(lab, "W v1").mean for lab in chain]
            test = spearman(rc, wv) > 0
            shown = [f"{lab}: ‖ΔW‖/‖W0‖ {r:.3g}, W v1 {w:.3f}" for lab, r, w in zip(chain, rc, wv, strict=True)]
        j.add("‖ΔW‖/‖W0‖ controls transfer", "Spearman rank correlation of ‖ΔW‖/‖W0‖ and W v1 over the β2=0 rows > 0",
              pairs, test, shown)
        j.add("Adam β1=0 barely matters", f"Adam β1=0 W v1 stays {coh}",
              [("Adam β1=0, β2=.999", "W v1")], j.coherent("Adam β1=0, β2=.999", "W v1"))
    elif preset_name == "drift":
        none, relu = "Res+None init 1e-4", "Res+ReLU init 1e-4"
        peak, fin = j.s(none, "W v1 peak").mean, j.s(none, "W v1").mean
        j.add("Res+None: weight continuity rises then collapses (drift)",
              f"peak W v1 {coh} and final excess over the floor below half the peak's",
              [(none, "W v1 peak"), (none, "W v1")], peak > j.threshold and (fin - j.floor) < 0.5 * (peak - j.floor))
        j.add("Res+ReLU: weight continuity stays", f"final W v1 {coh}", [(relu, "W v1")], j.coherent(relu, "W v1"))
        a, b = j.s(none, "rotation_deg"), j.s(relu, "rotation_deg")
        stds = [x.std for x in (a, b) if x.std == x.std]
        margin = 5 * max(math.sqrt(sum(x * x for x in stds) / len(stds)) if stds else 0.0, 1.0)
        j.add("Res+None layers rotate further than Res+ReLU layers",
              "mean final rotation from the epoch-1 reference: None exceeds ReLU by 5·max(seed std, 1°)",
              [(none, "rotation_deg"), (relu, "rotation_deg")], a.mean - b.mean > margin)
    elif preset_name == "appf":
        datas = sorted({lab.split(" [")[1].rstrip("]") for lab in j.stats if " [" in lab})
        versus = [((f"Res+ReLU [{d}]", "W v1"), (f"{other} [{d}]", "W v1")) for d in datas
                  for other in ("Res+None", "NoRes+ReLU")]
        j.add("App. F: on every data set, Res+ReLU's weight continuity exceeds Res+None's and NoRes+ReLU's",
              f"for each data set, Res+ReLU W v1 exceeds each other architecture's {ex}",
              [p for pair in versus for p in pair], all(j.exceeds(a, b) for a, b in versus))
        relus = [(f"Res+ReLU [{d}]", "W v1") for d in datas]
        rest = [(f"{o} [{d}]", "W v1") for d in datas for o in ("Res+None", "NoRes+ReLU")]
        lowest = min((j.s(*p).mean for p in relus), default=float("nan"))
        highest = max((j.s(*p).mean for p in rest), default=float("nan"))
        j.add("App. F: architecture dominates the data set (and its gradient rank)",
              "the lowest Res+ReLU W v1 over the data sets exceeds the highest W v1 of the other architectures",
              relus + rest, lowest > highest, [f"lowest Res+ReLU W v1 {lowest:.3f}", f"highest other {highest:.3f}"])
    elif preset_name == "datasize":
        counts = sorted({int(lab.rsplit(" ", 2)[-2]) for lab in j.stats if lab.endswith(" steps")})
        for n in counts:
            more, base = (f"Res+ReLU [mnist5k-aug60k] {n} steps", "W v1"), (f"Res+ReLU [mnist5k] {n} steps", "W v1")
            j.add(f"More distinct images raise Res+ReLU's weight continuity ({n} steps)",
                  f"W v1 on mnist5k-aug60k exceeds W v1 on mnist5k {ex}", [more, base], j.exceeds(more, base))
            keep = (f"Res+None [mnist5k-aug60k] {n} steps", "Gcum v1")
            j.add(f"Without memorisation Res+None's cumulative gradient stays coherent ({n} steps)",
                  f"Res+None Ḡ v1 on mnist5k-aug60k {coh}", [keep], j.coherent(*keep))
        n, datas = counts[-1], sorted({lab.split(" [")[1].split("]")[0] for lab in j.stats if " [" in lab})
        versus = [((f"Res+ReLU [{d}] {n} steps", "W v1"), (f"Res+RadialRMS [{d}] {n} steps", "W v1")) for d in datas]
        j.add(f"Symmetry, not nonlinearity: a rotation-equivariant activation that is not the identity here "
              f"(x·tanh(‖x‖/√d)) stays below ReLU ({n} steps)",
              f"on every data set, Res+ReLU W v1 exceeds Res+RadialRMS W v1 {ex}", [p for pair in versus for p in pair],
              all(j.exceeds(a, b) for a, b in versus))
        if len(counts) > 1:
            longer, shorter = ((f"Res+ReLU [mnist5k-aug60k] {n} steps", "W v1") for n in (counts[-1], counts[0]))
            j.add("On data that is not memorised, Res+ReLU's weight continuity rises with training",
                  f"W v1 on mnist5k-aug60k at {counts[-1]} steps exceeds W v1 at {counts[0]} steps {ex}",
                  [longer, shorter], j.exceeds(longer, shorter))
    elif preset_name == "ema":
        j.add("Weight v1 aligns with the long-term gradient average",
              f"align(W v1, EMA0.999 v1) exceeds align(W v1, raw G v1) {ex}",
              [("Res+ReLU", "align EMA0.999"), ("Res+ReLU", "align G")],
              j.exceeds(("Res+ReLU", "align EMA0.999"), ("Res+ReLU", "align G")))
    return j.out
