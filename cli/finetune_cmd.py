"""`geodrift finetune [MODEL] --corpus NAME --lr LR --steps N`: one fine-tuning run, measured (issue 41)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli.options import Force, Quiet, Wide

app = typer.Typer()


@app.command("finetune", short_help="Fine-tune a causal LM; measure forgetting and drift.")
def finetune_command(
    model: Annotated[str | None, typer.Argument(help="A llama/mistral checkpoint (GGUF, safetensors, Hugging Face "
                                                "folder) or any transformers causal-LM folder with its tokenizer.json "
                                                "(default: the embedded SmolLM2-135M).", show_default=False)] = None,
    corpus: Annotated[str, typer.Option("--corpus", help="The new domain: stdlib-docs (the control: the probe's kind of "
                                        "text), django-en, django-de, django-ja, sympy-code, or a text file/folder.")
                      ] = "django-de",
    lr: Annotated[float, typer.Option("--lr", help="AdamW learning rate (constant, no weight decay).")] = 2e-4,
    steps: Annotated[int, typer.Option("--steps", help="Optimiser steps.")] = 24,
    batch: Annotated[int, typer.Option("--batch", help="Windows per step.")] = 2,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per window.")] = 128,
    checkpoints: Annotated[str, typer.Option("--checkpoints", help="Steps to save and measure, e.g. 8,16,24 (default: "
                                             "thirds of --steps).")] = "",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the training windows' draw.")] = 0,
    probe_windows: Annotated[int, typer.Option("--probe-windows", help="Held-out probe windows (forgetting).")] = 64,
    domain_windows: Annotated[int, typer.Option("--domain-windows", help="Held-out domain windows (learning).")] = 32,
    taylor_windows: Annotated[int, typer.Option("--taylor-windows", help="Probe-kind training windows of the Taylor / "
                                                "EWC baseline (0: none).")] = 4,
    reverts: Annotated[bool, typer.Option("--reverts", help="Also revert each layer alone at the end.")] = False,
    keep: Annotated[str, typer.Option("--keep", help="Checkpoints kept: all, or final.")] = "all",
    out: Annotated[Path | None, typer.Option("--out", help="Folder for checkpoints and run.json (without it nothing "
                                             "is written and no weights-only indicator is measured).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Reuse a finished run in --out.")] = False,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda (cuda:N) or auto.")] = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="Print the run's record as JSON.")] = False,
    force: Force = False, wide: Wide = False, quiet: Quiet = False,
) -> None:
    """Fine-tune a causal LM on a corpus; at each checkpoint, forgetting (held-out NLL on the model's original kind of
    text) and learning (on the new domain), paired on fixed windows with standard errors, and the weights-only
    indicators beside their noise floors."""
    from geodrift.jobs.finetune import FinetuneRequest, run_finetune
    from geodrift.render.finetune import show_finetune
    from geodrift.render.progress import ConsoleEvents

    request = FinetuneRequest(corpus=corpus, lr=lr, steps=steps, model=model, batch=batch, seq_len=seq_len,
                              checkpoints=checkpoints, seed=seed, probe_windows=probe_windows,
                              domain_windows=domain_windows, taylor_windows=taylor_windows, reverts=reverts,
                              keep=keep, out=out, resume=resume, force=force, device=device)
    with ConsoleEvents(quiet=quiet) as events:
        record = run_finetune(request, events)
    show_finetune(record, as_json=as_json, wide=wide)
