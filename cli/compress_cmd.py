"""`geodrift compress prune|share [MODEL]`: does continuity predict what compression can remove?

``prune``: layer rankings (two data-free geometry scores, Block Influence, angular distance, random,
greedy) and the held-out perplexity after removing n = 1..N layers. ``share``: calibration-whitened
low-rank compression (SVD-LLM, Basis Sharing, pruning, continuity's methods and their controls) at
equal parameters, and per projection which space a shared basis belongs in.
Every option is checked before the model is loaded.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, MaxMemory, Quiet, Wide
from geodrift.compress.table import DEFAULT_PRUNE_SAVE, DEFAULT_SAVE, METHODS, RANKINGS, SEARCH

app = typer.Typer(help="Layer pruning and calibration-whitened low-rank compression, judged by held-out perplexity.",
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


def share_threads() -> int:
    """``compress share``'s default ``--threads``: the CPUs this process may use, at most 2."""
    from geodrift.io.provenance import thread_counts

    return min(2, int(thread_counts()["cpus"] or 1))


def _csv_list(text: str | None, option: str) -> tuple[str, ...] | None:
    from geodrift.errors import GeodriftError

    if text is None:
        return None
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    if not items:
        raise GeodriftError(f"{option}: empty list")
    return items


def _check_common(seq_len: int, windows: dict[str, int], plot: Path | None, dpi: int, threads: int,
                  outputs: dict[str, Path | None], max_memory: str) -> int:
    # Every option and output path, before the model is opened; returns --max-memory in bytes.
    from geodrift.cli.checks import check_outputs
    from geodrift.errors import GeodriftError
    from geodrift.io.checks import parse_size
    from geodrift.render.figures import check_dpi, figure_format

    if seq_len < 2:
        raise GeodriftError(f"--seq-len: must be at least 2, got {seq_len}")
    for option, value in windows.items():
        if value < 1:
            raise GeodriftError(f"{option}: must be at least 1, got {value}")
    if plot is not None:
        figure_format(plot)
        check_dpi(dpi)
    if threads < 1:
        raise GeodriftError(f"--threads: must be at least 1, got {threads}")
    limit = parse_size(max_memory)
    check_outputs({**outputs, "--plot": plot})
    import torch

    torch.set_num_threads(threads)
    return limit


def _inputs(model: str | None, corpus: Path | None) -> list[Path]:
    from geodrift.pretrained import embedded_model_path

    return [Path(model) if model is not None else embedded_model_path(), *([corpus] if corpus else [])]


def _check_save(save: Path | None, force: bool, model: str | None, corpus: Path | None) -> None:
    # The output-folder policy (geodrift.io.outdir), checked before the model is loaded.
    if save is not None:
        from geodrift.io.outdir import check_replace_folder

        check_replace_folder(save, force=force, inputs=_inputs(model, corpus))


def _replace(save: Path, force: bool, model: str | None, corpus: Path | None, write: Any) -> Path:
    from geodrift.io.outdir import replace_folder

    return replace_folder(save, write, force=force, inputs=_inputs(model, corpus))


def _write(result: Any, kind: str, json_out: Path | None, csv_out: Path | None,
           figure: Callable[[], Path] | None = None) -> list[Path]:
    # The JSON, the CSV and the figure replace the previous run's together, or not at all (atomic.output_set).
    from geodrift.io.atomic import document, output_set, write_json, write_text
    from geodrift.render.files import csv_text

    written = []
    with output_set():
        if json_out:
            write_json(json_out, document(kind, result.to_dict()))
            written.append(json_out)
        if csv_out:
            write_text(csv_out, csv_text(result.rows()))
            written.append(csv_out)
        if figure is not None:
            written.append(figure())
    return written


@app.command("prune")
def prune_command(
    model: Model = None, corpus: Corpus = None,
    max_remove: Annotated[int, typer.Option("--max-remove", help="N: evaluate n = 1..N removed layers.")] = 10,
    methods: Annotated[str | None, typer.Option("--methods", help=f"Comma list of {', '.join(RANKINGS)} (default "
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
        "--save-method", help="Which method's removal set --save writes.")] = choices.PruneMethod(DEFAULT_PRUNE_SAVE),
    save_n: Annotated[int | None, typer.Option("--save-n", help="How many layers removed in --save (default N).")] = None,
    json_out: JsonOut = None, csv_out: Csv = None, plot: Plot = None, as_json: AsJson = False,
    threads: Threads = 1, dpi: Dpi = 300, wide: Wide = False, quiet: Quiet = False, force: SaveForce = False,
    max_memory: MaxMemory = "8G",
) -> None:
    """Which layers can go? Held-out perplexity after removing n = 1..N layers, per ranking method."""
    from geodrift.compress.model import load_setup
    from geodrift.compress.prune import PruneSpec, run_prune
    from geodrift.errors import GeodriftError
    from geodrift.io.atomic import document, to_json
    from geodrift.pretrained import open_model
    from geodrift.render.progress import JobProgress, announce

    spec = PruneSpec(max_remove=max_remove, methods=_csv_list(methods, "--methods") or tuple(RANKINGS),
                     random_seeds=random_seeds, greedy_windows=greedy_windows, k=k, null_draws=null_draws, seed=seed)
    spec.check()
    limit = _check_common(seq_len, {"--calib-windows": calib_windows, "--eval-windows": eval_windows,
                                    "--greedy-windows": greedy_windows}, plot, dpi, threads,
                          {"--json-out": json_out, "--csv": csv_out}, max_memory)
    if any(RANKINGS[m].signal == SEARCH for m in spec.methods) and greedy_windows > calib_windows:
        raise GeodriftError(f"--greedy-windows: {greedy_windows} > --calib-windows {calib_windows}")
    if save is not None and save_method.value not in spec.methods:
        raise GeodriftError(f"--save-method: {save_method.value!r} is not among the methods run "
                            f"({', '.join(spec.methods)})")
    save_n = max_remove if save_n is None else save_n
    if save is not None and not 1 <= save_n <= max_remove:
        raise GeodriftError(f"--save-n: {save_n} is outside 1..--max-remove ({max_remove})")
    _check_save(save, force, model, corpus)
    spec.check(int(open_model(model).config["n_layers"]))
    setup = load_setup(model, corpus, seq_len=seq_len, calib_windows=calib_windows, eval_windows_count=eval_windows,
                       max_memory=limit, on_stage=lambda text: announce(text, quiet=quiet))
    with JobProgress("pruning", 1, "evaluations", quiet=quiet) as bar:
        result = run_prune(setup, spec, progress=lambda stage, done, total: bar.update(
            completed=done, total=total, description=stage))
    written: list[Path] = []
    if save is not None:
        from geodrift.compress.prune import save_pruned

        save_pruned(setup, result, save_method.value, save_n, save, source=model, force=force,
                    inputs=_inputs(model, corpus))
        written.append(save)
    figure = None
    if plot:
        from geodrift.render.compress import plot_prune

        figure = functools.partial(plot_prune, result, plot, dpi)
    written += _write(result, "compress_prune", json_out, csv_out, figure)
    if as_json:
        sys.stdout.write(to_json(document("compress_prune", result.to_dict())) + "\n")
    else:
        from geodrift.render.compress import render_prune

        render_prune(result, wide=wide)
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)


@app.command("share")
def share_command(
    model: Model = None, corpus: Corpus = None,
    split: Annotated[str | None, typer.Option("--split", help="sources: calibrate on the stdlib docstrings, evaluate on "
                                              "the pydoc topics (default for the embedded corpus); interleaved: the "
                                              "corpus's training / held-out split (default with --corpus).")] = None,
    ratios: Annotated[str, typer.Option("--ratios", help="Fractions of the projection parameters removed.")] = "0.2,0.3,0.4",
    methods: Annotated[str | None, typer.Option("--methods", help=f"Comma list (default all): {', '.join(METHODS)}."
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
                           ] = choices.ShareMethod(DEFAULT_SAVE),
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
    from geodrift.compress.share_run import ShareSpec, run_share
    from geodrift.compress.sources import load_compress_setup
    from geodrift.errors import GeodriftError
    from geodrift.io.atomic import document, to_json
    from geodrift.pretrained import open_llama, tokenizer_for
    from geodrift.render.progress import JobProgress, announce

    try:
        ratio_list = tuple(float(r) for r in _csv_list(ratios, "--ratios") or ())
    except ValueError:
        raise GeodriftError(f"--ratios: {ratios!r} is not a comma list of numbers, e.g. 0.2,0.3,0.4") from None
    spec = ShareSpec(ratios=ratio_list, methods=_csv_list(methods, "--methods") or tuple(METHODS), group_size=group_size,
                     calib_draws=calib_draws, first_draw=first_draw, greedy_windows=greedy_windows,
                     select_windows=select_windows,
                     verdict_ratio=verdict_ratio if verdict_ratio != 0 else None)
    spec.check()
    split = split or ("sources" if corpus is None else "interleaved")
    limit = _check_common(seq_len, {"--eval-windows": eval_windows, "--calib-windows": calib_windows}, plot, dpi,
                          share_threads() if threads is None else threads, {"--json-out": json_out, "--csv": csv_out},
                          max_memory)
    save_ratio = ratio_list[0] if save_ratio is None else save_ratio
    if save is not None and (save_method.value not in spec.methods or save_ratio not in ratio_list):
        raise GeodriftError(f"--save-method/--save-ratio: {save_method.value} at {save_ratio} is not among the runs "
                            f"(methods {', '.join(spec.methods)}; ratios {ratios})")
    _check_save(save, force, model, corpus)
    ckpt = open_llama(model)
    spec.check(int(ckpt.config["n_layers"]))
    widest = max(int(ckpt.config.get("d_model") or 0), int(ckpt.config.get("d_ff") or 0))
    if calib_windows * seq_len < widest:
        raise GeodriftError(f"--calib-windows {calib_windows}: {calib_windows * seq_len} calibration tokens are fewer "
                            f"than the widest projection input ({widest}), so its second moment is singular; use at "
                            f"least {-(-widest // seq_len)} windows of {seq_len} tokens")
    for option, value in (("--greedy-windows", greedy_windows), ("--select-windows", select_windows)):
        if value > calib_windows:
            raise GeodriftError(f"{option}: {value} > --calib-windows {calib_windows}")
    tokenizer_for(model)  # a missing tokenizer.json fails here, before the model is loaded
    setup, texts = load_compress_setup(model, corpus, split=split, seq_len=seq_len, calib_windows=calib_windows,
                                       eval_count=eval_windows, draws=first_draw + calib_draws, max_memory=limit,
                                       on_stage=lambda text: announce(text, quiet=quiet))
    with JobProgress("compressing", 1, "steps", quiet=quiet) as bar:
        result, kept = run_share(setup, spec, texts.draws, progress=lambda stage, done, total: bar.update(
            completed=done, total=total, description=stage), cache=str(cache) if cache else None,
            keep=(save_method.value, save_ratio) if save is not None else None)
    written: list[Path] = []
    if save is not None and kept is not None:
        from geodrift.compress.factorized import save_dense, save_factored

        writer = save_factored if save_format == choices.SaveFormat.factored else save_dense
        written.append(writer(setup, kept, save, save_dtype.value, force=force, inputs=_inputs(model, corpus)))
        result.saved = {"folder": str(save), "method": save_method.value, "ratio": save_ratio, "format": save_format.value,
                        "dtype": save_dtype.value, "bytes": {f.name: f.stat().st_size for f in sorted(save.iterdir())},
                        "dense_bytes": 4 * sum(t.numel() for t in setup.model.state_dict().values())}
    figure = None
    if plot:
        from geodrift.render.compress_share import plot_share

        figure = functools.partial(plot_share, result, plot, dpi)
    written += _write(result, "compress_share", json_out, csv_out, figure)
    if as_json:
        sys.stdout.write(to_json(document("compress_share", result.to_dict())) + "\n")
    else:
        from geodrift.render.compress_share import render_share

        render_share(result, wide=wide, full=full)
    if written:
        announce("wrote " + ", ".join(str(p) for p in written), quiet=quiet)
