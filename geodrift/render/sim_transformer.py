"""Render transformer-simulator runs: the scan table, the side-by-side with the paper and SmolLM2, plots.

The side-by-side table has one row per projection. Values are mean adjacent-layer |cos| of the
singular vector in the space the paper reports (v1 for Q, K, V, Gate, Up; u1 for O, Down), each
with its permutation-null mean (the noise floor). With several seeds the simulated column is the
mean ± std over seeds. The paper's Table 2 is a reference column only.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from rich.table import Table

from geodrift.analysis import RoleReport, ScanReport
from geodrift.atomic import write_with
from geodrift.render import console, fmt
from geodrift.render.scan import render_scan, sparkline
from geodrift.sim.record import RunRecord
from geodrift.sim.transformer_presets import PAPER_TABLE2, PAPER_TABLE2_SPACE

_VERDICT_STYLE = {"holds": "bold green", "fails": "bold red", "no prediction": "dim"}
_PREDICTED = {"v": "v (input)", "u": "u (output)", None: "neither"}


def _role(report: ScanReport, role: str) -> RoleReport | None:
    return next((r for r in report.roles if r.role == role), None)


def _value_cell(roles: list[RoleReport], space: str) -> str:
    values = [r.spaces[space].vectors[0].mean for r in roles]
    nulls = [r.spaces[space].vectors[0].null_mean for r in roles]
    spread = f"±{fmt(statistics.stdev(values))}" if len(values) > 1 else ""
    return f"{fmt(statistics.fmean(values))}{spread} [dim](null {fmt(statistics.fmean(nulls))})[/dim]"


def _verdicts(roles: list[RoleReport]) -> str:
    counts: dict[str, int] = {}
    for r in roles:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    if len(counts) == 1:
        verdict = next(iter(counts))
        return f"[{_VERDICT_STYLE.get(verdict, '')}]{verdict}[/]"
    return ", ".join(f"{v} {n}/{len(roles)}" for v, n in sorted(counts.items()))


def comparison_table(reports: list[ScanReport], paper_row: str | None, reference: ScanReport | None,
                     label: str) -> Table:
    """Simulated (all seeds) vs the paper's Table 2 row (and Llama-3.1-8B) vs SmolLM2-135M's scan."""
    table = Table(
        title=f"Per-projection continuity — {label} ({len(reports)} seed{'s' if len(reports) > 1 else ''}) "
              "beside the paper's Table 2 and SmolLM2-135M",
        caption="mean adjacent-layer |cos| (Eq. 1) in the space the paper reports (v1: Q K V Gate Up; u1: O Down); "
                "(null …) = permutation-null mean. The paper's numbers are a reference column, never an input. "
                "verdict: the theory's prediction tested on the simulated weights (z >= 3 vs the null and "
                "above the other space; for V: neither space continuous).",
        caption_justify="left",
    )
    for name in ("Proj", "predicted", "space", "simulated", "other space (sim)",
                 f"paper {paper_row or '(no such run)'}", "paper Llama-3.1-8B", "SmolLM2-135M", "verdict (sim)",
                 "verdict (SmolLM2)"):
        table.add_column(name, justify="right" if name not in ("Proj", "predicted", "space") else "left")
    for role in PAPER_TABLE2_SPACE:
        sim = [r for r in (_role(rep, role) for rep in reports) if r is not None]
        if not sim:
            continue
        space = PAPER_TABLE2_SPACE[role]
        other = "u" if space == "v" else "v"
        paper = PAPER_TABLE2.get(paper_row, {}).get(role) if paper_row else None
        ref = _role(reference, role) if reference is not None else None
        table.add_row(
            sim[0].label, _PREDICTED[sim[0].predicted_space], f"{space}1", _value_cell(sim, space),
            _value_cell(sim, other), fmt(paper) if paper is not None else "—",
            fmt(PAPER_TABLE2["Llama-3.1-8B"][role]),
            _value_cell([ref], space) if ref is not None else "—", _verdicts(sim),
            _verdicts([ref]) if ref is not None else "—",
        )
    return table


def training_table(records: list[RunRecord]) -> Table:
    """Weight continuity in the paper's space over training (sparkline over tracked steps, first seed),
    the gradient's at the first backward pass, and the final value (mean over seeds)."""
    table = Table(title="Over training: weight (W) continuity in the reported space; gradient (G) at step 0")
    for name in ("Proj", "space", "W over training", "W step 0", "W final", "G step 0", "G final"):
        table.add_column(name, justify="left" if name in ("Proj", "space", "W over training") else "right")
    for role, space in PAPER_TABLE2_SPACE.items():
        series = records[0].select("W", f"cont:{role}", space, 1)
        if not series:
            continue

        def mean_at(source: str, step: int | None, role: str = role, space: str = space) -> str:
            vals = [r.value(source, f"cont:{role}", space, 1, step=step) for r in records]
            return fmt(statistics.fmean(vals))

        from geodrift.weights import ROLE_LABELS

        table.add_row(ROLE_LABELS[role], f"{space}1", sparkline([v for _, v in series]), mean_at("W", 0),
                      mean_at("W", None), mean_at("G", 0), mean_at("G", None))
    return table


def render_transformer(reports: list[ScanReport], records: list[RunRecord], paper_row: str | None,
                       reference: ScanReport | None, label: str, detail: bool = False) -> None:
    """Print the first seed's scan table, the side-by-side table, the training table and perplexity."""
    render_scan(reports[0], detail=detail)
    console.print(comparison_table(reports, paper_row, reference, label))
    console.print(training_table(records))
    for rec in records:
        ppl, bpb = rec.value("eval", "ppl"), rec.value("eval", "bits_per_byte")
        console.print(f"seed {rec.seed}: held-out perplexity {fmt(ppl, 2)} per token, {fmt(bpb, 3)} bits/byte "
                      f"({rec.data}); train {rec.timing.get('train_seconds', float('nan')):.0f} s, "
                      f"{rec.timing.get('tokens_per_second', float('nan')):.0f} tokens/s; status {rec.status}")
    if paper_row and "ppl" in PAPER_TABLE2.get(paper_row, {}):
        console.print(f"[dim]paper {paper_row}: perplexity {PAPER_TABLE2[paper_row]['ppl']} (GPT-2 tokens on "
                      "WikiText-103 - not comparable with a different tokenizer and corpus)[/dim]")


def write_training_plot(records: list[RunRecord], path: str | Path) -> None:
    """PNG: per projection, weight v1 and u1 continuity vs step for every seed, the null level dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = list(PAPER_TABLE2_SPACE)
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.4), squeeze=False, sharey=True)
    for ax, role in zip(axes.flat, roles, strict=False):
        for space, color in (("v", "tab:blue"), ("u", "tab:orange")):
            for i, rec in enumerate(records):
                pts = rec.select("W", f"cont:{role}", space, 1)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, alpha=0.9 if i == 0 else 0.5,
                        label=f"W {space}1" if i == 0 else None)
        ax.set_title(f"{role} (paper: {PAPER_TABLE2_SPACE[role]}1)")
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    axes.flat[-1].axis("off")
    axes.flat[0].set_ylabel("adjacent-layer |cos|")
    fig.suptitle(f"{records[0].label}: continuity over training")
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)


def write_comparison_plot(reports: list[ScanReport], paper_row: str | None, reference: ScanReport | None,
                          path: str | Path) -> None:
    """PNG: grouped bars per projection - simulated (mean over seeds, null level as a tick), paper, SmolLM2."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = [r for r in PAPER_TABLE2_SPACE if _role(reports[0], r) is not None]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.2
    for i, role in enumerate(roles):
        space = PAPER_TABLE2_SPACE[role]
        sims = [_role(rep, role) for rep in reports]
        vals = [s.spaces[space].vectors[0].mean for s in sims if s is not None]
        null = statistics.fmean(s.spaces[space].vectors[0].null_mean for s in sims if s is not None)
        ax.bar(i - width, statistics.fmean(vals), width, color="tab:blue", label="simulated" if i == 0 else None)
        ax.hlines(null, i - 1.5 * width, i - 0.5 * width, color="k", lw=1, label="null" if i == 0 else "_")
        if paper_row and role in PAPER_TABLE2.get(paper_row, {}):
            ax.bar(i, PAPER_TABLE2[paper_row][role], width, color="tab:gray", label=f"paper {paper_row}" if i == 0 else None)
        ref = _role(reference, role) if reference is not None else None
        if ref is not None:
            ax.bar(i + width, ref.spaces[space].vectors[0].mean, width, color="tab:green",
                   label="SmolLM2-135M" if i == 0 else None)
    ax.set_xticks(range(len(roles)), [f"{_role(reports[0], r).label} {PAPER_TABLE2_SPACE[r]}1" for r in roles])  # type: ignore[union-attr]
    ax.set_ylabel("mean adjacent |cos|")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
