"""The ``compress prune`` and ``compress share`` jobs: one typed request each, checked whole before any work.

Each job checks every option (types, ranges, memory, the output files and the ``--save`` folder), opens
the model, runs the experiment, writes ``--save`` and returns the result with a typed
:class:`geodrift.compress.saved.Saved` (or None). The result's JSON, CSV and figure are the face's to
write (``geodrift.render``): the job has claimed their paths already, so they cannot fail after the work.

Example:
    >>> run_prune(PruneRequest(max_remove=0))
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --max-remove: must be at least 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from geodrift.compress.table import DEFAULT_PRUNE_SAVE, DEFAULT_SAVE, RANKINGS, SEARCH
from geodrift.errors import GeodriftError
from geodrift.jobs.events import SILENT, Events
from geodrift.jobs.field_types import check_request

if TYPE_CHECKING:
    from geodrift.compress.factorized import Compressed
    from geodrift.compress.model import Setup
    from geodrift.compress.prune import PruneResult
    from geodrift.compress.saved import Saved
    from geodrift.compress.share_run import ShareResult
    from geodrift.lm.llama import LlamaLM

SAVE_FORMATS = ("factored", "dense")


@dataclass(frozen=True)
class PruneRequest:
    """Every option of ``geodrift compress prune`` that changes what is computed or written (its help says what
    each means; ``--json``, ``--wide`` and ``--quiet`` only change what the face prints).

    ``methods`` None runs every ranking; ``save_n`` None removes ``max_remove`` layers in ``--save``.
    """

    model: str | Path | None = None
    corpus: Path | None = None
    max_remove: int = 10
    methods: tuple[str, ...] | None = None
    random_seeds: int = 20
    greedy_windows: int = 2
    seq_len: int = 128
    calib_windows: int = 4
    eval_windows: int = 8
    k: int = 8
    null_draws: int = 100
    seed: int = 0
    save: Path | None = None
    save_method: str = DEFAULT_PRUNE_SAVE
    save_n: int | None = None
    json_out: Path | None = None
    csv_out: Path | None = None
    plot: Path | None = None
    dpi: int = 300
    threads: int = 1
    force: bool = False
    max_memory: str = "8G"


@dataclass(frozen=True)
class ShareRequest:
    """Every option of ``geodrift compress share`` that changes what is computed or written (``--json``,
    ``--wide``, ``--quiet`` and ``--full`` only change what the face prints).

    ``split`` None: ``sources`` for the embedded corpus, ``interleaved`` with ``corpus``; ``methods`` None:
    every method; ``verdict_ratio`` 0 skips the sharing evidence; ``save_ratio`` None: the first ratio;
    ``threads`` None: the usable CPUs, at most 2.
    """

    model: str | Path | None = None
    corpus: Path | None = None
    split: str | None = None
    ratios: tuple[float, ...] = (0.2, 0.3, 0.4)
    methods: tuple[str, ...] | None = None
    group_size: int = 2
    calib_windows: int = 24
    calib_draws: int = 1
    first_draw: int = 0
    greedy_windows: int = 2
    select_windows: int = 4
    verdict_ratio: float = 0.3
    seq_len: int = 128
    eval_windows: int = 64
    cache: Path | None = None
    save: Path | None = None
    save_method: str = DEFAULT_SAVE
    save_ratio: float | None = None
    save_format: str = "factored"
    save_dtype: str = "float32"
    json_out: Path | None = None
    csv_out: Path | None = None
    plot: Path | None = None
    dpi: int = 300
    threads: int | None = None
    force: bool = False
    max_memory: str = "8G"


def run_prune(request: PruneRequest, events: Events = SILENT) -> PruneResult:
    """Rank the layers, evaluate the model without n = 1..N of them, and write ``--save``.

    Args:
        request: the options; events: where progress goes (:data:`geodrift.jobs.events.SILENT`: nowhere).

    Returns:
        The result; its ``saved`` is what ``--save`` wrote (None without it).

    Raises:
        GeodriftError: naming the option, before any work: a value of the wrong type or out of range, a run
            above ``max_memory``, an output file or ``--save`` folder that cannot be written or is a user's file.
    """
    from geodrift.compress.model import load_setup
    from geodrift.compress.prune import PruneSpec, save_pruned
    from geodrift.compress.prune import run_prune as prune
    from geodrift.pretrained import open_model

    r = request
    check_request(r)
    spec = PruneSpec(max_remove=r.max_remove, methods=tuple(RANKINGS) if r.methods is None else r.methods,
                     random_seeds=r.random_seeds, greedy_windows=r.greedy_windows, k=r.k, null_draws=r.null_draws,
                     seed=r.seed)
    spec.check()
    limit = _check_common(r, {"--calib-windows": r.calib_windows, "--eval-windows": r.eval_windows,
                              "--greedy-windows": r.greedy_windows}, r.threads)
    if any(RANKINGS[m].signal == SEARCH for m in spec.methods) and r.greedy_windows > r.calib_windows:
        raise GeodriftError(f"--greedy-windows: {r.greedy_windows} > --calib-windows {r.calib_windows}")
    if r.save is not None and r.save_method not in spec.methods:
        raise GeodriftError(f"--save-method: {r.save_method!r} is not among the methods run ({', '.join(spec.methods)})")
    save_n = r.max_remove if r.save_n is None else r.save_n
    if r.save is not None and not 1 <= save_n <= r.max_remove:
        raise GeodriftError(f"--save-n: {save_n} is outside 1..--max-remove ({r.max_remove})")
    _check_save(r.save, r.force, _inputs(r.model, r.corpus))
    spec.check(int(open_model(r.model).config["n_layers"]))
    setup = load_setup(r.model, r.corpus, seq_len=r.seq_len, calib_windows=r.calib_windows,
                       eval_windows_count=r.eval_windows, max_memory=limit, on_stage=events.stage)
    events.begin("pruning", 1, "evaluations")
    result = prune(setup, spec, progress=lambda stage, done, total: events.advance(done, total, stage))
    events.end()
    if r.save is not None:
        result.saved = save_pruned(setup, result, r.save_method, save_n, r.save, source=r.model, force=r.force,
                                   inputs=_inputs(r.model, r.corpus))
    return result


def run_share(request: ShareRequest, events: Events = SILENT) -> ShareResult:
    """Compress at every ratio with every method on every calibration draw, judge the claims, write ``--save``.

    Args:
        request: the options; events: where progress goes (:data:`geodrift.jobs.events.SILENT`: nowhere).

    Returns:
        The result; its ``saved`` is what ``--save`` wrote (None without it).

    Raises:
        GeodriftError: naming the option, before the model is loaded (as :func:`run_prune`; also too few
            calibration tokens for the widest projection, or a model that is not Llama-family).
    """
    from geodrift.compress.factorized import DTYPES
    from geodrift.compress.share_run import ShareSpec
    from geodrift.compress.share_run import run_share as share
    from geodrift.compress.sources import load_compress_setup
    from geodrift.pretrained import open_llama, tokenizer_for

    r = request
    check_request(r)
    spec = ShareSpec(ratios=r.ratios, methods=r.methods if r.methods is not None else ShareSpec.methods,
                     group_size=r.group_size, calib_draws=r.calib_draws, first_draw=r.first_draw,
                     greedy_windows=r.greedy_windows, select_windows=r.select_windows,
                     verdict_ratio=r.verdict_ratio if r.verdict_ratio != 0 else None)
    spec.check()
    for option, choice, allowed in (("--save-format", r.save_format, SAVE_FORMATS),
                                   ("--save-dtype", r.save_dtype, tuple(DTYPES))):
        if choice not in allowed:
            raise GeodriftError(f"{option}: {choice!r} is not one of {', '.join(allowed)}")
    limit = _check_common(r, {"--eval-windows": r.eval_windows, "--calib-windows": r.calib_windows},
                          share_threads() if r.threads is None else r.threads)
    save_ratio = r.ratios[0] if r.save_ratio is None else r.save_ratio
    if r.save is not None and (r.save_method not in spec.methods or save_ratio not in r.ratios):
        raise GeodriftError(f"--save-method/--save-ratio: {r.save_method} at {save_ratio} is not among the runs "
                            f"(methods {', '.join(spec.methods)}; ratios {','.join(map(str, r.ratios))})")
    _check_save(r.save, r.force, _inputs(r.model, r.corpus))
    ckpt = open_llama(r.model)
    spec.check(int(ckpt.config["n_layers"]))
    widest = max(int(ckpt.config.get("d_model") or 0), int(ckpt.config.get("d_ff") or 0))
    if r.calib_windows * r.seq_len < widest:
        raise GeodriftError(f"--calib-windows {r.calib_windows}: {r.calib_windows * r.seq_len} calibration tokens are "
                            f"fewer than the widest projection input ({widest}), so its second moment is singular; "
                            f"use at least {-(-widest // r.seq_len)} windows of {r.seq_len} tokens")
    for option, value in (("--greedy-windows", r.greedy_windows), ("--select-windows", r.select_windows)):
        if value > r.calib_windows:
            raise GeodriftError(f"{option}: {value} > --calib-windows {r.calib_windows}")
    tokenizer_for(r.model)  # a missing tokenizer.json fails here, before the model is loaded
    setup, texts = load_compress_setup(r.model, r.corpus, split=r.split or ("sources" if r.corpus is None else
                                                                            "interleaved"),
                                       seq_len=r.seq_len, calib_windows=r.calib_windows, eval_count=r.eval_windows,
                                       draws=r.first_draw + r.calib_draws, max_memory=limit, on_stage=events.stage)
    events.begin("compressing", 1, "steps")
    result, kept = share(setup, spec, texts.draws, progress=lambda stage, done, total: events.advance(done, total, stage),
                         cache=str(r.cache) if r.cache else None,
                         keep=(r.save_method, save_ratio) if r.save is not None else None)
    events.end()
    if r.save is not None and kept is not None:
        result.saved = _save_shared(r, setup, kept, save_ratio)
    return result


def share_threads() -> int:
    """``compress share``'s default ``--threads``: the CPUs this process may use, at most 2.

    Example:
        >>> 1 <= share_threads() <= 2
        True
    """
    from geodrift.io.provenance import thread_counts

    return min(2, int(thread_counts()["cpus"] or 1))


def _save_shared(r: ShareRequest, setup: Setup[LlamaLM], kept: Compressed, ratio: float) -> Saved:
    # The factored or dense folder, and what was written.
    from geodrift.compress.factorized import save_dense, save_factored
    from geodrift.compress.saved import SHARED, Saved, file_sizes

    assert r.save is not None
    writer = save_factored if r.save_format == SAVE_FORMATS[0] else save_dense
    folder = writer(setup, kept, r.save, r.save_dtype, force=r.force, inputs=_inputs(r.model, r.corpus))
    dense = 4 * sum(t.numel() for t in setup.model.state_dict().values())
    return Saved(str(r.save), SHARED, r.save_method, file_sizes(folder), ratio=ratio, format=r.save_format,
                 dtype=r.save_dtype, dense_bytes=dense)


def _check_common(r: PruneRequest | ShareRequest, windows: dict[str, int], threads: int) -> int:
    # Every option and output path both commands share, before the model is opened; returns --max-memory in bytes.
    from geodrift.io.checks import check_dpi, figure_format, parse_size
    from geodrift.io.outdir import check_distinct, claim_outputs

    if r.seq_len < 2:
        raise GeodriftError(f"--seq-len: must be at least 2, got {r.seq_len}")
    for option, value in windows.items():
        if value < 1:
            raise GeodriftError(f"{option}: must be at least 1, got {value}")
    if r.plot is not None:
        figure_format(r.plot)
        check_dpi(r.dpi)
    if threads < 1:
        raise GeodriftError(f"--threads: must be at least 1, got {threads}")
    limit = parse_size(r.max_memory)
    named = {"--json-out": r.json_out, "--csv": r.csv_out, "--plot": r.plot}
    files = [(option, Path(path)) for option, path in named.items() if path is not None]
    inputs = [r.model, r.corpus] if isinstance(r.model, (str, Path)) else [r.corpus]
    check_distinct([*files, *([("--save", Path(r.save))] if r.save is not None else [])], named, inputs)
    claim_outputs(files, named=named, inputs=inputs)
    import torch

    torch.set_num_threads(threads)
    return limit


def _inputs(model: str | Path | None, corpus: Path | None) -> list[Path]:
    from geodrift.pretrained import embedded_model_path

    return [Path(model) if model is not None else embedded_model_path(), *([Path(corpus)] if corpus else [])]


def _check_save(save: Path | None, force: bool, inputs: list[Path]) -> None:
    # The output-folder policy (geodrift.io.outdir), checked before the model is loaded.
    if save is not None:
        from geodrift.io.outdir import check_replace_folder

        check_replace_folder(save, force=force, inputs=inputs)
