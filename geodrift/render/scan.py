"""Render a Report: the per-projection table (rich), CSV, and the continuity-vs-depth plot."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from rich.table import Table

from geodrift.atomic import write_text, write_with
from geodrift.continuity import Report, RoleReport, VectorContinuity
from geodrift.render import console, fmt

_SPARK = "▁▂▃▄▅▆▇█"
_VERDICT_STYLE = {"holds": "bold green", "fails": "bold red", "no prediction": "dim"}


def sparkline(values: list[float]) -> str:
    """Unicode sparkline of values in [0, 1] (one character per adjacent-layer pair)."""
    return "".join(_SPARK[min(len(_SPARK) - 1, max(0, int(v * len(_SPARK))))] for v in values)


def _cell(vc: VectorContinuity) -> str:
    # Line 1: mean |cos| and z; line 2: median; line 3-4: the two floors.
    return (f"[bold]{fmt(vc.mean)}[/bold] z={vc.z:.0f}\n[dim]median {fmt(vc.median)}\n"
            f"null {fmt(vc.null_mean)}±{fmt(vc.null_std)}\nrandom {fmt(vc.baseline)}[/dim]")


def _predicted(role: RoleReport) -> str:
    if role.verdict == "no prediction":
        return "—"
    return {"v": "v (input)", "u": "u (output)", None: "neither"}[role.predicted_space]


def scan_table(report: Report, title: str | None = None) -> Table:
    """The main table: one row per projection, v1 and u1 continuity with both floors and the verdict."""
    table = Table(
        title=title or f"Geometric continuity — {report.origin} ({report.view} weights)",
        caption=(
            "v1/u1: mean |cos| of adjacent layers (Eq. 1), z against the permutation null "
            f"({report.null_draws} draws, seed {report.seed}); random = sqrt(2/(πd)). "
            "σ²-WA: Eq. 2 (from the top-k: lower ≤ upper bound; exact with --full-spectrum), null mean in brackets."
        ),
        caption_justify="left", show_lines=True,
    )
    table.add_column("Proj", style="bold")
    table.add_column("shape · L")
    table.add_column("predicted")
    table.add_column("v1 (input)", justify="right")
    table.add_column("u1 (output)", justify="right")
    table.add_column("σ²-WA v", justify="right")
    table.add_column("σ²-WA u", justify="right")
    table.add_column("verdict")
    for r in report.roles:
        v1, u1 = r.spaces["v"].vectors[0], r.spaces["u"].vectors[0]
        table.add_row(
            r.label, f"{r.shape[0]}×{r.shape[1]}\n{len(r.layers)} layers", _predicted(r),
            _cell(v1), _cell(u1), _wa(r, "v"), _wa(r, "u"),
            f"[{_VERDICT_STYLE.get(r.verdict, '')}]{r.verdict}[/]",
        )
    return table


def _wa(r: RoleReport, space: str) -> str:
    s = r.spaces[space]
    bound = "" if s.sigma2_wa_upper - s.sigma2_wa < 5e-4 else f"\n≤ {fmt(s.sigma2_wa_upper)}"
    return f"{fmt(s.sigma2_wa)}{bound}\n[dim]({fmt(s.sigma2_null_mean)})[/dim]"


def profile_table(report: Report) -> Table:
    """Per-pair |cos| of v1 and u1 across depth as sparklines (one character per adjacent pair)."""
    table = Table(title="Depth profile: |cos(layer l, l+1)| per adjacent pair (▁ = 0, █ = 1)")
    table.add_column("Proj", style="bold")
    table.add_column("v1")
    table.add_column("u1")
    for r in report.roles:
        table.add_row(r.label, sparkline(r.spaces["v"].vectors[0].per_pair),
                      sparkline(r.spaces["u"].vectors[0].per_pair))
    return table


def k_table(report: Report) -> Table:
    """Continuity of v_k and u_k for k = 1..K, each with its permutation-null mean."""
    k = max((r.k for r in report.roles), default=1)
    table = Table(title="Continuity by singular-vector index k (mean |cos|, null mean in brackets)")
    table.add_column("Proj", style="bold")
    table.add_column("space")
    for j in range(1, k + 1):
        table.add_column(f"k={j}", justify="right")
    table.add_column("top-k subspace (random)", justify="right")
    for r in report.roles:
        for s in r.spaces.values():
            cells = [f"{fmt(vc.mean)} [dim]({fmt(vc.null_mean)})[/dim]" for vc in s.vectors]
            cells += [""] * (k - len(cells))
            table.add_row(r.label, s.space, *cells,
                          f"{fmt(s.subspace_overlap)} [dim]({fmt(s.subspace_baseline)})[/dim]")
    return table


def render_scan(report: Report, detail: bool = True) -> None:
    """Print the scan report to the terminal."""
    console.print(scan_table(report))
    console.print(profile_table(report))
    if detail:
        console.print(k_table(report))
    for r in report.roles:
        if r.verdict != "no prediction":
            console.print(f"[dim]{r.label}: {r.verdict} — criterion: {r.criterion}[/dim]")
    for note in report.notes:
        console.print(f"[yellow]note:[/yellow] {note}")


def write_csv(report: Report, path: str | Path) -> None:
    """Write the flat rows (role × space × k) as CSV, atomically."""
    rows = report.rows()
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["role"])
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buffer.getvalue())


def write_plot(report: Report, path: str | Path) -> None:
    """PNG: adjacent-layer |cos| of v1 and u1 vs depth, one panel per projection, floors dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(report.roles)
    cols = min(4, max(1, n))
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for ax, r in zip(axes.flat, report.roles, strict=False):
        pairs = [f"{a}" for a in r.layers[:-1]]
        x = list(range(len(pairs)))
        for space, color in (("v", "tab:blue"), ("u", "tab:orange")):
            vc = r.spaces[space].vectors[0]
            ax.plot(x, vc.per_pair, marker=".", color=color, label=f"{space}1 (mean {vc.mean:.2f})")
            ax.axhline(vc.null_mean + 3 * vc.null_std, color=color, ls="--", lw=0.8)
        ax.set_title(f"{r.label} — predicted: {r.predicted_space or 'neither'} ({r.verdict})", fontsize=9)
        ax.set_xlabel("layer l (pair l, l+1)")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7, loc="upper right")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes[0][0].set_ylabel("|cos| adjacent layers")
    fig.suptitle(f"{report.origin} ({report.view}); dashed: permutation null + 3 std", fontsize=10)
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
