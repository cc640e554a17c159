"""Seed-pair loss barriers: naive averaging, Git Re-Basin weight matching, rotation-symmetry matching, geodrift's alignment.

Issue 41 item 3 ("different seeds"), a sibling of bench_barriers.py: ``--pairs`` pairs of the transformer
simulator's ``tiny`` Llama (3 layers, width 32, 2 heads) trained ``--steps`` steps from different seeds; the
held-out loss along the straight line ``(1 - t) A + t B`` at ``--points`` values of ``t``. Reported: the
**midpoint barrier** ``loss(1/2) - (loss(0) + loss(1)) / 2`` and the maximum over ``t`` of
``loss(t) - ((1 - t) loss(0) + t loss(1))`` (Git Re-Basin's), for

- **naive**: the raw weights;
- **permutation** (Git Re-Basin weight matching, arXiv 2209.04836, built from geodrift's maps:
  :func:`geodrift.merging.rebasin.permutation_match` - residual, head and hidden-unit permutations);
- **rotation-symmetry** (arXiv 2502.00264 style: :func:`geodrift.merging.rebasin.rotation_match` - the
  permutations plus orthogonal V/O maps per key-value head and RoPE-commuting Q/K rotations);
- **geodrift**: ``geodrift merge``'s alignment (:func:`geodrift.merging.frame.check_pair`: gains folded, residual
  rotation, head and hidden permutations, per-head maps - the better of general and orthogonal -, Up/Down
  scalings).

Controls that the barrier measures the models and not the measure: (1) a model against an exact random gauge of
itself (``random_gauge``, every generator): the naive line crosses broken models, the aligned one must be flat;
(2) two checkpoints of one run (``--steps`` - 100 and ``--steps``): a barrier near 0 without any alignment.
The figure (``--figure``) draws the mean loss along the line per variant.

Usage (writes ``--out``, default benchmarks/RESULTS_merge_barriers.md, stamped, and the figure):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_merge_barriers.py
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

from geodrift.gauge.align import shape_of
from geodrift.gauge.orbit import GaugeShape, StateDict, fold_gains, random_gauge
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.hf import hf_step_dir
from geodrift.lm.text import eval_windows, perplexity
from geodrift.merging.frame import check_pair, fold_reference
from geodrift.merging.rebasin import permutation_match, rotation_match
from geodrift.sim.presets import preset
from geodrift.sim.record import run_dir
from geodrift.sim.run import run
from geodrift.sim.simulator import build_llama, prepare_text

VARIANTS = ("naive", "permutation (Git Re-Basin)", "rotation-symmetry", "geodrift alignment")


def line(model: torch.nn.Module, a: StateDict, b: StateDict, windows: torch.Tensor, points: int) -> list[float]:
    losses = []
    for i in range(points):
        t = i / (points - 1)
        model.load_state_dict({k: ((1 - t) * a[k].double() + t * b[k].double()).float() for k in a}, strict=True)
        losses.append(perplexity(model, windows)["nll"])
    return losses


def midpoint(losses: list[float]) -> float:
    """``loss(1/2) - (loss(0) + loss(1)) / 2`` (an odd number of points).

    Example:
        >>> midpoint([1.0, 3.0, 1.0])
        2.0
    """
    return losses[len(losses) // 2] - (losses[0] + losses[-1]) / 2


def highest(losses: list[float]) -> float:
    """``max_t loss(t) - ((1 - t) loss(0) + t loss(1))`` (Frankle et al.'s and Git Re-Basin's barrier).

    Example:
        >>> highest([2.0, 1.5, 1.0])
        0.0
    """
    n = len(losses) - 1
    return max(loss - ((1 - i / n) * losses[0] + i / n * losses[-1]) for i, loss in enumerate(losses))


def variants(a: StateDict, b: StateDict, shape: GaugeShape) -> dict[str, tuple[StateDict, StateDict]]:
    """Each variant's two endpoints (A folded and B moved, or the raw pair)."""
    wide_a = {k: v.double() for k, v in fold_gains(a, shape).items()}
    wide_b = {k: v.double() for k, v in fold_gains(b, shape).items()}
    aligned, _ = check_pair(fold_reference(a, shape), b, shape, "B", "A")
    return {VARIANTS[0]: (a, b), VARIANTS[1]: (wide_a, permutation_match(wide_a, wide_b, shape)),
            VARIANTS[2]: (wide_a, rotation_match(wide_a, wide_b, shape)), VARIANTS[3]: (wide_a, aligned)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--points", type=int, default=11)
    parser.add_argument("--eval-windows", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_merge_barriers.md"))
    parser.add_argument("--figure", type=Path, default=Path("benchmarks/figures/merge_barriers.png"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    load_before = load_average()
    t0 = time.perf_counter()
    spec = preset("transformer", "tiny")[0]
    spec = replace(spec, train=replace(spec.train, steps=args.steps, warmup_steps=min(20, args.steps // 10)))
    text = prepare_text(spec.data)
    windows = eval_windows(text.valid, spec.data.seq_len, args.eval_windows)
    cfg = spec.model
    model = build_llama(replace(cfg, tie_embeddings=False), text.tokenizer.vocab_size, 0).eval()
    curves: dict[str, list[list[float]]] = {v: [] for v in (*VARIANTS, "control: self vs its gauge (naive)",
                                                           "control: self vs its gauge (geodrift)",
                                                           "control: one run, two checkpoints (naive)")}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        def trained(seed: int, step: int | None = None) -> StateDict:
            folder = hf_step_dir(run_dir(tmp, spec.label, seed), step or args.steps)
            if not folder.is_dir():
                run(spec, [seed], out=tmp, save_hf_every=100, track=False)
            return load_file(str(folder / "model.safetensors"))

        shape: GaugeShape | None = None
        for pair in range(args.pairs):
            seed_a, seed_b = 2 * pair + 1, 2 * pair + 2
            a, b = trained(seed_a), trained(seed_b)
            shape = shape_of(a, cfg.n_heads, cfg.n_kv_heads)
            for name, (x, y) in variants(a, b, shape).items():
                losses = line(model, x, y, windows, args.points)
                curves[name].append(losses)
                rows.append(f"| {seed_a}, {seed_b} | {name} | {losses[0]:.3f} | {losses[-1]:.3f} | "
                            f"{losses[args.points // 2]:.3f} | {midpoint(losses):.3f} | {highest(losses):.3f} |")
            twin = random_gauge({k: v.double() for k, v in a.items()}, shape, torch.Generator().manual_seed(seed_a))
            moved, _ = check_pair(fold_reference(a, shape), twin, shape, "twin", "A")
            earlier = trained(seed_a, args.steps - 100)
            for name, (x, y) in {"control: self vs its gauge (naive)": (a, twin),
                                 "control: self vs its gauge (geodrift)": (fold_gains(a, shape), moved),
                                 "control: one run, two checkpoints (naive)": (earlier, a)}.items():
                losses = line(model, x, y, windows, args.points)
                curves[name].append(losses)
                rows.append(f"| {seed_a} | {name} | {losses[0]:.3f} | {losses[-1]:.3f} | "
                            f"{losses[args.points // 2]:.3f} | {midpoint(losses):.3f} | {highest(losses):.3f} |")
    wall = time.perf_counter() - t0
    lines = ["## Midpoint loss barriers between simulator Llamas of different seeds", "",
             f"Preset `tiny` ({cfg.n_layers} layers, width {cfg.d_model}, {cfg.n_heads} heads / "
             f"{cfg.n_kv_heads or cfg.n_heads} key-value heads, d_ff {cfg.d_ff}, byte tokenizer) trained {args.steps} "
             f"steps per seed; held-out NLL (nats per token) on {windows.shape[0]} windows of {spec.data.seq_len} "
             f"tokens at {args.points} points of the line. Midpoint barrier = loss(½) − (loss(0) + loss(1)) / 2; "
             "max barrier = max_t loss(t) − ((1 − t) loss(0) + t loss(1)). Mean ± standard deviation over the pairs "
             f"({args.pairs} seed pairs; the controls use each pair's first seed).", "",
             "| variant | midpoint barrier | std | max barrier | per pair (midpoint) |", "|---|---|---|---|---|"]
    for name, found in curves.items():
        mids = [midpoint(c) for c in found]
        std = statistics.stdev(mids) if len(mids) > 1 else 0.0
        lines.append(f"| {name} | {statistics.mean(mids):.3f} | {std:.3f} | "
                     f"{statistics.mean(highest(c) for c in found):.3f} | {', '.join(f'{m:.3f}' for m in mids)} |")
    lines += ["", "| seeds | variant | loss(0) | loss(1) | loss(½) | midpoint barrier | max barrier |",
              "|---|---|---|---|---|---|---|", *rows, "", f"Figure: `{args.figure}` (mean loss along the line).", ""]
    draw(curves, args.figure)
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s={"all": wall})
    print(f"wrote {write_results(args.out, 'Seed-pair loss barriers: naive, Git Re-Basin, rotation-symmetry, geodrift', chr(10).join(lines), s)}")


def draw(curves: dict[str, list[list[float]]], path: Path) -> None:
    """The mean loss along the line, one curve per variant (controls dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from geodrift.io.atomic import write_with

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, found in curves.items():
        points = len(found[0])
        mean = [statistics.mean(c[i] for c in found) for i in range(points)]
        ax.plot([i / (points - 1) for i in range(points)], mean, "--" if name.startswith("control") else "-",
                marker="o", markersize=3, label=name)
    ax.set_xlabel("t  ((1 − t) A + t B)")
    ax.set_ylabel("held-out NLL (nats per token)")
    ax.set_title("Seed pairs of the simulator's tiny Llama: loss along the line")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_with(path, lambda tmp: fig.savefig(tmp, dpi=150, format="png"))
    plt.close(fig)


if __name__ == "__main__":
    main()
