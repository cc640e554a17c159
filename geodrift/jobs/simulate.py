"""The ``geodrift simulate mlp|transformer`` job: train a preset over seeds (in this process or as a sweep), or
re-read the runs in ``--out``, then judge the paper's claims; the transformer's pretrained reference beside.

Example:
    >>> run_simulate(SimulateRequest(sim="mlp", preset="smoke", resume=True))
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --resume/--reload need --out DIR (where the records and checkpoints are)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from geodrift.errors import GeodriftError
from geodrift.jobs.events import SILENT, Events
from geodrift.jobs.options import check_fields

if TYPE_CHECKING:
    from geodrift.continuity import Report
    from geodrift.sim.experiment import Experiment
    from geodrift.sim.reproduce import Reproduction


@dataclass(frozen=True)
class SimulateRequest:
    """Every option of ``geodrift simulate mlp|transformer`` that changes what is run or written (``--json``,
    ``--full``, ``--wide`` and ``--quiet`` only change what the face prints).

    ``sim``: ``mlp`` or ``transformer``; ``preset``: one of its presets; None (and empty ``ablations``) leave the
    preset's own values. Given ``backend`` or ``workers``, the preset runs as a sweep (one seed per run).
    ``smollm2``: scan the embedded SmolLM2-135M as the transformer's reference column (cached in ``out``).
    ``resume_command``: the command line that continues an interrupted run (printed if it is interrupted).
    """

    sim: str
    preset: str
    seeds: tuple[int, ...] | None = None
    steps: int | None = None
    track_every: int | None = None
    ablations: tuple[str, ...] = ()
    data: str | None = None
    tokenizer: str | None = None
    vocab: int | None = None
    view: str = "raw"  # the tracker's view: raw, or canonical (the transformer; geodrift.sim.canonical)
    device: str = "auto"
    out: Path | None = None
    resume: bool = False
    reload: bool = False
    plot: Path | None = None
    dpi: int = 300
    checkpoint_every: int = 0
    threads: int | None = None
    batched: bool | None = None
    smollm2: bool = False
    save_hf_every: int = 0
    backend: str | None = None
    workers: int | None = None
    address: str | None = None
    gpus_per_run: float = 0.0
    force: bool = False
    resume_command: str | None = None

    @property
    def as_sweep(self) -> bool:
        """Whether the preset runs as a sweep (``--backend`` or ``--workers`` given)."""
        return self.backend is not None or self.workers is not None


@dataclass(frozen=True)
class Simulation:
    """What ``geodrift simulate`` shows: the reproduction and, for the transformer, SmolLM2's scan (or None)."""

    reproduction: Reproduction
    reference: Report | None = None


def run_simulate(request: SimulateRequest, events: Events = SILENT) -> Simulation:
    """Check every option, build the experiment once, then train it (or sweep it, or reload it) and judge it.

    Args:
        request: the options; events: where progress goes (a bar of training steps, or of sweep runs; then
            one of the reference scan's matrices).

    Returns:
        The reproduction and the reference scan.

    Raises:
        GeodriftError: naming the option, before any training: a value of the wrong type or out of range,
            an unknown preset, ablation or field, ``--out`` holding a user's files, a figure name that cannot be
            written, or options that do not go together (``--reload`` with a sweep, ``--save-hf-every`` without
            ``--out``).
    """
    import torch

    from geodrift.io.checks import check_dpi, check_seed, figure_format
    from geodrift.io.outdir import claim_outputs, prepare_out
    from geodrift.io.signals import resume_hint
    from geodrift.sim.experiment import Experiment, Overrides
    from geodrift.sim.reproduce import reload_reproduction, reproduce

    r = request
    _check(r)
    if r.plot is not None:  # fail before training, not after it
        check_dpi(r.dpi)
        if Path(r.plot).suffix:
            figure_format(r.plot)
            claim_outputs([("--plot", Path(r.plot))])
    seeds = None if r.seeds is None else [check_seed(seed, "--seeds") for seed in r.seeds]
    if r.as_sweep and (r.reload or r.batched):
        raise GeodriftError("--backend/--workers run one seed per run; drop --reload or --batch-seeds")
    if r.as_sweep and r.save_hf_every:
        raise GeodriftError("--save-hf-every runs in this process; drop --backend/--workers to save Hugging Face "
                            "folders during training")
    if r.out is not None and not r.reload and r.resume_command is not None:
        resume_hint(r.resume_command)
    if r.threads:
        torch.set_num_threads(r.threads)
    overrides = Overrides(steps=r.steps, track_every=r.track_every, ablations=r.ablations, data=r.data,
                          tokenizer=r.tokenizer, vocab=r.vocab, view=r.view)
    if r.reload:
        assert r.out is not None
        prepare_out(r.out, resume=r.resume, reload=r.reload, force=r.force, plot=r.plot)
        rep = reload_reproduction(r.sim, r.out)
    elif r.as_sweep:
        rep = _sweep(r, Experiment.of(r.sim, r.preset, seeds, overrides), events)
    else:
        experiment = Experiment.of(r.sim, r.preset, seeds, overrides)
        removed = prepare_out(r.out, resume=r.resume, reload=r.reload, force=r.force, plot=r.plot)
        if removed:
            events.stage(f"--force: deleted {len(removed)} earlier result file(s) under {r.out or r.plot}")
        events.begin("training", experiment.total_steps(bool(r.batched)), "steps")
        rep = reproduce(experiment, batched=r.batched, device=r.device, out=str(r.out) if r.out else None,
                        resume=r.resume, checkpoint_every=r.checkpoint_every, save_hf_every=r.save_hf_every,
                        on_step=events.training, on_stage=events.stage)
        events.end()
    return Simulation(rep, _reference(rep, r.out, events) if r.smollm2 else None)


def _check(r: SimulateRequest) -> None:
    # The counts and the options that need --out, named as their options.
    from geodrift.io.checks import check_count

    check_fields(r)
    if (r.resume or r.reload) and r.out is None:
        raise GeodriftError("--resume/--reload need --out DIR (where the records and checkpoints are)")
    check_count(r.steps, "--steps", 1)
    check_count(r.track_every, "--track-every", 0, "0 = off")
    check_count(r.checkpoint_every, "--checkpoint-every", 0, "0 = none")
    check_count(r.threads, "--threads", 1)
    check_count(r.vocab, "--vocab", 256, "the 256 byte ids at least")
    if r.save_hf_every < 0 or (r.save_hf_every and r.out is None):
        raise GeodriftError(f"--save-hf-every {r.save_hf_every}: needs a value >= 1 (0 = never) and --out DIR, "
                            "where the Hugging Face folders go")


def _sweep(r: SimulateRequest, experiment: Experiment, events: Events) -> Reproduction:
    # The preset as a sweep: one seed per run on the backend.
    from geodrift.sweep.grid import preset_grid
    from geodrift.sweep.runner import run_grid

    rep = run_grid(preset_grid(experiment),
                   backend=r.backend or "local", workers=1 if r.workers is None else r.workers, address=r.address,
                   gpus=r.gpus_per_run, out=None if r.out is None else Path(r.out), resume=r.resume, force=r.force,
                   threads=r.threads or 1, device=r.device, checkpoint_every=r.checkpoint_every,
                   plot=None if r.plot is None else Path(r.plot), on_stage=events.stage, on_begin=events.begin,
                   on_status=events.sweep)
    events.end()
    return rep


def _reference(rep: Reproduction, out: Path | None, events: Events) -> Report:
    # The transformer's reference column: the embedded pretrained Llama, scanned the way its runs were tracked.
    from geodrift.continuity import MeasureSpec
    from geodrift.pretrained import smollm2_reference

    track = rep.specs[0].track
    if out is None:
        events.stage("scanning SmolLM2-135M (the reference column) in memory, not cached: no --out, nothing written")
    events.begin("scanning SmolLM2-135M (reference column)", 0, "matrices")
    reference = smollm2_reference(out, MeasureSpec(k=track.final_k, null_draws=track.final_null_draws),
                                  lambda done, total, label: events.advance(done, total, label))
    events.end()
    return reference
