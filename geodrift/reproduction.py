"""The whole reproduction in one call: proofs, the embedded scan, every simulator preset through the sweep runner,
and the compression experiments.

``reproduce_paper(mode, out, ...)`` runs, in order:

1. the symbolic proofs and their numeric twins (``geodrift.prove.run_claims``);
2. the scan of the embedded SmolLM2-135M (``geodrift.scan``), k = 8, 100 null draws, then its eight
   predictions in the raw (the paper's metric), folded and canonical (gauge-invariant) views side by side
   (:func:`geodrift.scanner.views.compare_views`; the raw scan is reused), beside the paper's Llama-3.1-8B values;
3. every simulator section of :func:`plan` as one sweep (``geodrift.sweep``; all runs of all
   presets share the pool), each section's records under ``<out>/runs/<section>/``;
4. the compression sections of :func:`compress_plan` on the embedded SmolLM2-135M, loaded once:
   ``geodrift compress prune`` (the paper's pruning corollary) and ``geodrift compress share`` (its
   shared-basis corollary), each judged by its own criteria.

Modes: ``full`` (the README's commands: hours on 2 cores), ``quick`` (shorter runs, one seed, reduced
compression; about 30 minutes on the shared 2-core CPU), ``smoke`` (seconds per run; for tests).
Each section keeps the equivalent ``geodrift`` command, so every number in the report says how to
re-run it alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from geodrift.compress.prune import PruneResult, PruneSpec
from geodrift.compress.share_run import ShareResult, ShareSpec
from geodrift.compress.table import METHODS, RANKINGS, names
from geodrift.continuity import MeasureSpec, Report
from geodrift.errors import GeodriftError
from geodrift.io.provenance import git_dirty, git_revision, load_average, stamp
from geodrift.prove import run_claims
from geodrift.prove.runner import ProveReport
from geodrift.scanner.scan import load_weights, scan
from geodrift.scanner.views import VIEW_ORDER, ViewComparison, compare_views
from geodrift.sim.experiment import Experiment, Overrides
from geodrift.sim.reference import PAPER_TABLE2
from geodrift.sim.reproduce import Reproduction, gate_drop_verdict
from geodrift.sweep.execute import SweepStatus
from geodrift.sweep.grid import Job, preset_grid
from geodrift.sweep.runner import run_sweep, sweep_reproduction

MODES = ("full", "quick", "smoke")
__all__ = ["MODES", "CompressPlan", "PaperReproduction", "Section", "SimSection", "ViewComparison", "compress_plan", "plan",
           "reproduce_command", "reproduce_paper", "run_compression"]


@dataclass(frozen=True)
class SimSection:
    """One simulator preset of the reproduction, with its overrides."""

    key: str  # folder and anchor: table1, appf, transformer-none, ...
    title: str
    sim: str
    preset: str
    seeds: tuple[int, ...]
    steps: int | None = None
    ablations: tuple[str, ...] = ()

    def experiment(self) -> Experiment:
        """The preset with this section's overrides, for its seeds (what :meth:`command` runs)."""
        return Experiment.of(self.sim, self.preset, list(self.seeds), Overrides(steps=self.steps,
                                                                                ablations=self.ablations))

    def command(self, out: str) -> str:
        """The stand-alone ``geodrift simulate`` command behind this section's numbers."""
        parts = [f"geodrift simulate {self.sim} --preset {self.preset}", f"--seeds {','.join(map(str, self.seeds))}"]
        if self.steps is not None:
            parts.append(f"--steps {self.steps}")
        parts += [f"--ablation {a}" for a in self.ablations]
        return " ".join([*parts, f"--out {out}/runs/{self.key} --resume --workers 2"])


@dataclass
class Section:
    """One part of the report: what ran, its command, and its result (or why there is none)."""

    key: str
    title: str
    kind: str  # proofs | scan | views | sim | compress
    command: str
    result: ProveReport | Report | ViewComparison | Reproduction | PruneResult | ShareResult | None = None
    note: str = ""
    seconds: float | None = None  # wall time; for a simulator section the sum of its runs' wall times
    runs: int = 0  # simulator runs behind the section


@dataclass
class PaperReproduction:
    """Everything :func:`reproduce_paper` produced, with its provenance (:func:`geodrift.io.provenance.stamp`)."""

    mode: str
    sections: list[Section]
    seconds: float
    stamp: dict[str, Any]
    extras: dict[str, Any] = field(default_factory=dict)


def plan(mode: str) -> list[SimSection]:
    """The simulator sections of a mode (see the module docstring).

    Raises:
        GeodriftError: on an unknown mode.
    """
    if mode not in MODES:
        raise GeodriftError(f"--mode {mode!r}: use one of {', '.join(MODES)}")
    seeds3, one = (42, 123, 777), (42,)
    if mode == "smoke":
        return [SimSection("mlp-smoke", "MLP smoke preset", "mlp", "smoke", one),
                SimSection("transformer-tiny", "Transformer tiny preset", "transformer", "tiny", one)]
    ablations = (("", "Transformer (cpu preset): SwiGLU"), ("none", "Transformer: no MLP activation"),
                 ("linear_attn", "Transformer test (a): linear attention"),
                 ("v_silu", "Transformer test (b): SiLU on V"))
    if mode == "quick":
        mlp = [SimSection("table1", "Table 1 (+ Table 5 columns)", "mlp", "table1", one, 469),
               SimSection("table3", "Table 3", "mlp", "table3", one, 469),
               SimSection("drift", "Drift (Fig. 2)", "mlp", "drift", one, 938),
               SimSection("ema", "Table 4 (EMA alignment)", "mlp", "ema", one, 469),
               SimSection("appf", "App. F", "mlp", "appf", one, 469)]
        llama = [SimSection(f"transformer-{a or 'silu'}", t, "transformer", "cpu", one, 150, (a,) if a else ())
                 for a, t in ablations]
        return llama + mlp
    mlp = [SimSection("table1", "Table 1 (+ Table 5 columns), 938 steps", "mlp", "table1", seeds3, 938),
           SimSection("table1-9380", "Table 1 at the paper's 9,380 steps", "mlp", "table1", one),
           SimSection("table3", "Table 3", "mlp", "table3", one, 938),
           SimSection("drift", "Drift (Fig. 2)", "mlp", "drift", one, 4690),
           SimSection("ema", "Table 4 (EMA alignment)", "mlp", "ema", one),
           SimSection("appf", "App. F", "mlp", "appf", seeds3, 938),
           SimSection("appf-9380", "App. F at the paper's 9,380 steps", "mlp", "appf", one),
           SimSection("datasize", "Data-size experiment", "mlp", "datasize", one)]
    llama = [SimSection(f"transformer-{a or 'silu'}", t, "transformer", "cpu", (42, 43), None, (a,) if a else ())
             for a, t in ablations]
    mid = [SimSection("mid-silu", "mid transformer: SwiGLU", "transformer", "mid", (42, 43)),
           SimSection("mid-none", "mid transformer: no MLP activation", "transformer", "mid", (42, 43), None,
                      ("none",))]
    return mid + llama + mlp


@dataclass(frozen=True)
class CompressPlan:
    """The compression sections of a mode: ``compress prune`` then ``compress share`` on one loaded model.

    Attributes:
        prune, share: the two experiments' specs (``share`` None: not run in this mode).
        seq_len, calib_windows, eval_windows: prune's text windows (the command's options; the defaults are its).
        share_calib_windows, share_eval_windows: share's (its own defaults: whitening needs more calibration text).
    """

    prune: PruneSpec
    share: ShareSpec | None
    seq_len: int = 128
    calib_windows: int = 4
    eval_windows: int = 8
    share_calib_windows: int = 24
    share_eval_windows: int = 64

    def command(self, kind: str) -> str:
        """The stand-alone ``geodrift compress prune|share`` command behind a section's numbers."""
        spec: PruneSpec | ShareSpec = self.prune if kind == "prune" else self.share or ShareSpec()
        default = PruneSpec() if kind == "prune" else ShareSpec()
        # The window fields' defaults are the commands' defaults.
        mine = ("seq_len", "calib_windows", "eval_windows") if kind == "prune" else \
            ("seq_len", "share_calib_windows", "share_eval_windows")
        windows = {f.name.removeprefix("share_"): (getattr(self, f.name), f.default) for f in fields(self)
                   if f.name in mine}
        changed = {f.name: (getattr(spec, f.name), getattr(default, f.name)) for f in fields(spec)} | windows
        parts = [f"geodrift compress {kind}"]
        for name, (value, was) in changed.items():
            if value != was:
                text = ",".join(map(str, value)) if isinstance(value, tuple) else str(0 if value is None else value)
                parts.append(f"--{name.replace('_', '-')} {text}")
        return " ".join(parts)


def compress_plan(mode: str) -> CompressPlan:
    """The compression experiments of a mode: the commands' defaults in ``full`` (the README's numbers);
    ``quick``: n = 1..4 without the greedy search on 4 held-out windows; five compression methods at 20 %
    on 8; ``smoke``: a 2-layer prune on short windows, no compression (its calibration pass and
    factorisations alone take minutes).

    Raises:
        GeodriftError: on an unknown mode.
    """
    if mode not in MODES:
        raise GeodriftError(f"--mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "full":
        return CompressPlan(PruneSpec(), ShareSpec())
    if mode == "quick":
        return CompressPlan(PruneSpec(max_remove=4, methods=names(RANKINGS, preset=mode)),
                            ShareSpec(ratios=(0.2,), methods=names(METHODS, preset=mode), verdict_ratio=None),
                            eval_windows=4, share_calib_windows=12, share_eval_windows=8)
    return CompressPlan(PruneSpec(max_remove=2, methods=names(RANKINGS, preset=mode), random_seeds=2,
                                  null_draws=10), None, seq_len=32, calib_windows=2, eval_windows=2)


def run_compression(mode: str, threads: int = 1,
                    on_stage: Callable[[str], None] = lambda message: None) -> list[Section]:
    """The compression sections of ``mode`` on the embedded SmolLM2-135M (loaded once for both).

    Args:
        mode: see :func:`compress_plan`; threads: torch CPU threads meanwhile (restored after).

    Returns:
        Two sections, ``compress-prune`` and ``compress-share`` (the latter with a note and no result
        where the mode does not run it).
    """
    import torch

    from geodrift.compress.model import llama_only, load_setup
    from geodrift.compress.prune import evaluate_pruning
    from geodrift.compress.share_run import evaluate_sharing
    from geodrift.compress.sources import load_texts
    from geodrift.pretrained import tokenizer_for

    p = compress_plan(mode)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        on_stage("compression: loading the embedded SmolLM2-135M and the corpus")
        setup = load_setup(None, None, seq_len=p.seq_len, calib_windows=p.calib_windows,
                           eval_windows_count=p.eval_windows)
        on_stage("compression: layer pruning (geodrift compress prune)")
        t0 = time.perf_counter()
        prune = Section("compress-prune", "Compression: which layers can go? (layer pruning)", "compress",
                        p.command("prune"), evaluate_pruning(setup, p.prune))
        prune.seconds = time.perf_counter() - t0
        share = Section("compress-share", "Compression: which space should a shared basis live in?", "compress",
                        p.command("share") if p.share is not None else "geodrift compress share")
        if p.share is None:
            share.note = (f"not run in {mode} mode (its calibration pass and factorisations alone take minutes); "
                          "geodrift reproduce --quick and the full mode run it. No number is reported.")
        else:
            on_stage("compression: whitened low-rank compression (geodrift compress share)")
            t0 = time.perf_counter()
            texts = load_texts(tokenizer_for(None), None, "sources", p.seq_len, p.share_calib_windows,
                               p.share_eval_windows, p.share.calib_draws)
            compress_setup = replace(llama_only(setup, "compress share"), calib=texts.draws[0], evaluation=texts.evaluation, corpus=texts.corpus)
            share.result = evaluate_sharing(compress_setup, p.share, texts.draws)[0]
            share.seconds = time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)
    return [prune, share]


def _judge_gate_drop(sections: list[Section]) -> None:
    # The paper's direct ablation compares two sections (X-silu, X-none): its verdict joins the ablated one.
    by_key = {s.key: s.result for s in sections if isinstance(s.result, Reproduction)}
    for key, rep in by_key.items():
        base = key.removesuffix("-none")
        kept = by_key.get(f"{base}-silu")
        if key.endswith("-none") and kept is not None and all(r.simulator.per_projection for r in (kept, rep)):
            rep.verdicts.append(gate_drop_verdict(kept, rep))


def reproduce_paper(mode: str, out: str | Path, *, backend: str = "local", workers: int = 2,
                    address: str | None = None, threads: int = 1, device: str = "cpu", checkpoint_every: int = 200,
                    on_stage: Callable[[str], None] = lambda message: None,
                    on_status: Callable[[SweepStatus], None] | None = None) -> PaperReproduction:
    """Run the reproduction of ``mode`` into ``out`` (records under ``out/runs``; finished runs are reused).

    Args:
        mode: ``full``, ``quick`` or ``smoke``; out: the report folder.
        backend, workers, address, threads, device, checkpoint_every: the sweep's
            (``geodrift.sweep.runner.run_sweep``); checkpoints make an interrupted reproduction resumable.
        on_stage: told before each stage; on_status: the sweep's progress.

    Returns:
        The sections (proofs, scan, simulators, compression) with results and provenance.

    Raises:
        GeodriftError: bad options; a stage that cannot start (e.g. the embedded model missing).
    """
    sims = plan(mode)
    out = Path(out)
    git, load_before = (git_revision(), git_dirty()), load_average()  # before this run writes anything
    t0 = time.perf_counter()
    wall: dict[str, float] = {}

    def timed(name: str, work: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = work()
        wall[name] = time.perf_counter() - start
        return result

    sections: list[Section] = []
    on_stage("proofs (sympy + numeric twins)")
    proofs = Section("proofs", "Symbolic proofs", "proofs", "geodrift prove",
                     timed("proofs", lambda: run_claims(None, seed=0)))
    proofs.seconds = wall["proofs"]
    sections.append(proofs)
    layers = [0, 1, 2] if mode == "smoke" else None
    draws = 10 if mode == "smoke" else 100
    on_stage("scan of the embedded SmolLM2-135M")

    def run_scan() -> Report:
        ws, heads = load_weights(None, "raw", None, None, layers)
        return scan(ws, MeasureSpec(k=8, null_draws=draws, seed=0), heads=heads)

    scan_cmd = "geodrift scan" + (" --layers 0-2 --null-draws 10" if mode == "smoke" else "")
    raw: Report = timed("scan", run_scan)  # the paper's metric: --view raw, whatever the scan's default view
    scanned = Section("scan", "Scan of the embedded SmolLM2-135M-Instruct", "scan", f"{scan_cmd} --view raw", raw)
    scanned.seconds = wall["scan"]
    sections.append(scanned)
    on_stage("the eight predictions in the raw, folded and canonical views")
    views = Section("views", "The eight predictions in the raw, folded and canonical views", "views",
                    " && ".join(f"{scan_cmd} --view {v}" for v in VIEW_ORDER),
                    timed("views", lambda: compare_views(
                        None, MeasureSpec(k=8, null_draws=draws, seed=0), layers=layers,
                        reports={"raw": raw}, reference=PAPER_TABLE2["Llama-3.1-8B"],
                        reference_name="paper, Llama-3.1-8B")))
    views.seconds = wall["views"]
    sections.append(views)
    grids = {s.key: preset_grid(s.experiment()) for s in sims}
    jobs = [Job(j.spec, j.seed, j.preset, f"runs/{key}") for key, g in grids.items() for j in g.jobs]
    on_stage(f"{len(jobs)} simulator runs in {len(sims)} sections on {backend} ({workers} worker(s))")
    outcomes = timed(f"simulators ({len(jobs)} runs, {workers} at a time)", lambda: run_sweep(
        jobs, backend=backend, workers=workers, address=address, out=str(out), device=device, threads=threads,
        checkpoint_every=checkpoint_every, on_status=on_status))
    for s in sims:
        mine = [o for o in outcomes if o.job.folder == f"runs/{s.key}"]
        section = Section(s.key, s.title, "sim", s.command(str(out)), seconds=sum(o.seconds for o in mine),
                          runs=len(mine))
        try:
            section.result = sweep_reproduction(grids[s.key], mine)
        except GeodriftError as error:
            section.note = str(error)
        sections.append(section)
    _judge_gate_drop(sections)
    compression = timed("compression (loading the model, prune, share)",
                        lambda: run_compression(mode, threads, on_stage))
    sections += compression
    wall.update({s.key: s.seconds for s in compression if s.seconds is not None})
    seconds = time.perf_counter() - t0
    command = reproduce_command(mode, out, backend=backend, workers=workers, threads=threads, address=address)
    provenance = stamp(command, load_before=load_before, wall_s={"total": seconds, **wall}, git=git,
                       extra={"backend": f"{backend}, {workers} worker(s) x {threads} torch thread(s) per run"})
    return PaperReproduction(mode, sections, seconds, provenance)


def reproduce_command(mode: str, out: str | Path, *, backend: str = "local", workers: int = 2, threads: int = 1,
                      address: str | None = None) -> str:
    """The ``geodrift reproduce`` command line that reruns a reproduction into ``out`` (options at their
    defaults left out; ``--force`` because ``out`` then holds this report).

    Example:
        >>> reproduce_command("quick", "docs/results")
        'geodrift reproduce --quick --out docs/results --force'
    """
    parts = ["geodrift reproduce", *({"quick": ["--quick"], "smoke": ["--smoke"]}.get(mode, [])), f"--out {out}",
             "--force"]
    if backend != "local":
        parts.append(f"--backend {backend}")
    if address:
        parts.append(f"--address {address}")
    if workers != 2:
        parts.append(f"--workers {workers}")
    if threads != 1:
        parts.append(f"--threads {threads}")
    return " ".join(parts)
