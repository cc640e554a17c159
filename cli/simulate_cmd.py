"""`geodrift simulate mlp|transformer`: train a preset over seeds, compare with the paper, judge the claims.

Both commands take the same options for the same things (the ``Annotated`` aliases below); a few
are specific: ``--batch-seeds`` (the MLP's batched ensembles), ``--tokenizer``/``--vocab`` and
``--smollm2`` (the transformer's text and its pretrained reference).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, Force, GpusPerRun, Quiet, Wide, Workers
from geodrift.cli.options import SweepAddress as Address
from geodrift.cli.options import SweepBackend as Backend

if TYPE_CHECKING:
    from geodrift.jobs.simulate import Simulation

app = typer.Typer(help="Train small networks with the paper's ablations and track continuity.",
                  short_help="Train small networks with the paper's ablations.", no_args_is_help=True)

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
    from geodrift.cli.checks import resume_command
    from geodrift.jobs.simulate import SimulateRequest, run_simulate
    from geodrift.render.progress import ConsoleEvents

    request = SimulateRequest(
        sim="mlp", preset=preset.value, seeds=_parse_seeds(seeds), steps=steps, track_every=track_every,
        ablations=tuple(ablation or ()), data=data, device=device.value, out=out, resume=resume, reload=reload,
        plot=plot, dpi=dpi, checkpoint_every=checkpoint_every, threads=threads, batched=batch_seeds,
        backend=None if backend is None else backend.value, workers=workers, address=address,
        gpus_per_run=gpus_per_run, force=force, resume_command=resume_command(sys.argv))
    with ConsoleEvents(quiet=quiet, reserve_stdout=as_json) as events:
        simulation = run_simulate(request, events)
    _show(simulation, plot=plot, dpi=dpi, as_json=as_json, detail=detail, wide=wide, quiet=quiet)


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
    from geodrift.cli.checks import resume_command
    from geodrift.jobs.simulate import SimulateRequest, run_simulate
    from geodrift.render.progress import ConsoleEvents

    request = SimulateRequest(
        sim="transformer", preset=preset.value, seeds=_parse_seeds(seeds), steps=steps, track_every=track_every,
        ablations=tuple(ablation or ()), data=data, tokenizer=None if tokenizer is None else tokenizer.value,
        vocab=vocab, view=view.value, device=device.value, out=out, resume=resume, reload=reload, plot=plot,
        dpi=dpi, checkpoint_every=checkpoint_every, threads=threads, smollm2=smollm2, save_hf_every=save_hf_every,
        backend=None if backend is None else backend.value, workers=workers, address=address,
        gpus_per_run=gpus_per_run, force=force, resume_command=resume_command(sys.argv))
    with ConsoleEvents(quiet=quiet, reserve_stdout=as_json) as events:
        simulation = run_simulate(request, events)
    _show(simulation, plot=plot, dpi=dpi, as_json=as_json, detail=detail, wide=wide, quiet=quiet)


def _show(simulation: Simulation, *, plot: Path | None, dpi: int, as_json: bool, detail: bool, wide: bool,
          quiet: bool) -> None:
    # The figures, then the reproduction as JSON on stdout or as tables.
    from geodrift.render.files import print_document
    from geodrift.render.progress import announce
    from geodrift.render.sim import render_reproduction, reproduction_document
    from geodrift.render.sim_plots import write_plots

    rep, reference = simulation.reproduction, simulation.reference
    if plot is not None:
        announce("wrote " + ", ".join(str(p) for p in write_plots(rep, plot, dpi)), quiet=quiet)
    if as_json:
        print_document(reproduction_document(rep, reference))
    else:
        render_reproduction(rep, reference, detail=detail, wide=wide)


def _parse_seeds(text: str | None) -> tuple[int, ...] | None:
    # --seeds as integers (their range is the job's to check).
    from geodrift.errors import GeodriftError

    if not text:
        return None
    try:
        return tuple(int(s) for s in text.replace(" ", "").split(",") if s)
    except ValueError:
        raise GeodriftError(f"--seeds {text!r}: expected comma-separated integers, e.g. 42,123,777") from None
