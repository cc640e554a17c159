"""Transformer simulator benchmark: tracking overhead vs a plain PyTorch loop of the same model.

Side by side in one process, interleaved (plain, untracked, tracked; repeated ``--rounds`` times, the
median reported) so that load from other processes affects all three alike:

- ``plain``: a hand-written PyTorch loop (AdamW, the same model, batches and schedule-free lr);
- ``untracked``: ``geodrift.sim.run.run(track=False)`` - the shared loop, schedule, clipping;
- ``tracked``: ``run(track=True)`` - plus per-projection continuity of weights and gradients, each
  with its permutation null, through ``geodrift.continuity`` every ``every`` steps, and held-out
  evaluations every ``eval_every`` steps.

Tokens/s count training tokens (batch x sequence x steps) over the training loop only (data
preparation and the final scan excluded). The target: tracked >= 0.9 x plain.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/bench_sim_transformer.py [--preset cpu] [--steps 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from geodrift.lm.text import TokenBatches, lm_loss
from geodrift.sim.experiment import Overrides, build_specs
from geodrift.sim.run import run
from geodrift.sim.simulator import build_llama, prepare_text


def plain_loop(preset: str, steps: int, seed: int) -> float:
    """Tokens/s of a plain PyTorch loop training the same model on the same batches."""
    (spec,) = build_specs("transformer", preset, Overrides(steps=steps))
    data, train = spec.data, spec.train
    text = prepare_text(data)  # type: ignore[arg-type]
    model = build_llama(spec.model, text.tokenizer.vocab_size, seed)  # type: ignore[arg-type]
    opt = torch.optim.AdamW(model.parameters(), lr=train.lr, betas=(train.beta1, train.beta2),
                            weight_decay=train.weight_decay, foreach=False)
    batches = TokenBatches(text.train, train.batch_size, data.seq_len, seed, torch.device("cpu"))  # type: ignore[union-attr]
    start = time.perf_counter()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss, _ = lm_loss(model, batches.batch(step))
        loss.backward()
        opt.step()
    return steps * train.batch_size * data.seq_len / (time.perf_counter() - start)  # type: ignore[union-attr]


def simulator(preset: str, steps: int, seed: int, track: bool) -> float:
    """Tokens/s of ``geodrift.sim.run.run`` (training loop only)."""
    (spec,) = build_specs("transformer", preset, Overrides(steps=steps))
    with tempfile.TemporaryDirectory() as out:
        (res,) = run(spec, [seed], out=out, track=track, device="cpu")
    return float(res.record.timing["tokens_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    (spec,) = build_specs("transformer", args.preset, Overrides(steps=args.steps))
    results: dict[str, list[float]] = {"plain": [], "untracked": [], "tracked": []}
    for _ in range(args.rounds):
        results["plain"].append(plain_loop(args.preset, args.steps, 42))
        results["untracked"].append(simulator(args.preset, args.steps, 42, track=False))
        results["tracked"].append(simulator(args.preset, args.steps, 42, track=True))
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"preset {args.preset}: {args.steps} steps x batch {spec.train.batch_size} x seq {spec.data.seq_len}; "  # type: ignore[union-attr]
          f"tracking every {spec.track.every} steps (W and G, 7 roles x {spec.model.n_layers} layers, "
          f"{spec.track.null_draws} null draws), eval every {spec.track.eval_every}; {args.rounds} interleaved "
          "rounds, median")
    print(f"{'loop':<10} {'tokens/s':>10} {'ratio to plain':>15}   per round")
    for name, value in med.items():
        rounds = ", ".join(f"{v:.0f}" for v in results[name])
        print(f"{name:<10} {value:>10.0f} {value / med['plain']:>15.3f}   [{rounds}]")


if __name__ == "__main__":
    from geodrift.io.provenance import run_recorded

    run_recorded(main, "benchmarks/RESULTS_sim_transformer.md", "Transformer simulator: tracking overhead against a plain loop")  # what it prints, with the stamp
