"""CPU seconds and wall seconds per training step of the forgetting grid's runs (issue 41's cost target).

The grid's step (``geodrift.finetune.run``): the embedded SmolLM2-135M, float32, full fine-tuning with AdamW,
one batch of 2 x 128 tokens of a corpus, forward, backward, optimizer step, on one torch thread. CPU time
(``time.process_time``) is what a quiet machine needs; wall time under load is longer. Prints one line per step
and writes them, with the medians, to a stamped ``benchmarks/RESULTS_finetune_step.md``.

Usage:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_finetune_step.py --steps 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from geodrift.finetune.model import load_trainable
from geodrift.finetune.run import windows
from geodrift.finetune.spec import FinetuneSpec
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.text import TokenBatches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--corpus", default="django-de")
    parser.add_argument("--results", type=Path, default=Path("benchmarks/RESULTS_finetune_step.md"))
    args = parser.parse_args()
    check_results_path(args.results)
    load_before, t0 = load_average(), time.perf_counter()
    torch.set_num_threads(1)
    spec = FinetuneSpec(corpus=args.corpus, lr=5e-4, steps=args.steps, batch=2, seq_len=128, checkpoints=(args.steps,))
    where = torch.device("cpu")
    lm = load_trainable(None, where)
    data = windows(spec, lm)
    batches = TokenBatches(data["train_ids"], spec.batch, spec.seq_len, spec.seed, where)
    optimizer = torch.optim.AdamW([p for p in lm.module.parameters() if p.requires_grad], lr=spec.lr, weight_decay=0.0)
    cpu, wall = [], []
    for step in range(spec.steps):
        t, c = time.perf_counter(), time.process_time()
        batch = batches.batch(step)
        scores = lm.logits(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(scores.reshape(-1, scores.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
        print(f"step {step + 1}: cpu {cpu[-1]:.2f} s, wall {wall[-1]:.2f} s, loss {float(loss.detach()):.4f}", flush=True)
    summary = (f"median per step (2 x 128 tokens, 1 thread): cpu {statistics.median(cpu):.2f} s, wall "
               f"{statistics.median(wall):.2f} s; load average {os.getloadavg()[0]:.1f}")
    print(summary)
    body = "\n".join([f"Command: `{command_line()}`. The embedded SmolLM2-135M, float32, AdamW (lr {spec.lr:g}), "
                      f"batches of 2 x 128 tokens of `{args.corpus}`, one torch thread: the forgetting grid's step.", "",
                      "| step | CPU s | wall s |", "|---|---|---|",
                      *(f"| {i + 1} | {c:.2f} | {w:.2f} |" for i, (c, w) in enumerate(zip(cpu, wall, strict=True))),
                      "", f"Median: **{statistics.median(cpu):.2f} CPU-s** per step, {statistics.median(wall):.2f} s "
                      "of wall time (the wall time is the load's; the CPU time is what one quiet core needs).", ""])
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t0})
    write_results(args.results, "CPU and wall time per fine-tuning step (issue 41's cost)", body, s)


if __name__ == "__main__":
    main()
