"""`geodrift simulate transformer`: train a Llama-style model, track per-projection continuity, compare."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from geodrift.cli.main import simulate_app
from geodrift.errors import GeodriftError
from geodrift.render import err_console


def _parse_seeds(seed: int, seeds: str | None) -> list[int]:
    if not seeds:
        return [seed]
    try:
        return [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise GeodriftError(f"--seeds {seeds!r}: use comma-separated integers, e.g. 42,43") from None


@simulate_app.command("transformer")
def transformer_command(
    preset: str = typer.Option("cpu", "--preset", help="paper (the paper's 34M-class setup), cpu (<= 20 min on "
                               "2 cores), tiny (tests)."),
    ablation: list[str] = typer.Option([], "--ablation", help="Repeatable, applied in order: silu relu gelu none "
                                       "radial nores nonorm linear_attn v_silu v_relu v_gelu v_tanh."),
    seed: int = typer.Option(42, "--seed", help="Seed (init and batch order)."),
    seeds: str = typer.Option(None, "--seeds", help="Several seeds, e.g. 42,43 (overrides --seed)."),
    steps: int = typer.Option(None, "--steps", help="Override the preset's number of steps."),
    corpus: str = typer.Option(None, "--corpus", help="A text file, a folder of .txt files or a WikiText folder "
                               "(wiki.train.raw/wiki.valid.raw or .tokens). Default: embedded stdlib docs."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="bpe (trained locally) or bytes."),
    vocab: int = typer.Option(None, "--vocab", help="BPE vocabulary size (override)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or auto."),
    out: Path = typer.Option(Path("runs/transformer"), "--out", help="Output folder for run records."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (and scan reports) as JSON on stdout."),
    plot: bool = typer.Option(False, "--plot", help="Write PNG plots next to each run record."),
    resume: bool = typer.Option(False, "--resume", help="Continue from checkpoint.pt when present."),
    smollm2: bool = typer.Option(True, "--smollm2/--no-smollm2", help="Scan the embedded SmolLM2-135M beside."),
    detail: bool = typer.Option(False, "--detail", help="Also print the k = 1..K table."),
) -> None:
    """Train a Llama-style transformer and print its per-projection continuity beside the paper and SmolLM2."""
    from geodrift.render.scan import write_plot
    from geodrift.render.sim_transformer import render_transformer, write_comparison_plot, write_training_plot
    from geodrift.sim.transformer_presets import make_config, paper_row
    from geodrift.sim.transformer_run import run_transformer, smollm2_reference

    cfg = make_config(preset, list(ablation), steps=steps, corpus=corpus, tokenizer=tokenizer, vocab=vocab)
    results = []
    for s in _parse_seeds(seed, seeds):
        with Progress(TextColumn(f"{cfg.name} seed {s}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console, transient=True) as bar:
            task = bar.add_task("train", total=cfg.steps)

            def advance(done: int, task: TaskID = task, bar: Progress = bar) -> None:
                bar.update(task, completed=done)

            results.append(run_transformer(cfg, seed=s, device=device, out=out, resume=resume, progress=advance))
    reference = smollm2_reference(out, cfg.scan_k, cfg.null_draws) if smollm2 else None
    reports = [r.scan for r in results]
    records = [r.record for r in results]
    row = paper_row(cfg)
    if plot:
        for r in results:
            write_plot(r.scan, r.path / "continuity_depth.png")
            write_training_plot([r.record], r.path / "continuity_training.png")
        write_comparison_plot(reports, row, reference, results[0].path.parent / "comparison.png")
        write_training_plot(records, results[0].path.parent / "continuity_training_all_seeds.png")
    if as_json:
        payload = {"config": results[0].config.to_dict(), "paper_row": row,
                   "runs": [{"seed": r.seed, "path": str(r.path), "summary": r.record.summary,
                             "timing": r.record.timing, "scan": r.scan.to_dict()} for r in results],
                   "smollm2": reference.to_dict() if reference is not None else None}
        sys.stdout.write(json.dumps(payload, default=lambda x: None) + "\n")
        return
    render_transformer(reports, records, row, reference, cfg.name, detail=detail)
    for r in results:
        err_console.print(f"[dim]run record: {r.path / 'run.json'}[/dim]")
