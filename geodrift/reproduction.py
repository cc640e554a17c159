"""The whole reproduction in one call: proofs, the embedded scan, every simulator preset through the sweep runner.

``reproduce_paper(mode, out, ...)`` runs, in order:

1. the symbolic proofs and their numeric twins (``geodrift.prove.run_claims``);
2. the scan of the embedded SmolLM2-135M (``geodrift.scan``), k = 8, 100 null draws;
3. every simulator section of :func:`plan` as one sweep (``geodrift.sweep``; all runs of all
   presets share the pool), each section's records under ``<out>/runs/<section>/``;
4. the hooks in :data:`EXTRA_SECTIONS` (compression, ``geodrift compress``, is not yet run by the
   reproduction: its hook is a marked placeholder that says so and names the commands, never a number).

Modes: ``full`` (the README's commands: hours on 2 cores), ``quick`` (shorter runs, one seed; about
30 minutes on the shared 2-core CPU), ``smoke`` (seconds per run; for tests). Each section keeps the
equivalent ``geodrift`` command, so every number in the report says how to re-run it alone.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geodrift.continuity import MeasureSpec, Report
from geodrift.errors import GeodriftError
from geodrift.prove import run_claims
from geodrift.prove.runner import ProveReport
from geodrift.scan.scan import load_weights, scan
from geodrift.sim.record import git_revision, software_versions
from geodrift.sim.reproduce import Reproduction
from geodrift.sweep.execute import SweepStatus
from geodrift.sweep.grid import Job, preset_grid
from geodrift.sweep.runner import run_sweep, sweep_reproduction

MODES = ("full", "quick", "smoke")


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
    kind: str  # proofs | scan | sim | hook
    command: str
    result: ProveReport | Report | Reproduction | None = None
    note: str = ""


@dataclass
class PaperReproduction:
    """Everything :func:`reproduce_paper` produced, with the provenance the report prints."""

    mode: str
    sections: list[Section]
    seconds: float
    versions: dict[str, str]
    git_revision: str | None
    machine: str
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
           SimSection("datasize", "Data-size experiment", "mlp", "datasize", one)]
    llama = [SimSection(f"transformer-{a or 'silu'}", t, "transformer", "cpu", (42, 43), None, (a,) if a else ())
             for a, t in ablations]
    mid = [SimSection("mid-silu", "mid transformer: SwiGLU", "transformer", "mid", (42, 43)),
           SimSection("mid-none", "mid transformer: no MLP activation", "transformer", "mid", (42, 43), None,
                      ("none",))]
    return mid + llama + mlp


def compression_hook(mode: str, out: Path) -> Section:
    """HOOK: ``geodrift compress`` is not yet a section of the reproduction; this says so, never a number."""
    return Section("compression", "Compression", "hook", "geodrift compress prune; geodrift compress share",
                   note="not run by geodrift reproduce yet: run geodrift compress prune and geodrift compress "
                        "share (README, Compression); replace geodrift.reproduction.compression_hook to add them. "
                        "No number is reported.")


# Sections added after the simulators; each takes (mode, out) and returns a Section.
EXTRA_SECTIONS: list[Callable[[str, Path], Section]] = [compression_hook]


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
        The sections (proofs, scan, simulators, hooks) with results and provenance.

    Raises:
        GeodriftError: bad options; a stage that cannot start (e.g. the embedded model missing).
    """
    sims = plan(mode)
    out = Path(out)
    t0 = time.perf_counter()
    sections: list[Section] = []
    on_stage("proofs (sympy + numeric twins)")
    sections.append(Section("proofs", "Symbolic proofs", "proofs", "geodrift prove", run_claims(None, seed=0)))
    layers = [0, 1, 2] if mode == "smoke" else None
    draws = 10 if mode == "smoke" else 100
    on_stage("scan of the embedded SmolLM2-135M")
    ws, heads = load_weights(None, "raw", None, None, layers)
    report = scan(ws, MeasureSpec(k=8, null_draws=draws, seed=0), heads=heads)
    scan_cmd = "geodrift scan" + (" --layers 0-2 --null-draws 10" if mode == "smoke" else "")
    sections.append(Section("scan", "Scan of the embedded SmolLM2-135M-Instruct", "scan", scan_cmd, report))
    grids = {s.key: preset_grid(s.sim, s.preset, list(s.seeds), steps=s.steps, ablations=list(s.ablations) or None)
             for s in sims}
    jobs = [Job(j.spec, j.seed, j.preset, f"runs/{key}") for key, g in grids.items() for j in g.jobs]
    on_stage(f"{len(jobs)} simulator runs in {len(sims)} sections on {backend} ({workers} worker(s))")
    outcomes = run_sweep(jobs, backend=backend, workers=workers, address=address, out=str(out), device=device,
                         threads=threads, checkpoint_every=checkpoint_every, on_status=on_status)
    for s in sims:
        mine = [o for o in outcomes if o.job.folder == f"runs/{s.key}"]
        section = Section(s.key, s.title, "sim", s.command(str(out)))
        try:
            section.result = sweep_reproduction(grids[s.key], mine)
        except GeodriftError as error:
            section.note = str(error)
        sections.append(section)
    sections += [hook(mode, out) for hook in EXTRA_SECTIONS]
    return PaperReproduction(mode, sections, time.perf_counter() - t0, software_versions(), git_revision(),
                             f"{platform.machine()}, {platform.processor() or 'cpu'}; backend {backend}, "
                             f"{workers} worker(s) x {threads} thread(s)")
