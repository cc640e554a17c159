"""CPU seconds and wall seconds per training step of the forgetting grid's runs (issue 41's cost target).

The grid's step (``geodrift.finetune.run``): the embedded SmolLM2-135M, float32, full fine-tuning with AdamW,
one batch of 2 x 128 tokens of a corpus, forward, backward, optimizer step, on one torch thread. CPU time
(``time.process_time``) is what a quiet machine needs; wall time under load is longer. Prints one line per step
and the median; writes nothing (the forgetting results quote its output with its command).

Usage:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_finetune_step.py --steps 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from geodrift.finetune.model import load_trainable
from geodrift.finetune.run import windows
from geodrift.finetune.spec import FinetuneSpec
from geodrift.lm.text import TokenBatches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--corpus", default="django-de")
    args = parser.parse_args()
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
    print(f"median per step (2 x 128 tokens, 1 thread): cpu {statistics.median(cpu):.2f} s, wall "
          f"{statistics.median(wall):.2f} s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
