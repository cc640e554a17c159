"""One fine-tuning run, measured: train, write checkpoints, and at each one the held-out NLLs and the indicators.

``run_finetune(spec, out)`` writes ``<out>/<slug(label)>/seed<seed>/``:

- ``hf/step-NNNNNN/``: each checkpoint as a Hugging Face folder (float32 safetensors, ``config.json``, the
  tokenizer) - ``geodrift drift MODEL <run>/hf/step-*`` reads the series;
- ``run.json`` (kind ``finetune_run``): the spec, the corpora (source, licence, sha256, sizes), the base's and
  each checkpoint's per-window NLLs on the fixed probe and domain windows, forgetting and learning as paired
  differences with standard errors, the indicators, the Taylor / EWC prediction, single-layer reverts, the
  training losses and the time each part took.

A finished run (its ``run.json`` complete, for the same spec) is reused, not re-run: a grid resumes by skipping
the runs already done. Non-finite weights after a step stop the run: the last good checkpoint stays, the record
says which, and a :class:`~geodrift.errors.GeodriftError` says so in one line.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.finetune.evaluate import paired, window_nlls
from geodrift.finetune.indicators import GAUGE_VIEW, BaseGeometry
from geodrift.finetune.model import TrainableLM, all_finite, load_trainable, state_copy
from geodrift.finetune.probes import TaylorBaseline, single_layer_reverts
from geodrift.finetune.spec import FinetuneSpec
from geodrift.io.atomic import document, payload_of, write_json
from geodrift.io.checks import check_device
from geodrift.io.outdir import replace_folder
from geodrift.io.provenance import library_versions
from geodrift.lm.corpora import corpus_info, load_named
from geodrift.lm.hf import hf_step_dir
from geodrift.lm.text import Corpus, TokenBatches, encode_ids, eval_windows
from geodrift.sim.record import slug

Stage = Callable[[str], None]
Step = Callable[[int, int, float], None]
RECORD = "run.json"


def run_folder(out: str | Path, spec: FinetuneSpec) -> Path:
    """``<out>/<slug(label)>/seed<seed>``: where a run writes.

    Example:
        >>> run_folder("runs", FinetuneSpec(corpus="django-de", lr=2e-4, steps=24)).as_posix()
        'runs/django-de_lr0.0002_full/seed0'
    """
    return Path(out) / slug(spec.label) / f"seed{spec.seed}"


def finished(out: str | Path | None, spec: FinetuneSpec) -> dict[str, Any] | None:
    """The record of a finished run of ``spec`` under ``out``, or None (absent, unfinished, another spec)."""
    if out is None:
        return None
    path = run_folder(out, spec) / RECORD
    try:
        record = payload_of(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    return record if record.get("status") == "complete" and record.get("spec") == spec.to_dict() else None


def windows(spec: FinetuneSpec, lm: TrainableLM) -> dict[str, Any]:
    """The corpora and the fixed token windows of a run (a deterministic function of the spec and the tokenizer)."""
    domain, probe = load_named(spec.corpus), load_named(spec.probe)
    probe_ids = encode_ids(lm.tokenizer, probe.valid)
    out: dict[str, Any] = {"domain": domain, "probe": probe,
                           "probe_windows": eval_windows(probe_ids, spec.seq_len, spec.probe_windows)}
    out["domain_windows"] = (out["probe_windows"] if spec.corpus == spec.probe else
                             eval_windows(encode_ids(lm.tokenizer, domain.valid), spec.seq_len, spec.domain_windows))
    out["train_ids"] = encode_ids(lm.tokenizer, domain.train)
    if spec.taylor_windows:
        out["taylor_windows"] = eval_windows(encode_ids(lm.tokenizer, probe.train[:400_000]), spec.seq_len,
                                             spec.taylor_windows)
    return out


def _corpus_record(corpus: Corpus, lm: TrainableLM, name: str) -> dict[str, Any]:
    info = corpus_info(name) if not Path(name).exists() else None
    return {"name": corpus.name, "source": corpus.source, "licence": info.licence if info else "the user's",
            "description": info.description if info else corpus.source, "sha256": corpus.sha256,
            "train_chars": len(corpus.train), "valid_chars": len(corpus.valid),
            "valid_tokens": len(lm.tokenizer.encode(corpus.valid))}


def run_finetune(spec: FinetuneSpec, out: str | Path | None, *, device: str = "cpu", on_stage: Stage | None = None,
                 on_step: Step | None = None) -> dict[str, Any]:
    """Fine-tune and measure one run (see the module docstring); a finished run under ``out`` is returned as it is.

    Args:
        spec: the run.
        out: the folder of the grid (the run writes in :func:`run_folder`); None: write nothing (no checkpoints,
            so no weights-only indicators).
        device: ``cpu``, ``cuda`` (``cuda:N``) or ``auto``.
        on_stage: start-up and measurement messages; on_step: ``(step, steps, loss)`` after each step.

    Returns:
        The run's record (what ``run.json`` holds).

    Raises:
        GeodriftError: a bad spec, device, model or corpus; non-finite weights after a step (after the record
            naming the last good checkpoint is written).
    """
    stage = on_stage or (lambda text: None)
    done = finished(out, spec)
    if done is not None:
        stage(f"{spec.label}: finished earlier, reused")
        return done
    where = torch.device(check_device(device))
    folder = run_folder(out, spec) if out is not None else None
    t0, cpu0 = time.perf_counter(), time.process_time()
    stage(f"{spec.label}: loading the model and the corpora")
    lm = load_trainable(spec.model, where)
    data = windows(spec, lm)
    record: dict[str, Any] = {
        "label": spec.label, "spec": spec.to_dict(), "model": lm.label, "architecture": lm.architecture,
        "device": str(where), "threads": torch.get_num_threads(), "versions": library_versions(),
        "gauge_view": GAUGE_VIEW, "corpus": _corpus_record(data["domain"], lm, spec.corpus),
        "probe": _corpus_record(data["probe"], lm, spec.probe),
        "windows": {"probe": int(data["probe_windows"].shape[0]), "domain": int(data["domain_windows"].shape[0]),
                    "seq_len": spec.seq_len, "taylor": spec.taylor_windows, "reverts": spec.revert_windows},
        "status": "running", "checkpoints": [], "train_loss": [], "seconds": {}}
    seconds = record["seconds"]
    base_state = state_copy(lm.module)
    tic = time.perf_counter()
    base_probe = window_nlls(lm.logits, data["probe_windows"], where)
    base_domain = base_probe if spec.corpus == spec.probe else window_nlls(lm.logits, data["domain_windows"], where)
    record["base"] = {"probe": base_probe.tolist(), "domain": base_domain.tolist()}
    seconds["evaluate"] = time.perf_counter() - tic
    taylor = None
    if spec.taylor_windows:
        tic = time.perf_counter()
        taylor = TaylorBaseline(lm, data["taylor_windows"], where)
        seconds["taylor"] = time.perf_counter() - tic
    geometry = None
    if spec.indicators and folder is not None:
        tic = time.perf_counter()
        stage(f"{spec.label}: decomposing the base")
        geometry = BaseGeometry(spec.model)
        seconds["indicators"] = time.perf_counter() - tic
    optimizer = torch.optim.AdamW([p for p in lm.module.parameters() if p.requires_grad], lr=spec.lr,
                                  weight_decay=0.0)
    batches = TokenBatches(data["train_ids"], spec.batch, spec.seq_len, spec.seed, where)
    seconds["train"] = 0.0
    last_good: dict[str, Any] | None = None
    for step in range(1, spec.steps + 1):
        tic = time.perf_counter()
        batch = batches.batch(step - 1)
        scores = lm.logits(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(scores.reshape(-1, scores.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds["train"] += time.perf_counter() - tic
        record["train_loss"].append(float(loss.detach()))
        if on_step is not None:
            on_step(step, spec.steps, record["train_loss"][-1])
        if not all_finite(lm.module):
            _stop(record, folder, spec, step, last_good)
        if step in spec.checkpoint_steps:
            entry = _checkpoint(spec, lm, data, record, folder, step, where, base_state, taylor, geometry, stage)
            if last_good is not None and spec.keep == "final" and last_good.get("path"):
                shutil.rmtree(last_good["path"], ignore_errors=True)
                last_good["path_deleted"] = True
            last_good = entry
    if spec.reverts:
        tic = time.perf_counter()
        stage(f"{spec.label}: reverting each layer to the base")
        record["reverts"] = single_layer_reverts(lm, base_state, data["probe_windows"][:spec.revert_windows], where)
        seconds["reverts"] = time.perf_counter() - tic
    record["status"] = "complete"
    seconds["total"] = time.perf_counter() - t0
    seconds["cpu"] = time.process_time() - cpu0  # this process's CPU time: what a quiet machine would need
    if folder is not None:
        write_json(folder / RECORD, document("finetune_run", record))
    return record


def _checkpoint(spec: FinetuneSpec, lm: TrainableLM, data: dict[str, Any], record: dict[str, Any],
                folder: Path | None, step: int, where: torch.device, base_state: dict[str, torch.Tensor],
                taylor: TaylorBaseline | None, geometry: BaseGeometry | None, stage: Stage) -> dict[str, Any]:
    seconds = record["seconds"]
    entry: dict[str, Any] = {"step": step, "path": None}
    if folder is not None:
        target = hf_step_dir(folder, step)
        replace_folder(target, lambda tmp: lm.save(tmp, step), force=True, option="--out")
        entry["path"] = str(target)
    tic = time.perf_counter()
    stage(f"{spec.label}: step {step}: held-out NLL")
    probe = window_nlls(lm.logits, data["probe_windows"], where)
    domain = probe if spec.corpus == spec.probe else window_nlls(lm.logits, data["domain_windows"], where)
    base_probe, base_domain = torch.tensor(record["base"]["probe"]), torch.tensor(record["base"]["domain"])
    entry.update({"probe": probe.tolist(), "domain": domain.tolist(), "forgetting": paired(base_probe, probe),
                  "learning": paired(base_domain, domain)})
    seconds["evaluate"] += time.perf_counter() - tic
    if taylor is not None:
        tic = time.perf_counter()
        entry["taylor"] = taylor.predict(lm, base_state)
        seconds["taylor"] += time.perf_counter() - tic
    if geometry is not None and entry["path"] is not None:
        tic = time.perf_counter()
        stage(f"{spec.label}: step {step}: indicators")
        entry["indicators"] = geometry.measure(entry["path"])
        seconds["indicators"] += time.perf_counter() - tic
    record["checkpoints"].append(entry)
    return entry


def _stop(record: dict[str, Any], folder: Path | None, spec: FinetuneSpec, step: int,
          last_good: dict[str, Any] | None) -> None:
    kept = (f"the last good checkpoint is {last_good['path']} (step {last_good['step']})" if last_good and
            last_good.get("path") else "no checkpoint was written before it")
    note = (f"fine-tune {spec.label}: non-finite weights after step {step} (--lr {spec.lr:g}); stopped - {kept}; "
            "lower --lr")
    record.update({"status": "stopped", "stopped_at": step, "note": note})
    if folder is not None:
        write_json(folder / RECORD, document("finetune_run", record))
    raise GeodriftError(note)
