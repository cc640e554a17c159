"""One transformer-simulator run: data, model, training with per-projection tracking, final scan.

The training loop, optimiser, run record and checkpoints are the shared ones
(``geodrift.sim.train.train``, ``make_optimizer``, ``geodrift.sim.record``). This module adds:

- ``TokenBatches``: step-indexed random windows (``batch(step)`` depends only on seed and step);
- ``ContinuityTracker``: every ``track_every`` steps (and at step 0, the first backward pass, and
  after the last step) the adjacent-layer ``|cos|`` of v1 and u1 of every projection's weights
  ("W") and this step's gradients ("G"), mean over the ``n_layers - 1`` pairs (Eq. 1);
- the learning-rate schedule (linear warm-up, cosine decay) and gradient clipping as optimiser
  step pre-hooks, so the shared loop needs no change;
- the final report: ``analyze_weightset`` of the trained projections (the same ScanReport as
  ``geodrift scan``) and the held-out perplexity; ``scan.json`` and ``tokenizer.json`` are written
  next to ``run.json``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from geodrift.analysis import ScanReport, analyze_weightset
from geodrift.atomic import write_json
from geodrift.errors import GeodriftError
from geodrift.linalg import batched_svd
from geodrift.metrics import adjacent_abs_cos
from geodrift.sim.config import TrainConfig
from geodrift.sim.llama import LlamaLM
from geodrift.sim.record import (
    RunRecord,
    load_checkpoint,
    load_record,
    run_dir,
    save_checkpoint,
    write_record,
)
from geodrift.sim.text import (
    Corpus,
    Tokenizer,
    encode_ids,
    eval_windows,
    load_corpus,
    make_tokenizer,
    perplexity,
    sample_batch,
)
from geodrift.sim.train import make_optimizer, resolve_device, train
from geodrift.sim.transformer_presets import TransformerConfig
from geodrift.weights import TRANSFORMER_ROLES


@dataclass
class TextData:
    """A tokenised corpus: ``train``/``valid`` are ``(N,)`` int64 ids."""

    corpus: Corpus
    tokenizer: Tokenizer
    train: torch.Tensor
    valid: torch.Tensor


def prepare_data(cfg: TransformerConfig) -> TextData:
    """Load the corpus, train the tokenizer on the training split, encode both splits."""
    corpus = load_corpus(cfg.corpus, cfg.corpus_max_chars)
    tokenizer = make_tokenizer(cfg.tokenizer, corpus.train, cfg.vocab)
    return TextData(corpus, tokenizer, encode_ids(tokenizer, corpus.train), encode_ids(tokenizer, corpus.valid))


def build_model(cfg: TransformerConfig, vocab_size: int, seed: int) -> LlamaLM:
    """The only place a TransformerConfig becomes modules; init drawn from ``Generator(seed)``."""
    return LlamaLM(vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff, n_kv_heads=cfg.n_kv_heads,
                   rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps, tie_embeddings=cfg.tie_embeddings,
                   activation=cfg.activation, residual=cfg.residual, norm=cfg.norm, attention=cfg.attention,
                   v_activation=cfg.v_activation, init_std=cfg.init_std,
                   generator=torch.Generator().manual_seed(seed))


class TokenBatches:
    """``batch(step) -> (B, T + 1)`` windows from ``Generator(seed * 1_000_003 + step)``: pure in step."""

    def __init__(self, tokens: torch.Tensor, batch_size: int, seq_len: int, seed: int, device: torch.device) -> None:
        self.tokens, self.batch_size, self.seq_len, self.seed, self.device = tokens, batch_size, seq_len, seed, device

    def batch(self, step: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        return sample_batch(self.tokens, self.batch_size, self.seq_len, gen).to(self.device)


def lm_loss(model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Next-token cross-entropy of ``batch (B, T + 1)``."""
    logits = model(batch[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    return loss, {"loss": loss.detach()}


def projection_continuity(mats: dict[tuple[str, int], torch.Tensor], n_layers: int) -> dict[tuple[str, str], list[float]]:
    """Adjacent-layer ``|cos|`` of v1 and u1 per role.

    Args:
        mats: ``{(role, layer): (d_out, d_in)}`` for layers ``0..n_layers-1``.
        n_layers: depth.

    Returns:
        ``{(role, "v" | "u"): [|cos| per adjacent pair]}`` (``n_layers - 1`` values).
    """
    out: dict[tuple[str, str], list[float]] = {}
    for role in TRANSFORMER_ROLES:
        stack = torch.stack([mats[(role, layer)].detach().float().cpu() for layer in range(n_layers)])  # (L, m, n)
        U, _, Vh = batched_svd(stack)
        out[(role, "v")] = adjacent_abs_cos(Vh[:, 0, :]).tolist()
        out[(role, "u")] = adjacent_abs_cos(U[:, :, 0]).tolist()
    return out


class ContinuityTracker:
    """The Tracker of the shared loop for the transformer (see the module docstring)."""

    def __init__(self, model: LlamaLM, record: RunRecord, every: int, steps: int, steps_per_epoch: float,
                 evaluate: Callable[[int], None] | None = None, eval_every: int = 0) -> None:
        self.model, self.record, self.every, self.steps = model, record, every, steps
        self.steps_per_epoch = steps_per_epoch
        self.evaluate, self.eval_every = evaluate, eval_every
        self.n_layers = len(model.model.layers)
        self.losses: list[float] = []
        self.seconds = 0.0

    def after_backward(self, step: int, stats: dict[str, torch.Tensor]) -> None:
        self.losses.append(float(stats["loss"]))
        if len(self.losses) == max(1, min(self.every or 50, 50)):
            self.record.add_rows([(step, step / self.steps_per_epoch, "train", "loss", None, None, None,
                                   sum(self.losses) / len(self.losses))])
            self.losses = []

    def wants(self, step: int, final: bool) -> bool:
        return final or step == 0 or (self.every > 0 and step % self.every == 0)

    def track(self, step: int) -> None:
        start = time.perf_counter()
        epoch = step / self.steps_per_epoch
        weights = self.model.weight_tensors()
        grads = {k: (w.grad if w.grad is not None else torch.zeros_like(w)) for k, w in weights.items()}
        rows: list[Any] = []
        for source, mats in (("W", weights), ("G", grads)):
            for (role, space), per_pair in projection_continuity(mats, self.n_layers).items():
                rows.append((step, epoch, source, f"cont:{role}", space, 1, None, sum(per_pair) / len(per_pair)))
        self.record.add_rows(rows)
        if self.evaluate is not None and (step == self.steps or (self.eval_every and step % self.eval_every == 0)):
            self.evaluate(step)
        self.seconds += time.perf_counter() - start

    def state_dict(self) -> dict[str, Any]:
        return {"losses": list(self.losses), "seconds": self.seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses, self.seconds = list(state["losses"]), float(state["seconds"])


def _schedule(cfg: TransformerConfig, step: int) -> float:
    # Linear warm-up to lr, then cosine to lr * min_lr_ratio at the last step.
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def make_transformer_optimizer(model: nn.Module, cfg: TransformerConfig, start_step: int) -> torch.optim.Optimizer:
    """AdamW from the shared ``make_optimizer`` with the schedule and clipping as step pre-hooks."""
    train_cfg = TrainConfig(optimizer="adamw", lr=cfg.lr, beta1=cfg.betas[0], beta2=cfg.betas[1],
                            weight_decay=cfg.weight_decay, batch_size=cfg.batch_size, steps=cfg.steps)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, train_cfg)
    counter = [start_step]

    def pre_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if cfg.grad_clip > 0:
            nn.utils.clip_grad_norm_(params, cfg.grad_clip, foreach=False)
        for group in opt.param_groups:
            group["lr"] = _schedule(cfg, counter[0])
        counter[0] += 1

    optimizer.register_step_pre_hook(pre_step)
    return optimizer


@dataclass
class TransformerResult:
    """What one run produced; ``scan`` is the final weights' ScanReport (the ``geodrift scan`` table)."""

    config: TransformerConfig
    seed: int
    record: RunRecord
    scan: ScanReport
    path: Path


def run_transformer(cfg: TransformerConfig, seed: int = 42, device: str = "cpu", out: str | Path = "runs/transformer",
                    resume: bool = False, track: bool = True, stop_at: int | None = None,
                    progress: Callable[[int], None] | None = None) -> TransformerResult:
    """Train one configuration with one seed, tracking per-projection continuity; write the record.

    Args:
        cfg: the configuration (a preset with ablations).
        seed: init and batch-order seed.
        device: ``cpu``, ``cuda`` or ``auto``.
        out: output folder; the run lives in ``out/<name>/seed<seed>/``.
        resume: continue from ``checkpoint.pt`` there when it exists.
        track: False turns tracking off (the compute floor for the overhead benchmark).
        stop_at: stop before this step (an interruption; a later ``resume=True`` continues).
        progress: called with the number of completed steps.

    Returns:
        TransformerResult.

    Raises:
        GeodriftError: bad options, a corpus too small, divergence (NaN loss), an unreadable checkpoint.

    Example:
        >>> from geodrift.sim.transformer_presets import make_config
        >>> res = run_transformer(make_config("tiny"), out="/tmp/gd")  # doctest: +SKIP
    """
    dev = resolve_device(device)
    folder = run_dir(out, cfg.name, seed)
    ckpt_path = folder / "checkpoint.pt"
    if resume and (folder / "run.json").exists() and (folder / "scan.json").exists():
        done = load_record(folder)
        if done.status == "complete" and _same_config(done.config, cfg):
            # Finished earlier: reload for re-rendering, no training.
            return TransformerResult(TransformerConfig.from_dict(done.config), seed, done, load_scan(folder / "scan.json"),
                                     folder)
    data = prepare_data(cfg)
    cfg = replace(cfg, vocab=data.tokenizer.vocab_size)
    model = build_model(cfg, data.tokenizer.vocab_size, seed).to(dev)
    record = RunRecord(label=cfg.name, seed=seed, config=cfg.to_dict(), device=str(dev), preset=cfg.name.split("+")[0],
                       data=f"{data.corpus.name}:{data.corpus.sha256[:16]} ({data.corpus.source}); "
                            f"{data.tokenizer.kind} {data.tokenizer.vocab_size}; train {data.train.numel()} "
                            f"tokens, valid {data.valid.numel()} tokens")
    windows = eval_windows(data.valid, cfg.seq_len, cfg.eval_windows)
    token_bytes = data.tokenizer.token_bytes()

    def evaluate(step: int) -> None:
        stats = perplexity(model, windows, token_bytes)
        epoch = step / steps_per_epoch
        record.add_rows([(step, epoch, "eval", name, None, None, None, stats[name])
                         for name in ("nll", "ppl", "bits_per_byte")])

    steps_per_epoch = max(1.0, data.train.numel() / (cfg.batch_size * cfg.seq_len))
    tracker = ContinuityTracker(model, record, cfg.track_every, cfg.steps, steps_per_epoch, evaluate,
                                cfg.eval_every) if track else None
    start = 0
    if resume and ckpt_path.exists():
        state = load_checkpoint(ckpt_path)
        if state["config"] != cfg.to_dict() or state["seed"] != seed:
            raise GeodriftError(f"--resume: {ckpt_path} was written for another configuration or seed; "
                                "delete it or use another --out")
        model.load_state_dict(state["model"])
        start = int(state["step"])
        record = RunRecord.from_dict(state["record"])
        if tracker is not None:
            tracker.record = record
            tracker.load_state_dict(state["tracker"])
    optimizer = make_transformer_optimizer(model, cfg, start)
    if resume and ckpt_path.exists():
        optimizer.load_state_dict(state["optimizer"])
    elapsed0 = record.timing.get("train_seconds", 0.0)
    t0 = time.perf_counter()

    def on_checkpoint(next_step: int) -> None:
        record.timing["train_seconds"] = elapsed0 + time.perf_counter() - t0
        save_checkpoint(ckpt_path, {"config": cfg.to_dict(), "seed": seed, "step": next_step,
                                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                    # JSON round trip: plain types only (torch.__version__ is a str
                                    # subclass that weights_only loading refuses).
                                    "record": json.loads(json.dumps(record.to_dict())),
                                    "tracker": tracker.state_dict() if tracker else {}})
        if next_step < cfg.steps:
            write_record(out, record)

    batches = TokenBatches(data.train, cfg.batch_size, cfg.seq_len, seed, dev)
    end = train(model, batches, lm_loss, optimizer, steps=cfg.steps, tracker=tracker, start_step=start,
                stop_at=stop_at, checkpoint_every=cfg.eval_every, on_checkpoint=on_checkpoint, on_step=progress)
    record.timing["train_seconds"] = elapsed0 + time.perf_counter() - t0
    record.timing["tracking_seconds"] = tracker.seconds if tracker else 0.0
    record.timing["tokens_per_second"] = (end - start) * cfg.batch_size * cfg.seq_len / max(
        1e-9, time.perf_counter() - t0)
    model_cpu = model.to("cpu")
    report = analyze_weightset(model_cpu.weightset(origin=f"simulated {cfg.name} seed {seed}"), k=cfg.scan_k,
                               null_draws=cfg.null_draws, seed=seed)
    if end == cfg.steps:
        record.status = "complete"
        if not track:
            evaluate(end)
        record.summary.update(_summary(record, report))
    write_json(folder / "scan.json", report.to_dict())
    write_json(folder / "tokenizer.json", data.tokenizer.to_dict())
    path = write_record(out, record)
    return TransformerResult(cfg, seed, record, report, path.parent)


def _same_config(recorded: dict[str, Any], cfg: TransformerConfig) -> bool:
    # The record stores the vocabulary the tokenizer produced; compare everything else.
    mine = cfg.to_dict()
    return all(recorded.get(k) == (list(v) if isinstance(v, tuple) else v) for k, v in mine.items() if k != "vocab")


def _summary(record: RunRecord, report: ScanReport) -> dict[str, float | None]:
    summary: dict[str, float | None] = {
        "ppl": record.value("eval", "ppl"), "bits_per_byte": record.value("eval", "bits_per_byte"),
    }
    for r in report.roles:
        for space in ("v", "u"):
            vc = r.spaces[space].vectors[0]
            summary[f"{r.role}:{space}1"] = vc.mean
            summary[f"{r.role}:{space}1_null"] = vc.null_mean
            summary[f"{r.role}:{space}1_z"] = vc.z
    return summary


def scan_report_from_dict(payload: dict[str, Any]) -> ScanReport:
    """Rebuild a ScanReport from its ``to_dict()`` JSON (``scan.json``), for re-rendering."""
    from geodrift.analysis import RoleReport, SpaceContinuity, VectorContinuity

    roles = []
    for r in payload["roles"]:
        spaces = {name: SpaceContinuity(**{**s, "vectors": [VectorContinuity(**v) for v in s["vectors"]]})
                  for name, s in r["spaces"].items()}
        roles.append(RoleReport(**{**r, "spaces": spaces, "shape": tuple(r["shape"])}))
    return ScanReport(**{**payload, "roles": roles})


def load_scan(path: str | Path) -> ScanReport:
    """Read a ``scan.json`` written by a run (or by :func:`smollm2_reference`).

    Raises:
        GeodriftError: missing or unreadable file.
    """
    try:
        return scan_report_from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise GeodriftError(f"{path}: no scan report here; run `geodrift simulate transformer` first") from None
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise GeodriftError(f"{path}: not a geodrift scan report ({error}); delete it and re-run") from None


def smollm2_reference(out: str | Path, k: int, null_draws: int, seed: int = 0) -> ScanReport:
    """The embedded SmolLM2-135M-Instruct's scan (the same table as ``geodrift scan``), cached in ``out``."""
    from geodrift.scan.scan import load_weights, scan

    path = Path(out) / f"smollm2-135m_scan_k{k}_n{null_draws}_s{seed}.json"
    if path.exists():
        return load_scan(path)
    weights, heads = load_weights(None)
    report = scan(weights, k=k, null_draws=null_draws, seed=seed, heads=heads)
    write_json(path, report.to_dict())
    return report
