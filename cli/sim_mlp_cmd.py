"""`geodrift simulate mlp`: train the paper's toy residual MLP presets and compare with the paper."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from geodrift.cli.main import simulate_app
from geodrift.errors import GeodriftError
from geodrift.render import err_console
from geodrift.sim.config import PAPER_SEEDS, PRESET_SEEDS, PRESETS, RunSpec
from geodrift.sim.ensemble import default_batched
from geodrift.sim.record import load_records
from geodrift.sim.reproduce import Reproduction, assemble, build_specs, reproduce


def _parse_seeds(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(s) for s in text.replace(" ", "").split(",") if s]
    except ValueError:
        raise GeodriftError(f"--seeds {text!r}: expected comma-separated integers, e.g. 42,123,777") from None


def _reload(out: Path) -> Reproduction:
    records = load_records(out)
    if not records:
        raise GeodriftError(f"--reload: no run.json under {out}; run without --reload first")
    specs: dict[str, RunSpec] = {}
    for rec in records:
        specs.setdefault(rec.label, RunSpec.from_dict(rec.config))
    seeds = sorted({r.seed for r in records})
    name = records[0].preset or "custom"
    if name in PRESETS:  # keep the preset's row order
        order = [s.label for s in PRESETS[name]()]
        specs = dict(sorted(specs.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    return assemble(name, list(specs.values()), records, seeds)


@simulate_app.command("mlp")
def mlp_command(
    preset: str = typer.Option("single", "--preset", help="table1, table3, drift, ema, smoke or single "
                               "(one Res+ReLU run; combine with --ablation)."),
    ablation: list[str] = typer.Option(None, "--ablation", help="Applied to every configuration, in order: "
                                       "nores, ln, ln_post, ln_branch, relu, gelu, silu, tanh, none, radial, "
                                       "init=STD, width=N, depth=N, act=NAME. Repeatable."),
    seeds: str = typer.Option(None, "--seeds", help="Comma-separated seeds (default 42,123,777; 42 for "
                              "smoke/single)."),
    steps: int = typer.Option(None, "--steps", help="Optimiser steps per run (preset default: the paper's)."),
    epochs: float = typer.Option(None, "--epochs", help="Run length in epochs of 469 steps (paper epochs)."),
    track_every: int = typer.Option(None, "--track-every", help="Tracking interval in steps (0 = off)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or auto."),
    out: Path = typer.Option(None, "--out", help="Folder for run.json records and checkpoints."),
    as_json: bool = typer.Option(False, "--json", help="Print the reproduction as JSON on stdout."),
    plot: Path = typer.Option(None, "--plot", help="Folder for PNG plots (continuity, rotation, PCA)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the checkpoints and records in --out."),
    reload: bool = typer.Option(False, "--reload", help="Re-render the records in --out without training."),
    data: str = typer.Option("mnist5k", "--data", help="mnist5k (embedded), digits, a folder of IDX files "
                             "(MNIST/Fashion-MNIST/EMNIST/KMNIST, raw or .gz) or a .npz."),
    batch_seeds: bool = typer.Option(None, "--batch-seeds/--no-batch-seeds", help="Train the seeds of a "
                                     "configuration as one batched ensemble (default: only on CUDA)."),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads (default: torch's choice)."),
    checkpoint_every: int = typer.Option(0, "--checkpoint-every", help="Save a resumable checkpoint every N "
                                         "steps under --out (0: none; a killed run restarts from step 0)."),
) -> None:
    """Train the toy residual MLP (paper section 4) and print geodrift vs the paper with verdicts."""
    if threads:
        torch.set_num_threads(threads)
    if (resume or reload) and out is None:
        raise GeodriftError("--resume/--reload need --out DIR (where the records and checkpoints are)")
    if reload:
        rep = _reload(out)
    else:
        specs = build_specs(preset, steps=steps, epochs=epochs, track_every=track_every, device=device,
                            ablations=ablation or None, checkpoint_every=checkpoint_every)
        total = sum(s.train.steps for s in specs) * len(_parse_seeds(seeds) or PRESET_SEEDS.get(preset, PAPER_SEEDS))
        batched = default_batched(device) if batch_seeds is None else batch_seeds
        with Progress(TextColumn("[bold]training[/bold] {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err_console, transient=True,
                      disable=as_json or not err_console.is_terminal) as bar:
            task = bar.add_task("", total=total)
            state = {"base": 0, "last": 0}

            def on_run(label: str, seed: int) -> None:
                bar.update(task, description=label)

            def on_step(done: int) -> None:
                if done < state["last"]:
                    state["base"] += state["last"]
                state["last"] = done
                bar.update(task, completed=state["base"] + done)

            rep = reproduce(preset, seeds=_parse_seeds(seeds), steps=steps, epochs=epochs,
                            track_every=track_every, device=device, out=str(out) if out else None,
                            resume=resume, batched=batched, data=data, ablations=ablation or None,
                            checkpoint_every=checkpoint_every, on_run=on_run, on_step=on_step)
    if plot is not None:
        from geodrift.render.sim_plots import write_plots

        paths = write_plots(rep.records, plot, rep.preset, rep.floor)
        err_console.print("plots: " + ", ".join(str(p) for p in paths))
    if as_json:
        sys.stdout.write(json.dumps(rep.to_dict(), default=float) + "\n")
    else:
        from geodrift.render.sim import render_reproduction

        render_reproduction(rep)
