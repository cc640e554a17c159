"""Render ``compress prune`` / ``compress share``: tables (never cut, split to fit) and figures.

Figures: perplexity vs layers removed (one line per method, random as a mean +- std band, the
unpruned model as a dotted line) and perplexity vs compression ratio (one line per policy); log
y axis. The data-free geometry scores in the score table are excesses over each pair's
permutation null (so their floor is 0, printed in the caption).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from geodrift.compress.prune import PruneResult
from geodrift.compress.share_run import ShareResult
from geodrift.render import console, fmt, lit
from geodrift.render.figures import COLUMN_WIDTH_IN, save_figure, style
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.render.verdicts import VERDICT_STYLE, verdict_grid


def _ppl(value: float, se: float | None = None) -> str:
    return f"{value:.2f}" if se is None else f"{value:.2f} [dim]±{se:.3f}[/dim]"


def prune_grids(result: PruneResult) -> list[Grid]:
    """The perplexity table (n removed x method), the score table (layer x score) and the correlations."""
    methods = [c.method for c in result.curves]
    ppl = Grid(f"Held-out perplexity after removing n of {result.n_layers} layers — {result.model} "
               f"(unpruned {result.baseline_ppl:.2f})",
               [Col("n")] + [Col(m) for m in methods] + [Col("random (mean ± std)")],
               caption=f"{result.eval_windows} held-out windows of {result.seq_len} tokens ({result.corpus['name']}); "
               "± after a value: standard error of the mean window NLL (nats). Random: "
               f"{len(result.random_curves)} seeds.")
    for n in range(len(result.random_mean)):
        ppl.add(str(n + 1), *[_ppl(c.ppl[n], c.nll_se[n]) for c in result.curves],
                f"{result.random_mean[n]:.2f} ± {result.random_std[n]:.2f}")
    sets = Grid("Layers removed at each n", [Col("n")] + [Col(m, "left") for m in methods])
    for n in range(len(result.random_mean)):
        sets.add(str(n + 1), *[lit(" ".join(map(str, c.removed[n]))) for c in result.curves])
    names = list(result.scores)
    scores = Grid("Per-layer scores (geometry: excess over each adjacent pair's permutation null, floor 0; "
                  "block-influence and angular from calibration text)",
                  [Col("layer")] + [Col(m) for m in names])
    for layer in range(result.n_layers):
        scores.add(str(layer), *[fmt(result.scores[m][layer]) for m in names])
    floors = Grid("Continuity behind the geometry scores (predicted space, first singular vector, mean over pairs)",
                  [Col("Proj", "left"), Col("space", "left"), Col("|cos| v1/u1"), Col("null (mean ± std)"),
                   Col("random"), Col("σ²-WA (null)")])
    for g in result.geometry:
        floors.add(lit(g["label"]), lit(g["space"]), fmt(g["mean"]), f"{fmt(g['null_mean'])} ± {fmt(g['null_std'])}",
                   fmt(g["random_floor"]), f"{fmt(g['sigma2_wa'])} ({fmt(g['sigma2_null_mean'])})")
    corr = Grid("Spearman rank correlation: data-free removability vs the activation-based references",
                [Col("data-free", "left"), Col("reference", "left"), Col("rho"), Col("p")],
                caption="Removability: higher = removed earlier (−BI, −angular distance, greedy step; layers greedy "
                "did not remove tie last). rho > 0: the orders agree.", keys=2)
    for row in result.spearman:
        corr.add(lit(row["data_free"]), lit(row["reference"]), f"{row['rho']:+.3f}", f"{row['p_value']:.2g}")
    cost = Grid("Cost of each ranking (wall seconds; ratio to one held-out perplexity evaluation of the full model)",
                [Col("stage", "left"), Col("seconds"), Col("× one evaluation")])
    for stage, s in result.seconds.items():
        cost.add(lit(stage), f"{s:.1f}", f"{s / max(result.eval_seconds, 1e-9):.1f}")
    cost.add("one evaluation", f"{result.eval_seconds:.1f}", "1.0")
    grids = [ppl, sets, scores, floors, corr, cost] if result.geometry else [ppl, sets, scores, corr, cost]
    if result.verdicts:
        grids.insert(1, verdict_grid(result.verdicts, "The paper's pruning corollary, judged (criteria from the random "
                                     "orders' spread and the rank test, not from any published number)"))
    return grids


def render_prune(result: PruneResult, wide: bool = False) -> None:
    """Print every prune table, the notes, then a one-line summary."""
    for grid in prune_grids(result):
        print_grid(grid, wide=wide)
    for note in result.notes:
        console.print(lit(f"note: {note}", "dim"), soft_wrap=True)
    console.print(lit(prune_summary(result), "bold"), soft_wrap=True)


def prune_summary(result: PruneResult) -> str:
    """One line: the best method at N and where the data-free scores land."""
    n = len(result.random_mean)
    best = min(result.curves, key=lambda c: c.ppl[-1])
    parts = [f"at n = {n}: best {best.method} {best.ppl[-1]:.2f}"]
    for c in result.curves:
        if c.method.startswith("geom-"):
            parts.append(f"{c.method} {c.ppl[-1]:.2f}")
    parts.append(f"random {result.random_mean[-1]:.2f} ± {result.random_std[-1]:.2f}")
    return f"{result.model}: unpruned {result.baseline_ppl:.2f}; " + ", ".join(parts)


def share_grids(result: ShareResult) -> list[Grid]:
    """Policy table (ratio x policy), per-projection-alone table and the verdict table."""
    pol = Grid(f"Held-out perplexity with shared bases (groups of {result.group_size}) — {result.model} "
               f"(dense {result.baseline_ppl:.2f})",
               [Col("ratio removed")] + [Col(c.policy) for c in result.curves],
               caption="Every policy keeps the same parameters per projection (bases counted once per group, every "
               "coefficient counted; ranks rounded down). ± : standard error of the mean window NLL (nats).")
    for i, ratio in enumerate(result.ratios):
        pol.add(f"{ratio:.0%}", *[_ppl(c.ppl[i], c.nll_se[i]) for c in result.curves])
    params = Grid("Projection parameters kept (of dense)", [Col("ratio removed")] + [Col(c.policy) for c in result.curves])
    for i, ratio in enumerate(result.ratios):
        params.add(f"{ratio:.0%}", *[f"{c.kept_params[i] / c.dense_params:.3f}" for c in result.curves])
    grids = [pol, params]
    if result.alone:
        alone = Grid(f"Each projection alone at {result.alone_ratio:.0%} removed (all else dense)",
                     [Col("Proj", "left"), Col("input (v) shared"), Col("output (u) shared"), Col("private SVD")])
        for role in dict.fromkeys(a.role for a in result.alone):
            rows = {a.space: a for a in result.alone if a.role == role}
            alone.add(lit(rows["input"].label), *[_ppl(rows[s].ppl, rows[s].nll_se) for s in ("input", "output", "private")])
        verdict = Grid("Does the predicted space win? (per projection alone)",
                       [Col("Proj", "left"), Col("predicted", "left"), Col("best", "left"), Col("differences", "left"),
                        Col("verdict", "left")],
                       caption="differences: paired mean-NLL difference (nats/token) ± its standard error over "
                       "windows; criterion: " + (result.verdicts[0].criterion if result.verdicts else ""))
        for v in result.verdicts:
            diff = "\n".join(f"{k}: {d['mean']:+.4f} ± {d['se']:.4f}" for k, d in v.differences.items())
            verdict.add(lit(v.label), lit(v.predicted), lit(v.best), diff, VERDICT_STYLE.get(v.verdict, lit(v.verdict)))
        verdict.lines = True
        grids += [alone, verdict]
    cost = Grid("Cost (wall seconds)", [Col("stage", "left"), Col("seconds"), Col("× one evaluation")])
    for stage, s in result.seconds.items():
        cost.add(lit(stage), f"{s:.1f}", f"{s / max(result.eval_seconds, 1e-9):.1f}")
    cost.add("one evaluation", f"{result.eval_seconds:.1f}", "1.0")
    return grids + [cost]


def render_share(result: ShareResult, wide: bool = False) -> None:
    """Print every share table, the notes, then a one-line summary."""
    for grid in share_grids(result):
        print_grid(grid, wide=wide)
    for note in result.notes:
        console.print(lit(f"note: {note}", "dim"), soft_wrap=True)
    console.print(lit(share_summary(result), "bold"), soft_wrap=True)


def share_summary(result: ShareResult) -> str:
    """One line: the best policy at each ratio, and the per-projection verdict count."""
    best = []
    for i, ratio in enumerate(result.ratios):
        c = min(result.curves, key=lambda c: c.ppl[i])
        best.append(f"{ratio:.0%}: {c.policy} {c.ppl[i]:.2f}")
    held = sum(v.verdict == "holds" for v in result.verdicts)
    tail = f"; predicted space holds for {held}/{len(result.verdicts)} projections alone" if result.verdicts else ""
    return f"{result.model}: best policy " + ", ".join(best) + tail


def plot_prune(result: PruneResult, path: str | Path, dpi: int = 300) -> Path:
    """Perplexity vs layers removed: one line per method, random as mean ± std band, unpruned dotted."""
    import matplotlib.pyplot as plt

    with style():
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.2), layout="constrained")
        n = list(range(1, len(result.random_mean) + 1))
        # On the log axis the band is the mean ± std of log perplexity over the seeds (geometric).
        logs = [[math.log(c.ppl[i]) for c in result.random_curves] for i in range(len(n))]
        mid = [statistics.fmean(v) for v in logs]
        sd = [statistics.stdev(v) for v in logs]
        ax.fill_between(n, [math.exp(m - s) for m, s in zip(mid, sd, strict=True)],
                        [math.exp(m + s) for m, s in zip(mid, sd, strict=True)], color="0.6", alpha=0.3, lw=0,
                        label=f"random ({len(result.random_curves)} seeds: exp(mean ± std of log ppl))")
        ax.plot(n, [math.exp(m) for m in mid], color="0.4", lw=0.8, ls="--")
        for c in result.curves:
            ax.plot(n, c.ppl, marker=".", label=c.method)
        ax.axhline(result.baseline_ppl, color="0.35", ls=":", lw=0.9, label=f"unpruned ({result.baseline_ppl:.1f})")
        ax.set_yscale("log")
        ax.set_xlabel("layers removed n")
        ax.set_ylabel("held-out perplexity")
        ax.set_title(f"{result.model.split(' ')[0]} ({result.n_layers} layers)", fontsize=7.5)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=6)
        return save_figure(fig, path, dpi)


def plot_share(result: ShareResult, path: str | Path, dpi: int = 300) -> Path:
    """Perplexity vs compression ratio: one line per policy, the dense model dotted."""
    import matplotlib.pyplot as plt

    with style():
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.2), layout="constrained")
        x = [100 * r for r in result.ratios]
        for c in result.curves:
            ax.plot(x, c.ppl, marker=".", label=c.policy)
        ax.axhline(result.baseline_ppl, color="0.35", ls=":", lw=0.9, label=f"dense ({result.baseline_ppl:.1f})")
        ax.set_yscale("log")
        ax.set_xlabel("projection parameters removed (%)")
        ax.set_ylabel("held-out perplexity")
        ax.set_title(f"{result.model.split(' ')[0]}: shared bases, groups of {result.group_size}", fontsize=7.5)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=6)
        return save_figure(fig, path, dpi)
