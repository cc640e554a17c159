"""One run skeleton for both simulators: a RunSpec and its seeds -> trained models, records, reports.

``run(spec, seeds)`` builds the simulator's parts (``_mlp_parts`` / ``_llama_parts``: model, batches,
loss, tracker), trains them with the shared loop (``geodrift.sim.train.train``: clip -> step ->
schedule), checkpoints and resumes (model, optimiser, scheduler and tracker state; bitwise
identical to an uninterrupted run on CPU), then measures the final weights of every member with
``geodrift.continuity.measure`` (the same report as ``geodrift scan``) and writes, per seed,
``<out>/<slug(label)>/seed<seed>/run.json`` and ``report.json``.

Seeds: the MLP trains ``len(seeds)`` members as one batched ensemble (members never interact, see
``geodrift.sim.mlp``); the transformer takes one seed per call. ``run_seeds`` trains one group per
seed or one ensemble, as asked. A resumable checkpoint lives in
``<out>/<slug(label)>/<group>/checkpoint.pt`` (``group`` = ``seed42`` or ``ens-42-123-777``) and is
removed once the run completes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from geodrift.atomic import document, write_json
from geodrift.continuity import MeasureSpec, Report, measure
from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import Corpus, TokenBatches, encode_ids, eval_windows, lm_loss, load_corpus, perplexity
from geodrift.lm.tokenizer import Tokenizer, make_tokenizer
from geodrift.sim.config import ImageData, LlamaConfig, MLPConfig, RunSpec, TextData
from geodrift.sim.data import Dataset, ShuffledBatches, load_dataset
from geodrift.sim.hf_export import hf_config, hf_step_dir, save_hf_folder
from geodrift.sim.mlp import ResidualMLP, build_mlp, ensemble_loss
from geodrift.sim.record import (
    RunRecord,
    load_checkpoint,
    load_record,
    run_dir,
    save_checkpoint,
    slug,
    write_record,
)
from geodrift.sim.track import Latest, LlamaTracker, MLPTracker, Row, summarize
from geodrift.sim.train import BatchSource, LossFn, make_optimizer, make_scheduler, resolve_device, train
from geodrift.weights import WeightSet


@dataclass
class RunResult:
    """One seed's outcome: its record, the final weights' continuity report, and its folder."""

    record: RunRecord
    report: Report
    path: Path | None


@dataclass(frozen=True)
class StepStatus:
    """What a progress display shows after each training step of a run."""

    label: str  # the configuration
    seeds: tuple[int, ...]  # the run's seed(s) (an MLP ensemble trains several at once)
    done: int  # steps completed in this run
    steps: int  # the run's length
    loss: torch.Tensor  # that step's training loss, detached 0-d (float() waits for the device: do it sparingly)
    latest: Latest | None  # the latest tracked weight continuity and its null (None before the first track)


Stage = Callable[[str], None]


def _quiet(message: str) -> None:
    """The default start-up message sink: say nothing."""


@dataclass
class _Parts:
    # What a simulator plugs into the skeleton.
    model: nn.Module
    batches: BatchSource
    loss_fn: LossFn
    tracker: MLPTracker | LlamaTracker | None
    data_note: str
    weightset: Callable[[int], WeightSet]  # member -> final weights
    untracked_rows: Callable[[int], list[Row]] = lambda step: []  # end-of-run rows when tracking is off
    files: dict[str, tuple[str, Any]] = field(default_factory=dict)  # file name -> (kind, payload) beside run.json


def run(spec: RunSpec, seeds: list[int], *, out: str | Path | None = None, resume: bool = False,
        device: str = "auto", checkpoint_every: int = 0, track: bool = True, preset: str | None = None,
        stop_at: int | None = None, on_step: Callable[[StepStatus], None] | None = None,
        on_stage: Stage = _quiet, save_hf_every: int = 0) -> list[RunResult]:
    """Train ``spec`` for ``seeds`` as one group; record, checkpoint, resume, report.

    Args:
        spec: the configuration.
        seeds: the group's seeds (MLP: one ensemble member each; transformer: exactly one).
        out: folder for records and checkpoints (None: nothing is written).
        resume: reuse complete records, or continue from the group's checkpoint under ``out``.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        checkpoint_every: save a resumable checkpoint every this many steps (0: none).
        track: False turns tracking off (the compute floor of the overhead benchmarks).
        preset: the preset name stored in the records.
        stop_at: interrupt before this step (records are written with status ``partial``).
        on_step: called after every step with a :class:`StepStatus` (step, loss, latest continuity).
        on_stage: called with a message before slow start-up work (data loading, tokenizer training).
        save_hf_every: transformer only, with ``out``: save the weights as a Hugging Face folder
            (``<run folder>/hf/step-<n>/``, :mod:`geodrift.sim.hf_export`) at step 0, every this many
            steps and at the end (0: never).

    Returns:
        One RunResult per seed, in ``seeds`` order.

    Raises:
        GeodriftError: bad device or seeds, a checkpoint of another configuration, divergence.

    Example:
        >>> from geodrift.sim.presets import preset
        >>> [r.record.status for r in run(preset("mlp", "smoke")[0], [42])]  # doctest: +SKIP
        ['complete']
    """
    if spec.sim == "transformer" and len(seeds) != 1:
        raise GeodriftError("--batch-seeds: the transformer trains one seed per run; drop --batch-seeds")
    if save_hf_every < 0 or (save_hf_every and (spec.sim != "transformer" or out is None)):
        raise GeodriftError(f"--save-hf-every {save_hf_every}: needs a value >= 1, the transformer simulator and "
                            "--out DIR (where the Hugging Face folders go)")
    if out is not None and resume:
        done = _reload(out, spec, seeds)
        if done is not None:
            return done
    dev = resolve_device(device)
    if spec.sim == "mlp":
        parts = _mlp_parts(spec, seeds, dev, track, on_stage)
    else:
        parts = _llama_parts(spec, seeds[0], dev, track, on_stage)
    optimizer = make_optimizer(parts.model.parameters(), spec.train)
    scheduler = make_scheduler(optimizer, spec.train)
    start_step, elapsed = 0, 0.0
    ckpt = checkpoint_path(out, spec.label, seeds) if out is not None else None
    if ckpt is not None and resume and ckpt.is_file():
        state = load_checkpoint(ckpt)
        if state.get("spec") != _stored(spec) or state.get("seeds") != list(seeds):
            raise GeodriftError(f"{ckpt}: checkpoint belongs to another configuration or seed list; "
                                "delete it or choose another --out")
        parts.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if parts.tracker is not None:
            parts.tracker.load_state_dict(state["tracker"])
        start_step, elapsed = int(state["step"]), float(state["seconds"])
    t0 = time.perf_counter()

    def save(next_step: int) -> None:
        if ckpt is not None:
            save_checkpoint(ckpt, {
                "step": next_step, "spec": _stored(spec), "seeds": list(seeds), "model": parts.model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "tracker": parts.tracker.state_dict() if parts.tracker else None,
                "seconds": elapsed + time.perf_counter() - t0,
            })

    def save_hf(done: int) -> None:
        if save_hf_every and out is not None and (done % save_hf_every == 0 or done == spec.train.steps):
            assert isinstance(spec.model, LlamaConfig) and isinstance(parts.model, LlamaLM)
            save_hf_folder(parts.model, hf_config(spec.model, parts.model.lm_head.out_features), hf_step_dir(
                run_dir(out, spec.label, seeds[0]), done), done)

    def step_done(done: int, loss: torch.Tensor) -> None:
        save_hf(done)
        if on_step is not None:
            on_step(StepStatus(spec.label, tuple(seeds), done, spec.train.steps, loss,
                               parts.tracker.latest if parts.tracker else None))

    if start_step == 0:
        save_hf(0)

    end = train(parts.model, parts.batches, parts.loss_fn, optimizer, scheduler, steps=spec.train.steps,
                grad_clip=spec.train.grad_clip, tracker=parts.tracker, start_step=start_step, stop_at=stop_at,
                checkpoint_every=checkpoint_every, on_checkpoint=save if ckpt is not None else None,
                on_step=step_done if (on_step is not None or save_hf_every) else None)
    wall = time.perf_counter() - t0
    status = "complete" if end == spec.train.steps else "partial"
    if status == "complete" and ckpt is not None and ckpt.is_file():
        ckpt.unlink()  # the records now hold everything; resume reuses them
    timing = {"wall_s": elapsed + wall, "track_s": parts.tracker.seconds if parts.tracker else 0.0,
              "members": float(len(seeds)), "steps": float(end),
              "tokens_per_second" if spec.sim == "transformer" else "steps_per_second": (end - start_step) * (
                  _tokens_per_step(spec) if spec.sim == "transformer" else 1) / max(wall, 1e-9)}
    results = []
    for e, seed in enumerate(seeds):
        rows = parts.tracker.rows(e) if parts.tracker is not None else parts.untracked_rows(end)
        report = measure(parts.weightset(e), MeasureSpec(k=spec.track.final_k, null_draws=spec.track.final_null_draws,
                                                         seed=seed), trajectory=True)
        record = RunRecord(label=spec.label, seed=seed, config=_stored(spec), data=parts.data_note,
                           device=str(dev), preset=preset, rows=[list(r) for r in rows],
                           summary={**summarize(rows), **_report_summary(report)}, timing=dict(timing),
                           status=status, vectors=parts.tracker.vectors[e] if parts.tracker is not None else {})
        path = None
        if out is not None:
            path = write_record(out, record).parent
            write_json(path / "report.json", document("continuity_report", report.to_dict()))
            for name, (kind, payload) in parts.files.items():
                write_json(path / name, document(kind, payload))
        results.append(RunResult(record, report, path))
    return results


def run_seeds(spec: RunSpec, seeds: list[int], *, batched: bool = False, **options: Any) -> list[RunResult]:
    """Train ``spec`` for every seed: one batched ensemble (MLP, ``batched``) or one run per seed.

    One run per seed is the CPU default: each record is then bitwise what a single run with that
    seed gives. ``options`` are :func:`run`'s.
    """
    if batched and spec.sim == "mlp":
        return run(spec, seeds, **options)
    return [result for seed in seeds for result in run(spec, [seed], **options)]


def default_batched(device: str) -> bool:
    """Batch MLP seeds by default only where it pays: on CUDA."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def checkpoint_path(out: str | Path, label: str, seeds: list[int]) -> Path:
    """Where the resumable checkpoint of one group lives."""
    group = f"seed{seeds[0]}" if len(seeds) == 1 else "ens-" + "-".join(str(s) for s in seeds)
    return Path(out) / slug(label) / group / "checkpoint.pt"


def load_result(folder: str | Path) -> RunResult:
    """Reload one run (``run.json`` and ``report.json``) for re-rendering.

    Raises:
        GeodriftError: missing or unreadable files.
    """
    folder = Path(folder)
    record = load_record(folder)
    try:
        report = Report.from_dict(json.loads((folder / "report.json").read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as error:
        raise GeodriftError(f"{folder / 'report.json'}: cannot read the run's report ({error}); re-run it") from None
    return RunResult(record, report, folder)


def load_results(out: str | Path) -> list[RunResult]:
    """Every run saved under ``out`` (folders holding ``run.json`` and ``report.json``), sorted by path."""
    return [load_result(p.parent) for p in sorted(Path(out).rglob("run.json")) if (p.parent / "report.json").is_file()]


def _reload(out: str | Path, spec: RunSpec, seeds: list[int]) -> list[RunResult] | None:
    folders = [run_dir(out, spec.label, s) for s in seeds]
    if not all((f / "run.json").is_file() and (f / "report.json").is_file() for f in folders):
        return None
    results = [load_result(f) for f in folders]
    if all(r.record.status == "complete" and r.record.config == _stored(spec) for r in results):
        return results
    return None


def _stored(spec: RunSpec) -> dict[str, Any]:
    # The spec as it reads back from JSON (tuples become lists), for comparisons with records.
    return json.loads(json.dumps(spec.to_dict()))  # type: ignore[no-any-return]


def _tokens_per_step(spec: RunSpec) -> int:
    assert isinstance(spec.data, TextData)
    return spec.train.batch_size * spec.data.seq_len


def _report_summary(report: Report) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for r in report.roles:
        for space in ("v", "u"):
            vc = r.spaces[space].vectors[0]
            out[f"final {r.role} {space}1"] = vc.mean
            out[f"final {r.role} {space}1 null"] = vc.null_mean
            out[f"final {r.role} {space}1 z"] = vc.z
    return out


# ---- the MLP -------------------------------------------------------------------------------
_IMAGES: dict[str, Dataset] = {}  # data sets loaded by this process (several presets' rows share one)


def _image_data(name: str, on_stage: Stage = _quiet) -> Dataset:
    if name not in _IMAGES:
        on_stage(f"loading the {name} data set")
        _IMAGES[name] = load_dataset(name)
    return _IMAGES[name]


def _mlp_parts(spec: RunSpec, seeds: list[int], device: torch.device, track: bool, on_stage: Stage) -> _Parts:
    assert isinstance(spec.model, MLPConfig) and isinstance(spec.data, ImageData)
    if spec.train.grad_clip > 0 and len(seeds) > 1:
        raise GeodriftError("grad_clip: a global norm would couple the ensemble's members; train seeds one by one")
    data = _image_data(spec.data.name, on_stage).to(device)
    model: ResidualMLP = build_mlp(spec.model, data.in_dim, data.n_classes, seeds, device)
    batches = ShuffledBatches(data, seeds, spec.train.batch_size)
    epoch_steps = spec.train.epoch_steps or batches.steps_per_epoch
    tracker = MLPTracker(model, data, spec.track, epoch_steps, seeds) if track and spec.track.every > 0 else None
    return _Parts(model, batches, ensemble_loss, tracker, data.name,
                  lambda e: model.weightset(e, origin=f"simulated {spec.label} seed {seeds[e]}"))


# ---- the transformer -------------------------------------------------------------------------
@dataclass(frozen=True)
class _Text:
    corpus: Corpus
    tokenizer: Tokenizer
    train: torch.Tensor  # (N,) int64 ids
    valid: torch.Tensor


_TEXTS: dict[TextData, _Text] = {}  # per process: several configurations of one preset share them


def prepare_text(data: TextData, on_stage: Stage = _quiet) -> _Text:
    """The corpus, a tokenizer trained on its training split, and both splits encoded (cached per process).

    Args:
        data: corpus and tokenizer settings.
        on_stage: told before each slow step (reading, tokenizer training, encoding).
    """
    if data not in _TEXTS:
        on_stage(f"reading the corpus ({data.corpus or 'embedded stdlib docs'})")
        corpus = load_corpus(data.corpus, data.max_chars)
        if data.tokenizer == "bpe":
            on_stage(f"training a {data.vocab}-id BPE tokenizer on {len(corpus.train):,} characters of the "
                     "training split (once per process)")
        tokenizer = make_tokenizer(data.tokenizer, corpus.train, data.vocab)
        on_stage(f"encoding {len(corpus.train) + len(corpus.valid):,} characters")
        while len(_TEXTS) >= 2:  # keep at most two corpora resident
            _TEXTS.pop(next(iter(_TEXTS)))
        _TEXTS[data] = _Text(corpus, tokenizer, encode_ids(tokenizer, corpus.train), encode_ids(tokenizer, corpus.valid))
    return _TEXTS[data]


def build_llama(cfg: LlamaConfig, vocab_size: int, seed: int) -> LlamaLM:
    """The only LlamaConfig -> module builder; init drawn from ``Generator(seed)``."""
    return LlamaLM(vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff, n_kv_heads=cfg.n_kv_heads,
                   rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps, tie_embeddings=cfg.tie_embeddings,
                   activation=cfg.activation, residual=cfg.residual, norm=cfg.norm, attention=cfg.attention,
                   v_activation=cfg.v_activation, init_std=cfg.init_std,
                   generator=torch.Generator().manual_seed(seed))


def _llama_parts(spec: RunSpec, seed: int, device: torch.device, track: bool, on_stage: Stage) -> _Parts:
    assert isinstance(spec.model, LlamaConfig) and isinstance(spec.data, TextData)
    text = prepare_text(spec.data, on_stage)
    model = build_llama(spec.model, text.tokenizer.vocab_size, seed).to(device)
    windows = eval_windows(text.valid, spec.data.seq_len, spec.data.eval_windows)
    token_bytes = text.tokenizer.token_bytes()
    steps_per_epoch = spec.train.epoch_steps or max(1.0, text.train.numel() / _tokens_per_step(spec))
    note = (f"{text.corpus.name}:{text.corpus.sha256[:16]} ({text.corpus.source}); {text.tokenizer.kind} "
            f"{text.tokenizer.vocab_size}; train {text.train.numel()} tokens, valid {text.valid.numel()} tokens")

    def evaluate() -> dict[str, float]:
        return perplexity(model, windows, token_bytes)

    def untracked_rows(step: int) -> list[Row]:
        stats = evaluate()
        return [[step, step / steps_per_epoch, "eval", None, name, None, None, None, stats[name]]
                for name in ("nll", "ppl", "bits_per_byte")]

    tracker = LlamaTracker(model, spec.track, spec.train.steps, steps_per_epoch, seed, evaluate) if track else None
    return _Parts(model, TokenBatches(text.train, spec.train.batch_size, spec.data.seq_len, seed, device), lm_loss,
                  tracker, note, lambda e: model.weightset(origin=f"simulated {spec.label} seed {seed}"),
                  untracked_rows, {"tokenizer.json": ("tokenizer", {"tokenizer": text.tokenizer.to_dict()})})
