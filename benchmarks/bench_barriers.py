"""Orbit alignment, measured: a gauged SmolLM2 recovered, and the loss barrier between simulator Llamas of different seeds.

Two parts (issue 31 item 5; docs/scan.md "Aligned comparison"):

1. **Recovery**: the embedded SmolLM2-135M under a random exact gauge (gains folded, a random residual
   rotation, per layer a hidden permutation with Up/Down log-scales ~ N(0, σ²), a V/O map per key-value
   head of condition number ``--cond``, a Q/K rotation-scaling per RoPE pair), then
   :func:`geodrift.gauge.align.align`: relative weight error before and after, the rotation's fit
   residual, the share of hidden units matched as mutual best, the wall time.
2. **Barriers** (the paper's future work; Git Re-Basin's measure): ``--pairs`` pairs of the transformer
   simulator's ``tiny`` preset trained for ``--steps`` steps from different seeds; the held-out loss
   along the straight line ``(1 - t) A + t B`` at ``--points`` values of ``t``; the barrier is
   ``max_t loss(t) - (loss(0) + loss(1)) / 2``. Four lines per pair: the raw weights (naive), both
   models' gains folded (not aligned), B aligned to A by rotation + head and hidden permutations +
   scalings, and with the per-head V/O and Q/K maps too (orthogonal ones, or general ones).

Usage (writes ``--out``, default benchmarks/RESULTS_barriers.md, with the stamp of ``geodrift.io.provenance``):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_barriers.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file

from geodrift.gauge.align import align, shape_of
from geodrift.gauge.orbit import GaugeShape, StateDict, fold_gains, random_gauge
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.hf import hf_step_dir
from geodrift.lm.text import eval_windows, perplexity
from geodrift.scanner.aligned import checkpoint_state_dict
from geodrift.scanner.readers import open_checkpoint
from geodrift.sim.presets import preset
from geodrift.sim.record import run_dir
from geodrift.sim.run import run
from geodrift.sim.simulator import build_llama, prepare_text


def recovery(cond: float, sigma: float, seed: int) -> list[str]:
    """Part 1: the embedded SmolLM2 under a random exact gauge, aligned back (the gauge drawn in float32, as the
    weights are stored, and in float64, which shows the alignment's own precision)."""
    sd = checkpoint_state_dict(open_checkpoint(None))
    shape = shape_of(sd, 9, 3)
    reports = {}
    for dtype in (torch.float32, torch.float64):
        typed = {k: v.to(dtype) for k, v in sd.items()}
        gauged = random_gauge(typed, shape, torch.Generator().manual_seed(seed), condition=cond, sigma=sigma)
        reports[str(dtype).removeprefix("torch.")] = align(typed, gauged, shape)[2]
    rep = reports["float32"]
    moved = 1 - sum(x.identity_share for x in rep.layers) / len(rep.layers)
    heads_moved = sum(x.heads_kept < 1.0 for x in rep.layers)
    lines = ["## Recovery of a gauged SmolLM2-135M", "",
             f"Gauge (`geodrift.gauge.orbit.random_gauge`, seed {seed}): gains folded, a residual rotation; per layer "
             f"a hidden permutation (mean share of units moved {moved:.3f}) with Up/Down log-scales ~ N(0, {sigma}²), "
             f"V/O maps of condition number {cond:g}, Q/K rotation-scalings with log r ~ N(0, {sigma}²), and a "
             f"head permutation (not the identity in {heads_moved}/{len(rep.layers)} layers). Then "
             "`geodrift.gauge.align.align` (all maps, `head_maps=\"general\"`).", "",
             "| quantity | gauge in float32 | gauge in float64 |", "|---|---|---|"]
    rows = [("relative weight error before alignment (gains folded)", lambda r: f"{r.naive_weight_error:.3g}"),
            ("relative weight error after alignment", lambda r: f"{r.aligned_weight_error:.2e}"),
            ("residual rotation fit residual", lambda r: f"{r.rotation_residual:.2e}"),
            ("layers whose every hidden unit is matched as mutual best",
             lambda r: f"{sum(x.mutual_best_share == 1.0 for x in r.layers)}/{len(r.layers)}"),
            ("layers whose recovered head permutation is not the identity",
             lambda r: f"{sum(x.heads_kept < 1.0 for x in r.layers)}/{len(r.layers)}"),
            ("largest V/O fit residual", lambda r: f"{max(x.vo_residual for x in r.layers):.2e}"),
            ("largest Q/K fit residual", lambda r: f"{max(x.qk_residual for x in r.layers):.2e}"),
            ("alignment wall time (1 thread)", lambda r: f"{r.seconds:.1f} s")]
    for label, cell in rows:
        lines.append(f"| {label} | {cell(reports['float32'])} | {cell(reports['float64'])} |")
    return lines + [""]


def _loss(model: torch.nn.Module, sd: StateDict, windows: torch.Tensor) -> float:
    model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    return perplexity(model, windows)["nll"]


def _line(model: torch.nn.Module, a: StateDict, b: StateDict, windows: torch.Tensor, points: int) -> list[float]:
    ts = [i / (points - 1) for i in range(points)]
    return [_loss(model, {k: (1 - t) * a[k].double() + t * b[k].double() for k in a}, windows) for t in ts]


def barrier(losses: list[float]) -> float:
    """``max_t loss(t) - (loss(0) + loss(1)) / 2``.

    Example:
        >>> barrier([1.0, 3.0, 1.0])
        2.0
    """
    return max(losses) - (losses[0] + losses[-1]) / 2


def barriers(pairs: int, steps: int, points: int, windows_n: int) -> list[str]:
    """Part 2: simulator Llamas of different seeds, the loss along the line between them."""
    spec = preset("transformer", "tiny")[0]
    spec = replace(spec, train=replace(spec.train, steps=steps, warmup_steps=min(20, steps // 10)))
    text = prepare_text(spec.data)
    windows = eval_windows(text.valid, spec.data.seq_len, windows_n)
    cfg = spec.model
    variants = ("naive (raw weights)", "gains folded, not aligned", "aligned: rotation + permutations + scalings",
                "aligned: + orthogonal V/O and Q/K maps", "aligned: + general V/O and Q/K maps")
    rows: dict[str, list[float]] = {v: [] for v in variants}
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        def trained(seed: int) -> StateDict:
            run(spec, [seed], out=tmp, save_hf_every=steps, track=False)
            return load_file(str(hf_step_dir(run_dir(tmp, spec.label, seed), steps) / "model.safetensors"))

        for pair in range(pairs):
            seed_a, seed_b = 2 * pair + 1, 2 * pair + 2
            sd_a, sd_b = trained(seed_a), trained(seed_b)
            shape: GaugeShape = shape_of(sd_a, cfg.n_heads, cfg.n_kv_heads)
            model = build_llama(replace(cfg, tie_embeddings=False), text.tokenizer.vocab_size, 0).eval()
            fa, fb = fold_gains(sd_a, shape), fold_gains(sd_b, shape)
            _, b_perm, rep_perm = align(sd_a, sd_b, shape, head_maps="none")
            _, b_orth, rep_orth = align(sd_a, sd_b, shape, head_maps="orthogonal")
            _, b_full, rep_full = align(sd_a, sd_b, shape)
            lines = {variants[0]: _line(model, sd_a, sd_b, windows, points),
                     variants[1]: _line(model, fa, fb, windows, points),
                     variants[2]: _line(model, fa, b_perm, windows, points),
                     variants[3]: _line(model, fa, b_orth, windows, points),
                     variants[4]: _line(model, fa, b_full, windows, points)}
            for v, losses in lines.items():
                rows[v].append(barrier(losses))
                mid = losses[len(losses) // 2]
                table.append(f"| {seed_a}, {seed_b} | {v} | {losses[0]:.3f} | {losses[-1]:.3f} | {mid:.3f} | "
                             f"{barrier(losses):.3f} |")
            table.append(f"| {seed_a}, {seed_b} | (fit) | rotation residual {rep_full.rotation_residual:.3f}; "
                         f"hidden units mutual best {100 * statistics.mean(x.mutual_best_share for x in rep_full.layers):.1f}%, "
                         f"matched cosine {statistics.mean(x.matched_cosine for x in rep_full.layers):.3f}; "
                         f"weight distance {rep_perm.naive_weight_error:.3f} → {rep_perm.aligned_weight_error:.3f} "
                         f"(→ {rep_orth.aligned_weight_error:.3f} with orthogonal, {rep_full.aligned_weight_error:.3f} "
                         "with general head maps) | | | |")
    head = ["## Loss barriers between simulator Llamas of different seeds", "",
            f"Preset `tiny` ({cfg.n_layers} layers, width {cfg.d_model}, {cfg.n_heads} heads / {cfg.n_kv_heads or cfg.n_heads} "
            f"key-value heads, d_ff {cfg.d_ff}, byte tokenizer) trained {steps} steps per seed (AdamW, weight decay "
            f"{spec.train.weight_decay}); held-out NLL (nats per token) on {windows.shape[0]} windows of "
            f"{spec.data.seq_len} tokens at {points} points t of the line; barrier = max_t loss(t) − (loss(0) + "
            "loss(1)) / 2.", "",
            "| variant | mean barrier | std | per pair |", "|---|---|---|---|"]
    for v in variants:
        std = statistics.stdev(rows[v]) if len(rows[v]) > 1 else 0.0
        head.append(f"| {v} | {statistics.mean(rows[v]):.3f} | {std:.3f} | {', '.join(f'{x:.3f}' for x in rows[v])} |")
    return head + ["", "| seeds | variant | loss(0) | loss(1) | loss(½) | barrier |", "|---|---|---|---|---|---|",
                   *table, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--points", type=int, default=11)
    parser.add_argument("--eval-windows", type=int, default=64)
    parser.add_argument("--cond", type=float, default=100.0)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_barriers.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    load_before = load_average()
    walls: dict[str, float] = {}
    t0 = time.perf_counter()
    lines = [] if args.skip_recovery else recovery(args.cond, args.sigma, 0)
    walls["recovery"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    lines += barriers(args.pairs, args.steps, args.points, args.eval_windows)
    walls["barriers"] = time.perf_counter() - t1
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s=walls)
    print(f"wrote {write_results(args.out, 'Orbit alignment: recovery and seed-pair loss barriers', chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
