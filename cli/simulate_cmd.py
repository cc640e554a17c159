"""`geodrift simulate mlp|transformer`: train a preset over seeds, compare with the paper, judge the claims.

Both commands take the same options for the same things (the ``Annotated`` aliases below); a few
are specific: ``--batch-seeds`` (the MLP's batched ensembles), ``--tokenizer``/``--vocab`` and
``--smollm2`` (the transformer's text and its pretrained reference).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, Force, Quiet, Wide
from geodrift.cli.sweep_cmd import Address, Backend, GpusPerRun, Workers

if TYPE_CHECKING:
    from geodrift.sim.experiment import Overrides

app = typer.Typer(help="Train small networks with the paper's ablations and track continuity.", no_args_is_help=True)

Ablation = Annotated[list[str] | None, typer.Option(
    "--ablation", help="Repeatable, applied to every configuration in order: a named ablation (see the command's "
    "help) or FIELD=VALUE of the model config, e.g. d_model=128, n_layers=8, init_std=1e-4, activation=gelu.")]
Seeds = Annotated[str | None, typer.Option("--seeds", help="Comma-separated seeds (default: the preset's).")]
Steps = Annotated[int | None, typer.Option("--steps", help="Optimiser steps per run (default: the preset's).")]
TrackEvery = Annotated[int | None, typer.Option("--track-every", help="Tracking interval in steps (0 = off).")]
Device = Annotated[choices.Device, typer.Option("--device", help="Where to train; auto: CUDA when available.")]
Out = Annotated[Path | None, typer.Option("--out", help="Folder for run records, reports and checkpoints "
                                          "(default: nothing is written).")]
Resume = Annotated[bool, typer.Option("--resume", help="Reuse finished runs in --out and continue interrupted "
                                      "ones from their checkpoints (a non-empty --out needs --resume or --force).")]
Reload = Annotated[bool, typer.Option("--reload", help="Re-render the runs in --out without training.")]
Plot = Annotated[Path | None, typer.Option("--plot", help="Figures: a folder (PNG files), or a file name whose suffix "
                                           "(.png, .pdf, .svg) gives the format and whose stem prefixes each figure "
                                           "(figs/t1.pdf -> figs/t1_continuity.pdf, ...).")]
Json = Annotated[bool, typer.Option("--json", help="Print the reproduction as JSON on stdout.")]
CheckpointEvery = Annotated[int, typer.Option("--checkpoint-every", help="Save a resumable checkpoint every N "
                                              "steps under --out (0: none).")]
Threads = Annotated[int | None, typer.Option("--threads", help="torch CPU threads (default: torch's choice).")]
Detail = Annotated[bool, typer.Option("--full", "--detail", help="Every scan table of the final weights (σ²-WA, depth "
                                      "profiles, k = 1..K, trajectory shape; default: one row per projection with its "
                                      "verdicts; --detail is an older name of --full).")]


@app.command("mlp")
def mlp_command(
    preset: Annotated[choices.MLPPreset, typer.Option(
        "--preset", help="table1, table3, drift (Fig. 2), ema (Table 4): the paper's experiments; appf: App. F; "
        "datasize: distinct images x steps; smoke: seconds; single: one Res+ReLU run.")] = choices.MLPPreset.single,
    ablation: Ablation = None, seeds: Seeds = None, steps: Steps = None, track_every: TrackEvery = None,
    data: Annotated[str | None, typer.Option("--data", help="mnist5k (embedded), digits (scikit-learn), "
                                             "mnist5k-aug60k (seeded affine variants), a folder of IDX files (MNIST/Fashion-MNIST/EMNIST/KMNIST) or a .npz.")] = None,
    device: Device = choices.Device.auto, out: Out = None, resume: Resume = False, reload: Reload = False, plot: Plot = None,
    as_json: Json = False, checkpoint_every: CheckpointEvery = 0, threads: Threads = None, detail: Detail = False,
    batch_seeds: Annotated[bool | None, typer.Option("--batch-seeds/--no-batch-seeds", help="Train the seeds of a "
                                                     "configuration as one batched ensemble (default: on CUDA).")] = None,
    backend: Backend = None, workers: Workers = None, address: Address = None, gpus_per_run: GpusPerRun = 0.0,
    force: Force = False, dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False,
) -> None:
    """The toy residual MLP (paper section 4). Named ablations: nores, ln, ln_post, ln_branch, relu, gelu, silu,
    tanh, none, radial, radial_rms."""
    from geodrift.sim.experiment import Overrides

    overrides = Overrides(steps=steps, track_every=track_every, ablations=tuple(ablation or ()), data=data)
    _simulate("mlp", preset.value, overrides, seeds, device=device.value, out=out, resume=resume, reload=reload,
              plot=plot, as_json=as_json, checkpoint_every=checkpoint_every, threads=threads, detail=detail,
              batched=batch_seeds, force=force, dpi=dpi, wide=wide, quiet=quiet,
              sweep=_Sweep(backend, workers, address, gpus_per_run))


@app.command("transformer")
def transformer_command(
    preset: Annotated[choices.TransformerPreset, typer.Option(
        "--preset", help="paper: the paper's setup (GPU); cpu: minutes on 2 cores; mid: the paper's width (hours "
        "on a CPU); tiny: seconds.")] = choices.TransformerPreset.cpu,
    ablation: Ablation = None, seeds: Seeds = None, steps: Steps = None, track_every: TrackEvery = None,
    data: Annotated[str | None, typer.Option("--data", help="A text file, a folder of .txt files or a WikiText "
                                             "folder (default: the embedded stdlib-docs corpus).")] = None,
    device: Device = choices.Device.auto, out: Out = None, resume: Resume = False, reload: Reload = False, plot: Plot = None,
    as_json: Json = False, checkpoint_every: CheckpointEvery = 0, threads: Threads = None, detail: Detail = False,
    tokenizer: Annotated[choices.Tokenizer | None, typer.Option(
        "--tokenizer", help="bpe: trained on the training split; bytes: one id per byte (default: the preset's).")
                         ] = None,
    vocab: Annotated[int | None, typer.Option("--vocab", help="BPE vocabulary size.")] = None,
    smollm2: Annotated[bool, typer.Option("--smollm2/--no-smollm2", help="Scan the embedded SmolLM2-135M "
                                          "beside (cached in --out; without --out scanned in memory, nothing "
                                          "written).")] = True,
    view: Annotated[choices.TrackView, typer.Option(
        "--view", help="raw: the projections as trained; canonical: each layer at the canonical point of its gauge "
        "orbit (the same numbers for every exactly reparametrised model; gradients are then not tracked).")
                    ] = choices.TrackView.raw,
    save_hf_every: Annotated[int, typer.Option("--save-hf-every", help="Save the weights as a Hugging Face folder "
                                               "(model.safetensors + config.json) under --out, in "
                                               "<run>/hf/step-<n>/, at step 0, every N steps and at the end "
                                               "(0: never); read them with geodrift drift / compare.")] = 0,
    backend: Backend = None, workers: Workers = None, address: Address = None, gpus_per_run: GpusPerRun = 0.0,
    force: Force = False, dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False,
) -> None:
    """A Llama-style transformer on text (paper section 5). Named ablations: silu, relu, gelu, none, radial,
    radial_rms, nores, nonorm, linear_attn, v_silu, v_relu, v_gelu, v_tanh, v_radial, v_radial_rms."""
    from geodrift.sim.experiment import Overrides

    overrides = Overrides(steps=steps, track_every=track_every, ablations=tuple(ablation or ()), data=data,
                          tokenizer=tokenizer.value if tokenizer is not None else None, vocab=vocab,
                          view=view.value if view is not choices.TrackView.raw else None)
    _simulate("transformer", preset.value, overrides, seeds, device=device.value, out=out, resume=resume,
              reload=reload, plot=plot, as_json=as_json, checkpoint_every=checkpoint_every, threads=threads,
              detail=detail, smollm2=smollm2, save_hf_every=save_hf_every, force=force, dpi=dpi, wide=wide,
              quiet=quiet, sweep=_Sweep(backend, workers, address, gpus_per_run))


@dataclass(frozen=True)
class _Sweep:
    # --backend/--workers/--address/--gpus-per-run: given a backend or workers, the preset runs as a sweep.
    backend: choices.Backend | None
    workers: int | None
    address: str | None
    gpus: float

    @property
    def wanted(self) -> bool:
        return self.backend is not None or self.workers is not None


def _simulate(sim: str, preset: str, overrides: Overrides, seeds: str | None, *, device: str, out: Path | None,
              resume: bool, reload: bool, plot: Path | None, as_json: bool, checkpoint_every: int,
              threads: int | None, detail: bool, force: bool, dpi: int, wide: bool, quiet: bool, sweep: _Sweep,
              batched: bool | None = None, smollm2: bool = False, save_hf_every: int = 0) -> None:
    # Check -> build the experiment once -> one library call (reproduce, a sweep, or reload) -> render.
    import torch

    from geodrift.cli.checks import check_outputs, check_simulate_options, resume_command
    from geodrift.errors import GeodriftError
    from geodrift.io.atomic import document, to_json
    from geodrift.io.outdir import prepare_out
    from geodrift.io.signals import resume_hint
    from geodrift.io.stdio import report_only_stdout
    from geodrift.render.figures import check_dpi, figure_format
    from geodrift.render.progress import JobProgress, announce, training_reporter
    from geodrift.sim.experiment import Experiment
    from geodrift.sim.reproduce import reload_reproduction, reproduce

    if (resume or reload) and out is None:
        raise GeodriftError("--resume/--reload need --out DIR (where the records and checkpoints are)")
    check_simulate_options(steps=overrides.steps, track_every=overrides.track_every,
                           checkpoint_every=checkpoint_every, threads=threads, vocab=overrides.vocab)
    if save_hf_every < 0 or (save_hf_every and out is None):
        raise GeodriftError(f"--save-hf-every {save_hf_every}: needs a value >= 1 (0 = never) and --out DIR, "
                            "where the Hugging Face folders go")
    if plot is not None:  # fail before training, not after it
        check_dpi(dpi)
        if plot.suffix:
            figure_format(plot)
            check_outputs({"--plot": plot})
    seed_list = _parse_seeds(seeds)
    if sweep.wanted and (reload or batched):
        raise GeodriftError("--backend/--workers run one seed per run; drop --reload or --batch-seeds")
    if sweep.wanted and save_hf_every:
        raise GeodriftError("--save-hf-every runs in this process; drop --backend/--workers to save Hugging Face "
                            "folders during training")
    if out is not None and not reload:
        resume_hint(resume_command(sys.argv))
    if threads:
        torch.set_num_threads(threads)
    if reload:
        assert out is not None
        prepare_out(out, resume=resume, reload=reload, force=force, plot=plot)
        rep = reload_reproduction(sim, out)
    elif sweep.wanted:
        from geodrift.cli.sweep_cmd import run_grid
        from geodrift.sweep.grid import preset_grid

        grid = preset_grid(Experiment.of(sim, preset, seed_list, overrides))
        rep = run_grid(grid, backend=(sweep.backend or choices.Backend.local).value,
                       workers=1 if sweep.workers is None else sweep.workers, address=sweep.address, gpus=sweep.gpus,
                       out=out, resume=resume, force=force, threads=threads or 1, device=device,
                       checkpoint_every=checkpoint_every, quiet=quiet, plot=plot)
    else:
        experiment = Experiment.of(sim, preset, seed_list, overrides)
        removed = prepare_out(out, resume=resume, reload=reload, force=force, plot=plot)
        if removed:
            announce(f"--force: deleted {len(removed)} earlier result file(s) under {out or plot}", quiet=quiet)
        with JobProgress("training", experiment.total_steps(bool(batched)), "steps", quiet=quiet) as bar, \
                report_only_stdout(as_json):
            rep = reproduce(experiment, batched=batched, device=device, out=str(out) if out else None, resume=resume,
                            checkpoint_every=checkpoint_every, save_hf_every=save_hf_every,
                            on_step=training_reporter(bar), on_stage=bar.note)
    reference = None
    if smollm2:  # the transformer's reference column: the embedded pretrained Llama, scanned the same way
        from geodrift.continuity import MeasureSpec
        from geodrift.pretrained import smollm2_reference

        track = rep.specs[0].track
        if out is None:
            announce("scanning SmolLM2-135M (the reference column) in memory, not cached: no --out, nothing written",
                     quiet=quiet)
        with JobProgress("scanning SmolLM2-135M (reference column)", 0, "matrices", quiet=quiet) as bar:
            def on_matrix(done: int, total: int, label: str) -> None:
                bar.update(completed=done, description=label, total=total)

            reference = smollm2_reference(out,
                                          MeasureSpec(k=track.final_k, null_draws=track.final_null_draws), on_matrix)
    if plot is not None:
        from geodrift.render.sim_plots import write_plots

        paths = write_plots(rep, plot, dpi)
        announce("wrote " + ", ".join(str(p) for p in paths), quiet=quiet)
    if as_json:
        payload = rep.to_dict()
        if reference is not None:
            payload["smollm2"] = reference.to_dict()
        sys.stdout.write(to_json(document("reproduction", payload)) + "\n")
    else:
        from geodrift.render.sim import render_reproduction

        render_reproduction(rep, reference, detail=detail, wide=wide)


def _parse_seeds(text: str | None) -> list[int] | None:
    from geodrift.errors import GeodriftError

    if not text:
        return None
    from geodrift.io.checks import check_seed

    try:
        values = [int(s) for s in text.replace(" ", "").split(",") if s]
    except ValueError:
        raise GeodriftError(f"--seeds {text!r}: expected comma-separated integers, e.g. 42,123,777") from None
    return [check_seed(value, "--seeds") for value in values]
