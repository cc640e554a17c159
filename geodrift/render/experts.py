"""Render a mixture of experts' continuity in the terminal: experts across depth, and within a layer.

The router and the shared expert are rows of the main scan table (``geodrift.render.scan``); this
module prints what has one row per expert or per layer:

- **experts across depth**: one row per expert family (Gate, Up, Down) summarising its experts,
  then (``--full``, up to 16 experts unless ``--wide``) one row per expert and family, each cell
  ``mean |cos| (null mean) z`` of v1 and u1;
- **experts within a layer**: one row per family and space, the mean over layers of the experts'
  adjacent ``|cos|`` with its null, and the per-layer profile; "no prediction" (the theory is
  about depth; ``geodrift.scanner.experts``).

Every similarity is printed beside its permutation-null mean; the random floor ``sqrt(2/(pi d))``
heads each column (it depends only on the width ``d``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from geodrift.continuity import Report, RoleReport, VectorContinuity
from geodrift.render import console, fmt, fmt_z, lit, sparkline
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.weights import EXPERT_ROLES, ROLE_LABELS, split_across_experts_role, split_expert_role

_VERDICT_STYLE = {"holds": "bold green", "fails": "bold red"}
# Above this many experts per family the per-expert rows are left to --wide, --json and --csv.
EXPERT_ROWS_MAX = 16


def without_experts(report: Report) -> Report:
    """``report`` with the per-expert roles left out (what the main table and figure show)."""
    return replace(report, roles=[r for r in report.roles if split_expert_role(r.role) is None])


def experts_by_family(report: Report) -> dict[str, list[RoleReport]]:
    """Per-expert roles across depth, grouped by family (``expert_gate`` ...), experts in index order."""
    out: dict[str, list[RoleReport]] = {}
    for r in report.roles:
        split = split_expert_role(r.role)
        if split is not None:
            out.setdefault(split[0], []).append(r)
    return out


def _stat(vc: VectorContinuity) -> str:
    z = fmt_z(vc.z)
    return f"{fmt(vc.mean)} [dim]({fmt(vc.null_mean)})[/dim] z={z}"


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def family_grid(report: Report) -> Grid:
    """One row per expert family: its experts' mean v1/u1 continuity across depth with nulls and the verdict count."""
    grid = Grid("Experts across depth: each expert's layer l vs l+1, mean over experts",
                [Col("Proj", "left", style="bold"), Col("experts"), Col("v1 (input)"), Col("u1 (output)"),
                 Col("verdicts", "left")],
                caption=("v1/u1: mean over experts of each expert's mean |cos| of adjacent layers (Eq. 1), its "
                         f"permutation-null mean in brackets ({report.null_draws} draws, seed {report.seed}), the "
                         "random floor sqrt(2/(πd)) below; z: its range over experts in the predicted space. "
                         "Predicted as for a dense MLP (Gate, Up: v1; Down: u1), judged per expert as in the main "
                         "table."))
    for family, roles in experts_by_family(report).items():
        pred = roles[0].predicted_space or "v"
        cells = []
        for space in ("v", "u"):
            vcs = [r.spaces[space].vectors[0] for r in roles]
            cells.append(f"{fmt(_mean([v.mean for v in vcs]))} [dim]({fmt(_mean([v.null_mean for v in vcs]))})\n"
                         f"random {fmt(vcs[0].baseline)}[/dim]")
        held, judged = _count(roles)
        style = "bold green" if judged and held == judged else "bold red" if judged else "dim"
        grid.add(ROLE_LABELS[family], f"{len(roles)}\n{roles[0].shape[0]}×{roles[0].shape[1]}", *cells,
                 f"[{style}]{held}/{judged} hold[/]\n[dim]pred. {pred}1, z {_z_range([r.spaces[pred].vectors[0] for r in roles])}[/dim]")
    return grid


def expert_grid(report: Report) -> Grid:
    """One row per expert and family: v1 and u1 continuity across depth, each with its null, and the verdict."""
    grid = Grid("Each expert across depth: mean |cos| of layers l, l+1 (null mean) z",
                [Col("expert", "left", style="bold"), Col("Proj", "left"), Col("v1 (input)"), Col("u1 (output)"),
                 Col("verdict", "left")], keys=2,
                caption="random floor sqrt(2/(πd)) as in the table above (the same for every expert of a family)")
    families = experts_by_family(report)
    rows = sorted((split_expert_role(r.role)[1], list(families).index(f), r)  # type: ignore[index]
                  for f, roles in families.items() for r in roles)
    for i, (expert, _, r) in enumerate(rows):
        last = i + 1 == len(rows) or rows[i + 1][0] != expert
        grid.add(f"e{expert}", ROLE_LABELS[split_expert_role(r.role)[0]],  # type: ignore[index]
                 _stat(r.spaces["v"].vectors[0]), _stat(r.spaces["u"].vectors[0]),
                 f"[{_VERDICT_STYLE.get(r.verdict, 'dim')}]{r.verdict}[/]", end_section=last)
    return grid


def within_layer_grid(report: Report) -> Grid:
    """The experts of each layer compared with each other: per family and space, mean over layers with nulls."""
    grid = Grid("Experts within a layer: expert e vs e+1 of one layer - no prediction",
                [Col("Proj", "left", style="bold"), Col("space", "left"), Col("mean |cos| (null ± sd)"),
                 Col("random"), Col("z range"), Col("per layer", "left")], keys=2,
                caption=("mean over layers of the mean |cos| between experts adjacent in index order (Eq. 1 with "
                         "experts in place of layers) and its permutation null; the index order is arbitrary, so "
                         "these are n_experts - 1 pairs of a random chain. The theory predicts nothing here (no "
                         "verdict): it is about depth, and experts sit side by side."))
    by_family: dict[str, list[RoleReport]] = {}
    for r in report.across_experts:
        split = split_across_experts_role(r.role)
        if split is not None:
            by_family.setdefault(split[0], []).append(r)
    for family in (f for f in EXPERT_ROLES if f in by_family):
        roles = by_family[family]
        for space in ("v", "u"):
            vcs = [r.spaces[space].vectors[0] for r in roles]
            grid.add(ROLE_LABELS[family], f"{space}1",
                     f"{fmt(_mean([v.mean for v in vcs]))} [dim]({fmt(_mean([v.null_mean for v in vcs]))}"
                     f" ± {fmt(_mean([v.null_std for v in vcs]))})[/dim]",
                     fmt(vcs[0].baseline), _z_range(vcs), sparkline([v.mean for v in vcs]))
    return grid


def _count(roles: list[RoleReport]) -> tuple[int, int]:
    return sum(r.verdict == "holds" for r in roles), sum(r.verdict in ("holds", "fails") for r in roles)


def _z_range(vcs: list[VectorContinuity]) -> str:
    zs = [v.z for v in vcs if math.isfinite(v.z)]
    return f"{fmt_z(min(zs))}..{fmt_z(max(zs))}" if zs else "—"


def experts_summary_line(report: Report) -> str | None:
    """One line: how many per-expert predictions hold, per family, e.g. ``experts: 22/24 hold (Gate 8/8, ...)``."""
    families = experts_by_family(report)
    if not families:
        return None
    parts, held_all, judged_all = [], 0, 0
    for family, roles in families.items():
        held, judged = _count(roles)
        held_all, judged_all = held_all + held, judged_all + judged
        parts.append(f"{ROLE_LABELS[family]} {held}/{judged}")
    return f"experts across depth: {held_all}/{judged_all} predictions hold ({', '.join(parts)})"


def render_experts(report: Report, detail: bool = True, wide: bool = False) -> None:
    """Print the experts' tables (nothing for a model without experts) and their summary line."""
    families = experts_by_family(report)
    if not families and not report.across_experts:
        return
    if families:
        print_grid(family_grid(report), wide=wide)
        count = max(len(roles) for roles in families.values())
        if detail and (count <= EXPERT_ROWS_MAX or wide):
            print_grid(expert_grid(report), wide=wide)
        elif detail:
            console.print(f"[dim]{count} experts per family: one row per expert with --wide, or in --json / --csv[/dim]")
        criterion = next(r.criterion for roles in families.values() for r in roles)
        console.print(f"[dim]experts: criterion as for the dense MLP, e.g. Gate: {criterion}[/dim]")
    if report.across_experts:
        print_grid(within_layer_grid(report), wide=wide)
    line = experts_summary_line(report)
    if line:
        console.print(lit(line, "bold"))
