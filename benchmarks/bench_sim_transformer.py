"""Transformer simulator benchmark: tracking overhead vs a plain PyTorch loop of the same model.

Side by side in one process, interleaved (plain, untracked, tracked; repeated ``--rounds`` times, the
median reported) so that load from other processes affects all three alike:

- ``plain``: a hand-written PyTorch loop (AdamW, the same model, batches and schedule-free lr);
- ``untracked``: ``run_transformer(track=False)`` - the shared loop, schedule, clipping;
- ``tracked``: ``run_transformer(track=True)`` - plus per-projection continuity of weights and
  gradients every ``track_every`` steps and held-out evaluations every ``eval_every`` steps.

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

from geodrift.sim.transformer_presets import make_config
from geodrift.sim.transformer_run import TokenBatches, build_model, lm_loss, prepare_data, run_transformer


def plain_loop(preset: str, steps: int, seed: int) -> float:
    """Tokens/s of a plain PyTorch loop training the same model on the same batches."""
    cfg = make_config(preset, steps=steps)
    data = prepare_data(cfg)
    model = build_model(cfg, data.tokenizer.vocab_size, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay,
                            foreach=False)
    batches = TokenBatches(data.train, cfg.batch_size, cfg.seq_len, seed, torch.device("cpu"))
    start = time.perf_counter()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss, _ = lm_loss(model, batches.batch(step))
        loss.backward()
        opt.step()
    return steps * cfg.batch_size * cfg.seq_len / (time.perf_counter() - start)


def simulator(preset: str, steps: int, seed: int, track: bool) -> float:
    """Tokens/s of ``run_transformer`` (training loop only)."""
    cfg = make_config(preset, steps=steps)
    with tempfile.TemporaryDirectory() as out:
        res = run_transformer(cfg, seed=seed, out=out, track=track)
    return float(res.record.timing["tokens_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = make_config(args.preset, steps=args.steps)
    results: dict[str, list[float]] = {"plain": [], "untracked": [], "tracked": []}
    for _ in range(args.rounds):
        results["plain"].append(plain_loop(args.preset, args.steps, 42))
        results["untracked"].append(simulator(args.preset, args.steps, 42, track=False))
        results["tracked"].append(simulator(args.preset, args.steps, 42, track=True))
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"preset {args.preset}: {args.steps} steps x batch {cfg.batch_size} x seq {cfg.seq_len}; tracking every "
          f"{cfg.track_every} steps (W and G, 7 roles x {cfg.n_layers} layers), eval every {cfg.eval_every}; "
          f"{args.rounds} interleaved rounds, median")
    print(f"{'loop':<10} {'tokens/s':>10} {'ratio to plain':>15}   per round")
    for name, value in med.items():
        rounds = ", ".join(f"{v:.0f}" for v in results[name])
        print(f"{name:<10} {value:>10.0f} {value / med['plain']:>15.3f}   [{rounds}]")


if __name__ == "__main__":
    main()
