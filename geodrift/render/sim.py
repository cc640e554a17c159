"""Render a simulator Reproduction (both simulators): geodrift vs paper, verdicts, training, notes.

Every similarity is shown beside its noise floor: the comparison table's caption gives the Eq. 1
random floor and layer-mean noise, the transformer's tables give each value's permutation-null
mean, and the verdict table prints each criterion.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from rich.text import Text

from geodrift.continuity import Report, RoleReport, Stat
from geodrift.render import console, fmt, lit, plural
from geodrift.render.layout import Col, Grid, print_grid
from geodrift.render.scan import render_scan, sparkline
from geodrift.render.verdicts import VERDICT_STYLE, found_words, verdict_grid
from geodrift.sim.reference import PAPER_TABLE2, PAPER_TABLE2_SPACE
from geodrift.sim.reproduce import COLUMN_TITLES, Reproduction
from geodrift.weights import ROLE_LABELS


def _cell(stat: Stat | None, paper: float | str | None, col: str) -> str:
    digits = 1 if col == "rotation_deg" else (2 if col in ("rel_change", "ppl") else 3)
    if stat is None or stat.n == 0:
        ours = "—"
    else:
        ours = fmt(stat.mean, digits) + (f"±{fmt(stat.std, digits)}" if stat.std == stat.std else "")
    if paper is None:
        return ours
    ref = paper if isinstance(paper, str) else f"{paper:.3f}"
    return f"{ours}\n[dim]paper {ref}[/dim]"


def _title(rep: Reproduction) -> str:
    n = len(rep.seeds)  # the command: in the summary line
    return f"geodrift (mean ± std over {n} seed{plural(n)}, {track_view(rep)} view) vs the paper"


def track_view(rep: Reproduction) -> str:
    """The view the runs were tracked in (``raw``, or ``canonical``: ``simulate transformer --view canonical``)."""
    views = sorted({spec.track.view for spec in rep.specs}) or ["raw"]
    return "/".join(views)


def _caption(rep: Reproduction) -> str:
    return (f"Eq. 1 floor: random {rep.floor:.3f}, layer-mean sd {rep.noise:.4f} "
            f"(coherent > {rep.floor + 5 * rep.noise:.3f}); permutation nulls per value are in the records")


def comparison_grid(rep: Reproduction) -> Grid:
    """One row per configuration; each cell: geodrift mean ± std over seeds, the paper's value below."""
    grid = Grid(_title(rep), [Col("configuration", "left", style="bold")]
                + [Col(COLUMN_TITLES.get(c, c)) for c in rep.columns], caption=_caption(rep), lines=True)
    for spec in rep.specs:
        stats, paper = rep.stats.get(spec.label, {}), rep.paper.get(spec.label, {})
        grid.add(lit(spec.label), *(_cell(stats.get(c), paper.get(c), c) for c in rep.columns))
    return grid


def _with_null(values: list[float], nulls: list[float]) -> str:
    values = [v for v in values if v == v]
    nulls = [v for v in nulls if v == v]
    if not values:
        return "—"
    spread = f"±{fmt(statistics.stdev(values))}" if len(values) > 1 else ""
    null = f" [dim](null {fmt(statistics.fmean(nulls))})[/dim]" if nulls else ""
    return f"{fmt(statistics.fmean(values))}{spread}{null}"


def training_grid(rep: Reproduction) -> Grid:
    """Transformer: each projection's continuity over training in the paper's space, with its null."""
    records = [r.record for r in rep.results if r.record.label == rep.specs[0].label]
    grid = Grid(f"Over training ({rep.specs[0].label}): weight (W) and gradient (G) continuity in the space the "
                "paper reports, mean over seeds (permutation-null mean in brackets)",
                [Col("Proj", "left", style="bold"), Col("space", "left"), Col("W over training", "left"),
                 Col("W step 0"), Col("W final"), Col("G step 0"), Col("G final")], keys=2)
    for role, space in PAPER_TABLE2_SPACE.items():
        series = records[0].select("W", role, "cont", space, 1)
        if not series:
            continue

        def at(source: str, step: int | None, role: str = role, space: str = space) -> str:
            return _with_null([r.value(source, role, "cont", space, 1, step=step) for r in records],
                              [r.value(source, role, "null_mean", space, 1, step=step) for r in records])

        grid.add(ROLE_LABELS[role], f"{space}1", sparkline([v for _, v in series]), at("W", 0), at("W", None),
                 at("G", 0), at("G", None))
    return grid


def reference_grid(rep: Reproduction, reference: Report) -> Grid:
    """Transformer: the final weights beside the paper's Llama-3.1-8B and the embedded SmolLM2-135M scan."""
    grid = Grid("Final weights beside pretrained models (each value with its permutation-null mean)",
                [Col("Proj", "left", style="bold"), Col("space", "left"), Col("simulated"), Col("paper Llama-3.1-8B"),
                 Col("SmolLM2-135M"), Col("verdicts (SmolLM2)")], keys=2)
    results = [r for r in rep.results if r.record.label == rep.specs[0].label]
    for role, space in PAPER_TABLE2_SPACE.items():
        sims = [rr for rr in (r.report.role(role) for r in results) if rr is not None]
        ref = reference.role(role)
        if not sims:
            continue
        sim_cell = _with_null([s.spaces[space].vectors[0].mean for s in sims],
                              [s.spaces[space].vectors[0].null_mean for s in sims])
        ref_cell = _with_null([ref.spaces[space].vectors[0].mean], [ref.spaces[space].vectors[0].null_mean]) \
            if ref is not None else "—"
        grid.add(ROLE_LABELS[role], f"{space}1", sim_cell, fmt(PAPER_TABLE2["Llama-3.1-8B"][role]), ref_cell,
                 _found(ref) if ref is not None else "—")
    return grid


def _found(role: RoleReport) -> Text:
    # Two lines, frame and path, in words a reader cannot misread (V: "none" = none found, as predicted).
    frame, path = found_words(role)
    return Text("\n").join([lit(f"frame {frame}"), lit(f"path {path}")])


def reference_line(reference: Report) -> str:
    """The pretrained reference in one sentence (the brief output; ``--full`` has its table with verdicts): each
    projection's Eq. 1 in the space the paper reports, its permutation-null mean in brackets.

    Example:
        >>> from geodrift.continuity import Report
        >>> print(reference_line(Report("SmolLM2", "raw", 8, 20, 0, [])))
        SmolLM2, the pretrained reference (Eq. 1 in the paper's space, null mean in brackets): —
    """
    cells = [f"{ROLE_LABELS[role]} {space}1 {fmt(r.spaces[space].vectors[0].mean)} "
             f"({fmt(r.spaces[space].vectors[0].null_mean)})"
             for role, space in PAPER_TABLE2_SPACE.items() if (r := reference.role(role)) is not None]
    return (f"{reference.origin}, the pretrained reference (Eq. 1 in the paper's space, null mean in brackets): "
            + (", ".join(cells) or "—"))


def summary_line(rep: Reproduction) -> str:
    """One line: how many claims hold, for which preset, seeds and steps."""
    judged = [v for v in rep.verdicts if v.verdict in ("holds", "fails")]
    held = sum(v.verdict == "holds" for v in judged)
    counts = sorted({s.train.steps for s in rep.specs}) or [0]
    steps = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    configs, seeds = len(rep.specs), len(rep.seeds)
    what = f"geodrift simulate {rep.sim} --preset {rep.preset}: {configs} configuration{plural(configs)} × " \
           f"{seeds} seed{plural(seeds)} × {steps} steps, {track_view(rep)} view"
    if not judged:
        return f"{what}; this preset judges no claims"
    failed = [v.claim for v in judged if v.verdict == "fails"]
    tail = f" (fails: {'; '.join(failed)})" if failed else ""
    return f"{held}/{len(judged)} claims hold — {what}{tail}"


EQ1 = " (Eq. 1, the paper's claim)"
SEEDS = "on every seed: "


def brief_claims_grid(rep: Reproduction) -> Grid:
    """The claims, one short row each: number, claim, verdict (criteria follow once, :func:`criteria_lines`);
    with one configuration its label is said once, in the title."""
    labels = {spec.label for spec in rep.specs}
    one = next(iter(labels)) if len(labels) == 1 else None
    every = " on every seed" if all(v.criterion.startswith(SEEDS) for v in rep.verdicts) else ""
    grid = Grid(f"Claims{f' ({one})' if one else ''}{every}; frame claims are Eq. 1's (the paper's)",
                [Col("#"), Col("claim", "left", prose=True), Col("verdict", "center")])
    for i, v in enumerate(rep.verdicts, 1):
        claim = v.claim.removeprefix(f"{one}: ") if one else v.claim
        grid.add(str(i), lit(claim.replace(EQ1, "")), VERDICT_STYLE.get(v.verdict, lit(v.verdict)))
    return grid


def criteria_lines(rep: Reproduction) -> list[str]:
    """Each distinct criterion once, with the numbers of the claims it judged (the brief output's claims table).

    Example:
        >>> from types import SimpleNamespace as S
        >>> from geodrift.continuity.verdicts import Verdict
        >>> criteria_lines(S(verdicts=[Verdict("a", "z >= 3", "", "holds"), Verdict("b", "z >= 3", "", "fails")]))
        ['criterion of claims 1, 2: z >= 3']
    """
    by_text: dict[str, list[str]] = {}
    for i, v in enumerate(rep.verdicts, 1):
        by_text.setdefault(v.criterion, []).append(str(i))
    return [f"criterion of claim{'s' * (len(n) > 1)} {', '.join(n)}: {text}" for text, n in by_text.items()]


def _unseeded(rep: Reproduction) -> Reproduction | Any:
    # The criteria with "on every seed: " said once (in the line before them), not on every criterion.
    if not all(v.criterion.startswith(SEEDS) for v in rep.verdicts):
        return rep
    return SimpleNamespace(verdicts=[replace(v, criterion=v.criterion.removeprefix(SEEDS)) for v in rep.verdicts])


FULL_HINT = "--full: scan tables, training, the reference's table, each claim's measurement"


def reproduction_document(rep: Reproduction, reference: Report | None = None) -> dict[str, Any]:
    """The ``--json`` document of a simulation or a sweep (``smollm2``: the transformer's reference scan)."""
    from geodrift.io.atomic import document

    payload = rep.to_dict()
    if reference is not None:
        payload["smollm2"] = reference.to_dict()
    return document("reproduction", payload)


def render_reproduction(rep: Reproduction, reference: Report | None = None, detail: bool = False,
                        wide: bool = False) -> None:
    """Print the simulator's result: brief by default (the comparison with the paper, the claims with each
    criterion once, notes, summary: within 80 lines at 80 columns for the presets' single configuration);
    ``detail`` (the CLI's ``--full``) adds, for per-projection simulators (the transformer), the first run's
    scan tables, training and the pretrained reference, and prints each claim with its measurement."""
    per_projection = rep.simulator.per_projection and bool(rep.results)
    if per_projection and detail:
        render_scan(rep.results[0].report, full=True, wide=wide, summary=False)
    print_grid(comparison_grid(rep), wide=wide)
    if per_projection and detail:
        print_grid(training_grid(rep), wide=wide)
        if reference is not None:
            print_grid(reference_grid(rep, reference), wide=wide)
    elif per_projection and reference is not None:
        console.print(lit(reference_line(reference), "dim"))
    if rep.verdicts and detail:
        what = ("" if per_projection else "; v1/u1 continuity is Eq. 1, a frame shared across layers (the depth path "
                "is judged per projection, in the transformer only)")
        print_grid(verdict_grid(rep.verdicts, "Claims (criteria from the noise floors and seed spread, not from the "
                                f"paper's values{what})"), wide=wide)
    elif rep.verdicts:
        print_grid(brief_claims_grid(rep), wide=wide)
        for line in criteria_lines(_unseeded(rep)):  # "on every seed" is in the claims' title
            console.print(lit(line, "dim"))
    for note in rep.notes:
        console.print(lit(f"• {note}", "dim"))
    walls = [r.timing.get("wall_s", 0.0) / max(1.0, r.timing.get("members", 1.0)) for r in rep.records]
    if walls:
        console.print(f"[dim]• {len(rep.records)} run{plural(len(rep.records))}, {sum(walls):.1f} s of training wall "
                      "time in total[/dim]")
    for r in rep.results:
        if r.path is not None:
            console.print(lit(f"• run record: {r.path / 'run.json'}", "dim"))
    if not detail and (per_projection or rep.verdicts):
        console.print(lit(FULL_HINT, "dim"))
    console.print(lit(summary_line(rep), "bold"))  # wrapped between words at the terminal's width
