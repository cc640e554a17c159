"""`geodrift compress prune|share [MODEL]`: does continuity predict what compression can remove?

``prune``: layer rankings (two data-free geometry scores, Block Influence, angular distance, random,
greedy) and the held-out perplexity after removing n = 1..N layers. ``share``: calibration-whitened
low-rank compression (SVD-LLM, Basis Sharing, pruning, continuity's methods and their controls) at
equal parameters, and per projection which space a shared basis belongs in.
Every option is checked before the model is loaded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, MaxMemory, Quiet, Wide

if TYPE_CHECKING:
    from geodrift.compress.prune import PruneResult
    from geodrift.compress.share_run import ShareResult

app = typer.Typer(help="Layer pruning and calibration-whitened low-rank compression, judged by held-out perplexity.",
                  short_help="Layer pruning and low-rank compression, judged by perplexity.",
                  no_args_is_help=True)

Model = Annotated[str | None, typer.Argument(help="A Llama-family .gguf, .safetensors or Hugging Face folder (with "
                                             "tokenizer.json unless GGUF); prune also runs any other transformers "
                                             "causal LM's Hugging Face folder (pip install 'geodrift[hf]'). "
                                             "Default: the embedded SmolLM2-135M-Instruct.")]
Corpus = Annotated[Path | None, typer.Option("--corpus", help="Text file, folder of .txt or WikiText folder "
                                             "(default: the embedded stdlib-docs corpus). Calibration windows come "
                                             "from its training split, evaluation windows from its held-out split.")]
SeqLen = Annotated[int, typer.Option("--seq-len", help="Tokens per window.")]
EvalWindows = Annotated[int, typer.Option("--eval-windows", help="Held-out windows per perplexity evaluation.")]
CalibWindows = Annotated[int, typer.Option("--calib-windows", help="Calibration windows (Block Influence, angular "
                                           "distance, greedy search).")]
JsonOut = Annotated[Path | None, typer.Option("--json-out", help="Write the full result as JSON here.")]
Csv = Annotated[Path | None, typer.Option("--csv", help="Write tidy rows (one per method/policy and n/ratio) here.")]
Plot = Annotated[Path | None, typer.Option("--plot", help="Figure file; the suffix gives the format (.png, .pdf, .svg).")]
Save = Annotated[Path | None, typer.Option("--save", help="Write the compressed model here as a Hugging Face folder "
                                           "(model.safetensors + config.json): a new folder, or one an earlier --save "
                                           "wrote (with --force); never the input model's folder.")]
SaveForce = Annotated[bool, typer.Option("--force", help="Let --save replace a folder holding geodrift's earlier "
                                         "output (a folder holding anything else is refused).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout instead of tables.")]
Threads = Annotated[int, typer.Option("--threads", help="torch CPU threads. Default 1: on a shared 2-core machine two "
                                      "threads ran these forwards 2.5-3x slower (oversubscription).")]
ShareThreads = Annotated[int | None, typer.Option(
    "--threads", show_default="usable CPUs, at most 2",
    help="torch CPU threads. On a quiet 2-core machine 2 threads ran share's forwards and eigendecompositions "
         "1.75-1.9x faster than 1 (benchmarks/RESULTS_share_speed.md); on a machine busy with other work use 1 "
         "(2 threads there ran 2.5-3x slower).")]


def _csv_list(text: str | None, option: str) -> tuple[str, ...] | None:
    # A comma list option as a tuple (None: not given).
    from geodrift.errors import GeodriftError

    if text is None:
        return None
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    if not items:
        raise GeodriftError(f"{option}: empty list")
    return items


def _ratio_list(text: str) -> tuple[float, ...]:
    from geodrift.errors import GeodriftError

    try:
        return tuple(float(r) for r in _csv_list(text, "--ratios") or ())
    except ValueError:
        raise GeodriftError(f"--ratios: {text!r} is not a comma list of numbers, e.g. 0.2,0.3,0.4") from None


def _show(result: PruneResult | ShareResult, doc: dict[str, Any], figure: Callable[[], Path] | None, *,
          json_out: Path | None, csv_out: Path | None, as_json: bool, quiet: bool, render: Callable[[], None]) -> None:
    # After the job: the files asked for (their paths were claimed by the job), stdout, and what was written.
    from geodrift.render.files import print_document, write_result_files
    from geodrift.render.progress import announce

    written = [Path(result.saved.folder)] if result.saved is not None else []
    written += write_result_files(doc, result.rows(), json_out, csv_out, figure)
    if as_json:
        print_document(doc)
    else:
        render()
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)


@app.command("prune", short_help="Which layers can go? Perplexity after removing 1..N.")
def prune_command(
    model: Model = None, corpus: Corpus = None,
    max_remove: Annotated[int, typer.Option("--max-remove", help="N: evaluate n = 1..N removed layers.")] = 10,
    methods: Annotated[str | None, typer.Option("--methods", help=f"Comma list of {choices.RANKING_NAMES} (default "
                                                "all; random always runs).")] = None,
    random_seeds: Annotated[int, typer.Option("--random-seeds", help="Random rankings (seeds 0..R-1); the "
                                              "rank-test verdict needs at least 20.")] = 20,
    greedy_windows: Annotated[int, typer.Option("--greedy-windows", help="Calibration windows the greedy search "
                                                "scores each candidate on (the first of --calib-windows).")] = 2,
    seq_len: SeqLen = 128, calib_windows: CalibWindows = 4, eval_windows: EvalWindows = 8,
    k: Annotated[int, typer.Option("--k", help="Singular vectors per space for the geometry scores.")] = 8,
    null_draws: Annotated[int, typer.Option("--null-draws", help="Permutation-null draws.")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the permutation null.")] = 0,
    save: Save = None,
    save_method: Annotated[choices.PruneMethod, typer.Option(
        "--save-method", help="Which method's removal set --save writes.")] = choices.DEFAULT_PRUNE_SAVE_METHOD,
    save_n: Annotated[int | None, typer.Option("--save-n", help="How many layers removed in --save (default N).")] = None,
    json_out: JsonOut = None, csv_out: Csv = None, plot: Plot = None, as_json: AsJson = False,
    threads: Threads = 1, dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False, force: SaveForce = False,
    max_memory: MaxMemory = "8G",
    full: Annotated[bool, typer.Option("--full", help="Print every table: ± SE, the random orders' mean ± std, the "
                                       "orders beaten, the layers removed, per-layer scores, correlations, each "
                                       "claim's measurement and the cost (default: perplexities and claims).")] = False,
) -> None:
    """Which layers can go? Held-out perplexity after removing n = 1..N layers, per ranking method."""
    from geodrift.jobs.compress import PruneRequest, run_prune
    from geodrift.render.compress import plot_prune, prune_document, render_prune
    from geodrift.render.progress import ConsoleEvents

    request = PruneRequest(
        model=model, corpus=corpus, max_remove=max_remove, methods=_csv_list(methods, "--methods"),
        random_seeds=random_seeds, greedy_windows=greedy_windows, seq_len=seq_len, calib_windows=calib_windows,
        eval_windows=eval_windows, k=k, null_draws=null_draws, seed=seed, save=save, save_method=save_method.value,
        save_n=save_n, json_out=json_out, csv_out=csv_out, plot=plot, dpi=dpi, threads=threads, force=force,
        max_memory=max_memory)
    with ConsoleEvents(quiet=quiet) as events:
        result = run_prune(request, events)
    _show(result, prune_document(result), functools.partial(plot_prune, result, plot, dpi) if plot else None,
          json_out=json_out, csv_out=csv_out, as_json=as_json, quiet=quiet,
          render=lambda: render_prune(result, wide=wide, full=full))


@app.command("share", short_help="Whitened low-rank compression at equal parameters.")
def share_command(
    model: Model = None, corpus: Corpus = None,
    split: Annotated[str | None, typer.Option("--split", help="sources: calibrate on the stdlib docstrings, evaluate on "
                                              "the pydoc topics (default for the embedded corpus); interleaved: the "
                                              "corpus's training / held-out split (default with --corpus).")] = None,
    ratios: Annotated[str, typer.Option("--ratios", help="Fractions of the projection parameters removed.")] = "0.2,0.3,0.4",
    methods: Annotated[str | None, typer.Option("--methods", help=f"Comma list (default all): {choices.METHOD_NAMES}."
                                                )] = None,
    group_size: Annotated[int, typer.Option("--group-size", help="g: layers sharing one basis.")] = 2,
    calib_windows: Annotated[int, typer.Option("--calib-windows", help="Calibration windows per draw (their tokens must "
                                               "be at least the widest projection input).")] = 24,
    calib_draws: Annotated[int, typer.Option("--calib-draws", help="Calibration draws (disjoint blocks of "
                                             "--calib-windows windows); every method runs on each.")] = 1,
    first_draw: Annotated[int, typer.Option("--first-draw", help="Index of the first calibration draw (to split "
                                            "draws over several runs).")] = 0,
    greedy_windows: Annotated[int, typer.Option("--greedy-windows", help="Calibration windows the greedy layer search "
                                                "scores each candidate on.")] = 2,
    select_windows: Annotated[int, typer.Option("--select-windows", help="Calibration windows that settle geodrift's "
                                                "space per projection by NLL (0: by whitened loss alone).")] = 4,
    verdict_ratio: Annotated[float, typer.Option("--verdict-ratio", help="Ratio of the per-projection sharing "
                                                 "evidence at equal rank and equal parameters (0: skip).")] = 0.3,
    seq_len: SeqLen = 128, eval_windows: EvalWindows = 64,
    cache: Annotated[Path | None, typer.Option("--cache", help="Folder caching the calibration moments (about 0.8 GB "
                                               "per draw for SmolLM2-135M; keyed by the weights and the calibration "
                                               "tokens).")] = None,
    save: Save = None,
    save_method: Annotated[choices.ShareMethod, typer.Option("--save-method", help="Which method --save writes.")
                           ] = choices.DEFAULT_SHARE_SAVE_METHOD,
    save_ratio: Annotated[float | None, typer.Option("--save-ratio", help="Which ratio --save writes (default the "
                                                     "first).")] = None,
    save_format: Annotated[choices.SaveFormat, typer.Option(
        "--save-format", help="factored: low-rank factors, shared bases once (smaller; "
        "geodrift.compress.factorized.load_factored loads it into transformers); dense: a plain Hugging Face "
        "folder.")] = choices.SaveFormat.factored,
    save_dtype: Annotated[choices.SaveDtype, typer.Option("--save-dtype", help="The saved tensors' dtype.")
                          ] = choices.SaveDtype.float32,
    json_out: JsonOut = None, csv_out: Csv = None, plot: Plot = None, as_json: AsJson = False,
    threads: ShareThreads = None, dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False, force: SaveForce = False,
    max_memory: MaxMemory = "8G",
    full: Annotated[bool, typer.Option("--full", help="Print every table: the difference to the best baseline per "
                                       "draw, the paired differences, geodrift's choices, the sharing evidence, each "
                                       "verdict's criterion and the cost (default: perplexities and verdicts).")] = False,
) -> None:
    """Calibration-whitened low-rank compression at equal parameters: SVD-LLM, Basis Sharing, pruning, and continuity's methods."""
    from geodrift.jobs.compress import ShareRequest, run_share
    from geodrift.render.compress_share import plot_share, render_share, share_document
    from geodrift.render.progress import ConsoleEvents

    request = ShareRequest(
        model=model, corpus=corpus, split=split, ratios=_ratio_list(ratios), methods=_csv_list(methods, "--methods"),
        group_size=group_size, calib_windows=calib_windows, calib_draws=calib_draws, first_draw=first_draw,
        greedy_windows=greedy_windows, select_windows=select_windows, verdict_ratio=verdict_ratio, seq_len=seq_len,
        eval_windows=eval_windows, cache=cache, save=save, save_method=save_method.value, save_ratio=save_ratio,
        save_format=save_format.value, save_dtype=save_dtype.value, json_out=json_out, csv_out=csv_out, plot=plot,
        dpi=dpi, threads=threads, force=force, max_memory=max_memory)
    with ConsoleEvents(quiet=quiet) as events:
        result = run_share(request, events)
    _show(result, share_document(result), functools.partial(plot_share, result, plot, dpi) if plot else None,
          json_out=json_out, csv_out=csv_out, as_json=as_json, quiet=quiet,
          render=lambda: render_share(result, wide=wide, full=full))
