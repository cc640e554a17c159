"""Render ``compress prune``: tables (never cut, split to fit) and the figure (``compress share``:
:mod:`geodrift.render.compress_share`).

Figure: perplexity vs layers removed (one line per method, the random orders as their median and
interquartile band, the unpruned model as a dotted line); log y axis. The data-free geometry
scores in the score table are excesses over each pair's permutation null (so their floor is 0,
printed in the caption). Every table names the weights it ran on.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from geodrift.compress.prune import PruneResult
from geodrift.compress.saved import Saved
from geodrift.compress.table import GEOMETRY, RANKINGS
from geodrift.io.atomic import document
from geodrift.render import console, fmt, lit
from geodrift.render.compress_share import short_ppl
from geodrift.render.figures import COLUMN_WIDTH_IN, log_scale, save_figure, style
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.render.verdicts import VERDICT_STYLE, verdict_grid


def _ppl(value: float, se: float | None = None) -> str:
    return f"{value:.2f}" if se is None else f"{value:.2f} [dim]±{se:.3f}[/dim]"


def prune_grids(result: PruneResult) -> list[Grid]:
    """The perplexity table (n removed x method), the score table (layer x score) and the correlations."""
    methods = [c.method for c in result.curves]
    ppl = Grid(f"Held-out perplexity after removing n of {result.n_layers} layers — {result.model} "
               f"(unpruned {result.baseline_ppl:.2f})",
               [Col("n")] + [Col(m) for m in methods] + [Col("random median"), Col("random (mean ± std)")],
               caption=f"Weights: {result.weights}. {result.eval_windows} held-out windows of {result.seq_len} tokens "
               f"({result.corpus['name']}); ± after a value: standard error of the mean window NLL (nats). Random: "
               f"{len(result.random_curves)} orders (seeds 0..{len(result.random_curves) - 1}).")
    for n in range(len(result.random_mean)):
        ppl.add(str(n + 1), *[_ppl(c.ppl[n], c.nll_se[n]) for c in result.curves], f"{result.random_median[n]:.2f}",
                f"{result.random_mean[n]:.2f} ± {result.random_std[n]:.2f}")
    beaten = Grid(f"Fraction of the {len(result.random_curves)} random orders each method beats (lower perplexity; "
                  "ties count half)", [Col("n")] + [Col(m) for m in methods])
    for n in range(len(result.random_mean)):
        beaten.add(str(n + 1), *[f"{result.beats_random[m][n]:.2f}" for m in methods])
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
    grids = [ppl, beaten, sets, scores, floors, corr, cost] if result.geometry else [ppl, beaten, sets, scores, corr, cost]
    if result.verdicts:
        grids.insert(1, verdict_grid(result.verdicts, "The paper's pruning corollary, judged (criteria from the random "
                                     "orders' spread and the rank test, not from any published number)"))
    return grids


def prune_document(result: PruneResult) -> dict[str, Any]:
    """The JSON document of a prune result (``--json``, ``--json-out``)."""
    return document("compress_prune", result.to_dict())


FULL_HINT = "--full: ± SE, layers removed, layer scores, correlations, measurements, cost"


def brief_grid(result: PruneResult) -> Grid:
    """The compact perplexity table: n × method, with the random orders' median (``--full``: ± SE, mean ± std)."""
    methods = [c.method for c in result.curves]
    grid = Grid(f"Held-out perplexity, n of {result.n_layers} layers removed (unpruned {short_ppl(result.baseline_ppl)})",
                [Col("n")] + [Col(m) for m in methods] + [Col("random")],
                caption=f"{result.eval_windows} held-out windows of {result.seq_len} tokens ({result.corpus['name']}); "
                f"random: the median of {len(result.random_curves)} random orders. Weights: {result.weights}.")
    for n in range(len(result.random_mean)):
        grid.add(str(n + 1), *[short_ppl(c.ppl[n]) for c in result.curves], short_ppl(result.random_median[n]))
    return grid


def claims_grid(result: PruneResult) -> Grid:
    """The claims, one short row each: number, claim, verdict (criteria follow once, full width: :func:`criteria`)."""
    grid = Grid("The paper's pruning corollary, judged (criteria below; measurements: --full)",
                [Col("#"), Col("claim", "left", prose=True), Col("verdict", "center")])
    for i, v in enumerate(result.verdicts, 1):
        grid.add(str(i), lit(v.claim), VERDICT_STYLE.get(v.verdict, lit(v.verdict)))
    return grid


def criteria(result: PruneResult) -> list[str]:
    """Each distinct criterion once, with the numbers of the claims it judged.

    Example:
        >>> from types import SimpleNamespace as S
        >>> from geodrift.continuity.verdicts import Verdict
        >>> criteria(S(verdicts=[Verdict("a", "z >= 3", "", "holds"), Verdict("b", "z >= 3", "", "fails")]))
        ['criterion of claims 1, 2: z >= 3']
    """
    by_text: dict[str, list[str]] = {}
    for i, v in enumerate(result.verdicts, 1):
        by_text.setdefault(v.criterion, []).append(str(i))
    return [f"criterion of claim{'s' * (len(n) > 1)} {', '.join(n)}: {text}" for text, n in by_text.items()]


def render_prune(result: PruneResult, wide: bool = False, full: bool = False) -> None:
    """Print the prune result: brief by default (the perplexity table, the claims, each criterion once at the full
    width, a pointer to ``--full``, the summary: at most 60 lines at 80 columns at the defaults), every table with
    ``full``. Every line is wrapped to the terminal."""
    if full:
        for grid in prune_grids(result):
            print_grid(grid, wide=wide)
    else:
        print_grid(brief_grid(result), wide=wide)
        if result.verdicts:
            print_grid(claims_grid(result), wide=wide)
            for line in criteria(result):
                console.print(lit(line, "dim"))
    for note in result.notes:
        console.print(lit(f"note: {note}", "dim"))
    if not full:
        console.print(lit(FULL_HINT, "dim"))
    if result.saved is not None:
        console.print(lit(saved_line(result.saved)))
    console.print(lit(prune_summary(result), "bold"))


def saved_line(saved: Saved) -> str:
    """What prune's ``--save`` wrote: the removed layers, those kept (renumbered) and the tokenizer files.

    Example:
        >>> from geodrift.compress.saved import PRUNED
        >>> saved_line(Saved("small", PRUNED, "geom-v1", n=2, removed=(3, 7), kept=(0, 1, 2, 4, 5, 6),
        ...                  tokenizer=("tokenizer.json",)))
        'saved small: geom-v1 with 2 layers removed (layers 3, 7 of the input); 6 kept, renumbered 0..5; tokenizer: tokenizer.json'
    """
    kept = saved.kept
    return (f"saved {saved.folder}: {saved.method} with {saved.n} layers removed (layers "
            f"{', '.join(map(str, saved.removed))} of the input); {len(kept)} kept, renumbered 0..{len(kept) - 1}; "
            "tokenizer: " + (", ".join(saved.tokenizer) or "none found beside the input"))


def prune_summary(result: PruneResult) -> str:
    """One line: the best method at N and where the data-free scores land."""
    n = len(result.random_mean)
    best = min(result.curves, key=lambda c: c.ppl[-1])
    parts = [f"at n = {n}: best {best.method} {best.ppl[-1]:.2f}"]
    for c in result.curves:
        if c.method in RANKINGS and RANKINGS[c.method].signal == GEOMETRY:
            parts.append(f"{c.method} {c.ppl[-1]:.2f}")
    parts.append(f"random median {result.random_median[-1]:.2f} ({len(result.random_curves)} orders)")
    return f"{result.model}: unpruned {result.baseline_ppl:.2f}; " + ", ".join(parts)


def plot_prune(result: PruneResult, path: str | Path, dpi: int = 300) -> Path:
    """Perplexity vs layers removed: one line per method, random as mean ± std band, unpruned dotted."""
    import matplotlib.pyplot as plt

    with style():
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.2), layout="constrained")
        n = list(range(1, len(result.random_mean) + 1))
        # The random orders as their median and interquartile band (robust to one exploding order).
        quarts = [statistics.quantiles([c.ppl[i] for c in result.random_curves], n=4, method="inclusive")
                  for i in range(len(n))]
        ax.fill_between(n, [q[0] for q in quarts], [q[2] for q in quarts], color="0.6", alpha=0.3, lw=0,
                        label=f"random ({len(result.random_curves)} orders: median, interquartile band)")
        ax.plot(n, result.random_median, color="0.4", lw=0.8, ls="--")
        for c in result.curves:
            ax.plot(n, c.ppl, marker=".", label=c.method)
        ax.axhline(result.baseline_ppl, color="0.35", ls=":", lw=0.9, label=f"unpruned ({result.baseline_ppl:.1f})")
        log_scale(ax)
        ax.set_xlabel("layers removed n")
        ax.set_ylabel("held-out perplexity")
        ax.set_title(f"{result.model.split(' ')[0]} ({result.n_layers} layers)", fontsize=7.5)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=6)
        return save_figure(fig, path, dpi)
