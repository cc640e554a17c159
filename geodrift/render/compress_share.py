"""Render ``compress share``: one table per ratio, the attribution controls, geodrift's choices,
the per-projection sharing evidence at both budgets, the verdicts, the cost, and the figure.

Every table names the weights it ran on (``ShareResult.weights``, e.g. 4-bit Q4_1, dequantized)
and the held-out windows; every perplexity carries the standard error of its mean window NLL, and
every overlap or alignment its floor (random subspaces, unrelated layers).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.text import Text

from geodrift.compress.evaluate import paired
from geodrift.compress.saved import Saved
from geodrift.compress.share_run import ShareResult, best_baseline
from geodrift.compress.table import CONTROL_OF, METHODS
from geodrift.continuity.verdicts import Verdict
from geodrift.io.atomic import document
from geodrift.render import console, fmt, lit, plural
from geodrift.render.figures import COLUMN_WIDTH_IN, log_scale, save_figure, style
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.render.verdicts import VERDICT_STYLE, verdict_grid


def _caption(result: ShareResult) -> str:
    return (f"Weights: {result.weights}. Held-out: {result.eval_windows} windows of {result.seq_len} tokens "
            f"({escape(result.corpus.get('evaluation', result.corpus['name']))}); ± after a perplexity: standard "
            "error of the mean window NLL (nats); Δ: paired per-window NLL difference to the best baseline of "
            "that draw (nats/token ± SE).")


def ratio_grids(result: ShareResult) -> list[Grid]:
    """One table per ratio: method × (perplexity ± SE, Δ best baseline, parameters kept, seconds) per draw."""
    grids = []
    for ratio in result.ratios:
        cols = [Col("method", "left"), Col("kind", "left")]
        for d in result.draw_ids:
            tag = f" (draw {d})" if result.calib_draws > 1 else ""
            cols += [Col(f"perplexity{tag}"), Col(f"Δ best baseline{tag}")]
        cols += [Col("params kept"), Col("seconds")]
        grid = Grid(f"{ratio:.0%} of the projection parameters removed — {result.model} (dense "
                    f"{result.baseline_ppl:.2f} ± {result.baseline_nll_se:.3f})", cols, keys=1, caption=_caption(result))
        for method in result.methods:
            cells = []
            first = result.run(method, ratio, result.draw_ids[0])
            if first is None:
                continue
            for d in result.draw_ids:
                run, best = result.run(method, ratio, d), best_baseline(result.runs, ratio, d)
                assert run is not None
                cells.append(f"{run.ppl:.2f} [dim]±{run.nll_se:.3f}[/dim]")
                if best is None or best.method == method:
                    cells.append("best" if best is not None else "—")
                else:
                    p = paired(run.window_nll, best.window_nll)
                    cells.append(f"{p['mean']:+.3f} ± {p['se']:.3f}")
            cells += [f"{first.kept_params / first.dense_params:.3f}", f"{first.build_seconds + first.eval_seconds:.0f}"]
            grid.add(method, first.kind, *cells)
        grids.append(grid)
    return grids


def comparison_grid(result: ShareResult) -> Grid:
    """Paired differences: the continuity methods against the best baseline, and each attribution control."""
    grid = Grid("Paired differences a − b (nats/token ± SE over the held-out windows; negative: a is better)",
                [Col("ratio"), Col("draw"), Col("a", "left"), Col("b", "left"), Col("a − b"), Col("beyond 2 SE", "left"),
                 Col("what", "left")], keys=2,
                caption="Controls change one choice each: " + "; ".join(
                    f"{control} of {target} ({METHODS[control].changes})" for control, target in CONTROL_OF.items()) + ".")
    for c in result.comparisons:
        grid.add(f"{c['ratio']:.0%}", str(c["draw"]), c["a"], c["b"], f"{c['mean']:+.3f} ± {c['se']:.3f}",
                 "yes" if c["significant"] else "no", c["what"])
    return grid


def choice_grid(result: ShareResult) -> Grid:
    """geodrift's grouping and space per projection (first draw), with the overlaps' random floor."""
    grid = Grid(f"geodrift's choices (draw {result.draw_ids[0]}): groups by maximum-weight matching of the whitened "
                "subspace overlap; space first by the lowest relative whitened loss, then by calibration NLL",
                [Col("ratio"), Col("Proj", "left"), Col("rank"), Col("space", "left"), Col("by loss", "left"),
                 Col("calib. NLL priv / in / out"), Col("rel. loss priv / in / out"),
                 Col("overlap in (floor)"), Col("overlap out (floor)"), Col("adjacent pairs in / out (random)")], keys=2,
                caption="overlap: mean ||Q_a^T Q_b||²/r within the matched groups; floor r/d (random subspaces). "
                "adjacent pairs: fraction of matched pairs that are depth neighbours; random: 2/L.")
    for c in result.choices:
        loss, sel = c["relative_loss"], c["selection_nll"]
        grid.add(f"{c['ratio']:.0%}", c["role"], str(c["rank"]), c["space"], c["loss_space"],
                 " / ".join(f"{sel[s]:.4f}" if s in sel else "—" for s in ("private", "input", "output")),
                 f"{loss['private']:.4f} / {loss['input']:.4f} / {loss['output']:.4f}",
                 f"{c['overlap']['input']:.3f} ({c['floor']['input']:.3f})",
                 f"{c['overlap']['output']:.3f} ({c['floor']['output']:.3f})",
                 f"{c['adjacent']['input']:.2f} / {c['adjacent']['output']:.2f} ({c['adjacent_floor']:.2f})")
    return grid


def _ms(values: list[float]) -> str:
    clean = [v for v in values if v == v]
    if not clean:
        return "—"
    mean = statistics.fmean(clean)
    se = statistics.stdev(clean) / math.sqrt(len(clean)) if len(clean) > 1 else float("nan")
    return f"{mean:+.3f} ± {fmt(se)}"


def sharing_grid(result: ShareResult) -> Grid:
    """Per projection and space: equal-rank penalty, unrelated ceiling, alignment (adjacent, random), equal-parameter excess."""
    grid = Grid(f"Sharing a basis across adjacent layers, per projection, at {result.verdict_ratio:.0%} removed "
                f"(whitened error relative to the group's energy; mean ± SE over the groups; draw {result.draw_ids[0]})",
                [Col("Proj", "left"), Col("space", "left"), Col("rank r"), Col("penalty at r"), Col("unrelated at r"),
                 Col("alignment adjacent"), Col("alignment random pairs"), Col("rank at equal params"),
                 Col("shared − private at equal params")], keys=2,
                caption="penalty = err_shared(r) − err_private(r), each layer at rank r; unrelated: the same with the "
                "group's other layers rotated at random in that space (no shared structure); alignment = 1 − "
                "penalty/unrelated (0: nothing shared, 1: the whole rank-r subspace shared). Weights: "
                f"{result.weights}.")
    for p in result.sharing:
        for space in ("input", "output"):
            s = p["spaces"][space]
            grid.add(p["label"], space + (" (predicted)" if p["predicted"] == space else ""), str(p["rank"]),
                     _ms(s["penalty"]), _ms(s["unrelated"]), _ms(s["alignment"]), _ms(s["alignment_random"]),
                     str(s["rank_equal_params"]), _ms(s["excess"]))
    return grid


def share_grids(result: ShareResult) -> list[Grid]:
    """Every table of a share result, in print order."""
    grids = ratio_grids(result)
    if result.comparisons:
        grids.append(comparison_grid(result))
    if result.verdicts:
        grids.append(verdict_grid(result.verdicts, "Verdicts (criteria from the paired window differences and the "
                                  "groups' spread, never from a published number)"))
    if result.choices:
        grids.append(choice_grid(result))
    if result.sharing:
        grids.append(sharing_grid(result))
    cost = Grid("Cost (wall seconds)", [Col("stage", "left"), Col("seconds"), Col("× one evaluation")])
    for stage, s in result.seconds.items():
        cost.add(stage, f"{s:.1f}", f"{s / max(result.eval_seconds, 1e-9):.1f}")
    cost.add("one dense evaluation (recording the layer inputs)", f"{result.eval_seconds:.1f}", "1.0")
    return grids + [cost]


FULL_HINT = "--full: Δ per draw, paired differences, choices, evidence, criteria, cost"


def short_ppl(ppl: float) -> str:
    """A perplexity in at most 7 characters (two decimals below 10^4, none below 10^6, else two digits).

    Example:
        >>> short_ppl(64.8123), short_ppl(180438.9), short_ppl(2.34e8)
        ('64.81', '180439', '2.3e+08')
    """
    return f"{ppl:.2f}" if ppl < 1e4 else f"{ppl:.0f}" if ppl < 1e6 else f"{ppl:.1e}"


def perplexity_grid(result: ShareResult) -> Grid:
    """The compact table: method × ratio, held-out perplexity ± SE on the first calibration draw."""
    d = result.draw_ids[0]
    draw = f"; calibration draw {d} of {result.calib_draws}" if result.calib_draws > 1 else ""
    best = {ratio: best_baseline(result.runs, ratio, d) for ratio in result.ratios}
    named = ", ".join(f"{ratio:.0%} {b.method}" for ratio, b in best.items() if b is not None)
    grid = Grid(f"Held-out perplexity by parameters removed (dense {short_ppl(result.baseline_ppl)} ± "
                f"{result.baseline_nll_se:.3f}{draw})", [Col("method", "left")]
                + [Col(f"{ratio:.0%}") for ratio in result.ratios],
                caption=f"{result.eval_windows} held-out windows of {result.seq_len} tokens; ± SE of the mean window "
                "NLL (nats). Rows: baselines | continuity | controls" + (f"; best baseline: {named}." if named else "."))
    methods = [m for m in result.methods if any(result.run(m, r, d) for r in result.ratios)]
    for i, method in enumerate(methods):
        cells = []
        for ratio in result.ratios:
            run = result.run(method, ratio, d)
            cells.append("—" if run is None else f"{short_ppl(run.ppl)} [dim]±{run.nll_se:.3f}[/dim]")
        kind = METHODS[method].kind
        last = i + 1 == len(methods) or METHODS[methods[i + 1]].kind != kind
        grid.add(lit(method), *cells, end_section=last and i + 1 < len(methods))
    return grid


def beats_grid(result: ShareResult) -> Grid:
    """The question's verdict per ratio, measured, without its criterion (``--full`` prints it)."""
    grid = Grid("geodrift's compression beats the best baseline? (nats/token; criterion: --full)",
                [Col("removed"), Col("geodrift − best baseline; − its random-grouping control", "left", prose=True),
                 Col("verdict", "center")])
    beats = result.verdicts[:len(result.verdicts) - 2 * len(result.sharing)]  # one per ratio, in order
    one_draw = len(result.draw_ids) == 1
    for ratio, v in zip(result.ratios, beats, strict=True):
        measured = v.measured.removesuffix(" (nats/token)")
        if one_draw:  # "draw 0: geodrift - svd-llm ..." says the draw and the minuend the header says
            measured = measured.split(": ", 1)[-1].removeprefix("geodrift - ")
        grid.add(f"{ratio:.0%}", lit(measured), VERDICT_STYLE.get(v.verdict, lit(v.verdict)))
    return grid


def space_grid(result: ShareResult) -> Grid:
    """Per projection: the predicted space and both budgets' verdicts with the paired difference that decided them."""
    grid = Grid(f"A shared basis belongs in the predicted space? ({result.verdict_ratio:.0%} removed; criteria: --full)",
                [Col("Proj", "left"), Col("predicted", "left"), Col("equal rank: alignment", "left", prose=True),
                 Col("equal params: error", "left", prose=True), Col("ranks")],
                caption="Paired over the adjacent groups: the predicted space minus the other (V: each space, "
                "alignment; or minus private, error); mean ± SE.")
    for p in result.sharing:
        rank_v, params_v = (Verdict(**v) if isinstance(v, dict) else v for v in p["verdicts"])
        predicted = p["predicted"]
        other = "output" if predicted == "input" else "input"
        rank_text = rank_v.measured.removeprefix(f"alignment {predicted} - {other} ").replace(" alignment ", " ")
        params_text, _, ranks = params_v.measured.removeprefix(f"relative error {predicted} - {other} ").partition(
            " (ranks ")
        grid.add(p["label"], predicted or "neither",
                 *(Text.assemble(Text.from_markup(VERDICT_STYLE.get(v.verdict, v.verdict)), lit(f" {text}"))
                   for v, text in ((rank_v, rank_text), (params_v, params_text))),
                 ranks.removesuffix(")") or "—")
    return grid


def share_document(result: ShareResult) -> dict[str, Any]:
    """The JSON document of a share result (``--json``, ``--json-out``)."""
    return document("compress_share", result.to_dict())


def render_share(result: ShareResult, wide: bool = False, full: bool = False) -> None:
    """Print the share result: compact by default (at most about 60 lines at 80 columns), every table with ``full``.

    Args:
        result: what ``compress share`` measured.
        wide: tables at their full width (never split).
        full: every table (:func:`share_grids`: per-draw Δ, paired differences, choices, sharing evidence,
            verdicts with their criteria, the cost) and every note.
    """
    if full:
        for grid in share_grids(result):
            print_grid(grid, wide=wide)
        notes = [*result.notes, *(f"whitening: {w}" for w in result.whitening)]
    else:
        grids = [perplexity_grid(result)]
        if len(result.verdicts) > 2 * len(result.sharing):
            grids.append(beats_grid(result))
        if result.sharing:
            grids.append(space_grid(result))
        for grid in grids:
            print_grid(grid, wide=wide)
        shown = result.whitening[0] + (f"; and {len(result.whitening) - 1} more" if len(result.whitening) > 1 else "")
        notes = [f"whitening: {shown}"]
    for note in notes:
        console.print(lit(f"note: {note}", "dim"))  # wrapped between words at the terminal's width, as every line
    if not full:
        console.print(lit(FULL_HINT, "dim"))
    if result.saved is not None:
        console.print(lit(saved_share_line(result.saved)))
    console.print(lit(share_summary(result), "bold"))


def saved_share_line(saved: Saved) -> str:
    """What share's ``--save`` wrote: the method and ratio, the format, every file's size and the dense size.

    Example:
        >>> from geodrift.compress.saved import SHARED
        >>> saved_share_line(Saved("small", SHARED, "m", {"model.safetensors": 2_500_000}, ratio=0.3,
        ...                        format="factored", dtype="float32", dense_bytes=5_000_000))
        'saved small: m at 30%, factored float32 (model.safetensors 2.5 MB; the dense model in float32: 5.0 MB)'
    """
    sizes = ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in saved.files.items())
    return (f"saved {saved.folder}: {saved.method} at {saved.ratio or 0:.0%}, {saved.format} {saved.dtype} ({sizes}; "
            f"the dense model in float32: {(saved.dense_bytes or 0) / 1e6:.1f} MB)")


def share_summary(result: ShareResult) -> str:
    """One line: the best method per ratio (first draw), and the verdict counts."""
    best = []
    for ratio in result.ratios:
        runs = [r for r in result.runs if r.ratio == ratio and r.draw == result.draw_ids[0]]
        top = min(runs, key=lambda r: r.nll)
        best.append(f"{ratio:.0%}: {top.method} {top.ppl:.2f}")
    held = sum(v.verdict == "holds" for v in result.verdicts)
    return (f"{result.model} ({result.weights}): dense {result.baseline_ppl:.2f}; best " + ", ".join(best)
            + f"; {held}/{len(result.verdicts)} claims hold")


# A perplexity above this many times the dense model's is drawn on the figure's top edge (a collapsed model).
OFF_SCALE = 100.0


def plot_share(result: ShareResult, path: str | Path, dpi: int = 300) -> Path:
    """Held-out perplexity against the ratio removed: one line per method (geometric mean over draws), dense dotted.

    A method whose perplexity passes :data:`OFF_SCALE` times the dense model's (a collapsed model) is drawn as
    triangles on the top edge, its largest value in its legend entry, so that it does not squash the others.
    """
    import matplotlib.pyplot as plt

    top = OFF_SCALE * result.baseline_ppl
    with style():
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.4), layout="constrained")
        x = [100 * r for r in result.ratios]
        colors = plt.get_cmap("tab20")(range(20))  # 20 distinct colours: a method never shares its control's colour
        for i, method in enumerate(result.methods):
            ys = []
            for ratio in result.ratios:
                nll = [r.nll for r in result.runs if r.method == method and r.ratio == ratio]
                ys.append(math.exp(statistics.fmean(nll)) if nll else float("nan"))
            kind = next(r.kind for r in result.runs if r.method == method)
            style_of = {"ls": {"baseline": "--", "control": ":"}.get(kind, "-"), "lw": 0.9, "color": colors[2 * i % 20 + i // 10 % 2]}
            off = [y for y in ys if y > top]
            if off:
                ax.plot(x, [min(y, top) for y in ys], marker="^", clip_on=False, **style_of,
                        label=f"{method} (off scale, up to {max(off):.1e})")
            else:
                ax.plot(x, ys, marker=".", **style_of, label=method)
        ax.axhline(result.baseline_ppl, color="0.35", ls=":", lw=0.9, label=f"dense ({result.baseline_ppl:.1f})")
        log_scale(ax)
        ax.set_xticks(x)
        if ax.get_ylim()[1] > top:
            ax.set_ylim(top=top)
        ax.set_xlabel("projection parameters removed (%)")
        ax.set_ylabel("held-out perplexity")
        ax.set_title(f"{result.model.split(' ')[0]} ({result.weights.split(',')[0]}); "
                     f"{result.eval_windows} windows, {result.calib_draws} draw{plural(result.calib_draws)}", fontsize=6.5)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=5.5)
        return save_figure(fig, path, dpi)
