"""The ``compress share`` experiment: every method at equal parameters, per calibration draw, and its verdicts.

For each calibration draw: one calibration pass (the projections' input moments,
:mod:`~geodrift.compress.calibrate`), Block Influence and the greedy removal order on that draw,
then every method of :mod:`~geodrift.compress.methods` at every ratio, each evaluated on the same
held-out windows. Then, on the first draw, each projection's sharing evidence at both budgets
(:mod:`~geodrift.compress.penalty`, no forward pass).

The question's verdict, per ratio (its criterion is :data:`BEATS`): geodrift's continuity-guided
method against the best baseline of each draw (the lowest held-out NLL among the methods of kind
``baseline`` in :data:`~geodrift.compress.table.METHODS`) and against its own random-grouping
control. Attribution controls are reported as paired differences beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from geodrift.compress import rank
from geodrift.compress.calibrate import cached_moments, check_calibration
from geodrift.compress.evaluate import heldout_nll, paired
from geodrift.compress.factorized import Compressed, applied
from geodrift.compress.merge import merge_targets
from geodrift.compress.methods import Compressor
from geodrift.compress.model import Setup, layer_states, nll_from_hidden, perplexity_of, spread
from geodrift.compress.penalty import ProjectionSharing, sharing_evidence
from geodrift.compress.saved import Saved, saved_dict
from geodrift.compress.table import (
    AGAINST_BEST,
    BASELINE,
    BLOCK_INFLUENCE,
    CANDIDATE,
    CONTROL_OF,
    GREEDY,
    GROUPING_CONTROL,
    METHODS,
)
from geodrift.continuity.verdicts import Verdict
from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM

MARGIN = 0.10  # nats/token: the bar for "beats the best baseline"
BEATS = (f"in every calibration draw, geodrift's held-out NLL is below the best baseline's by more than {MARGIN} "
         "nats/token and by more than 2 paired standard errors over the windows, and below its own random-grouping "
         "control's by more than 2 paired standard errors (holds); the best baseline is ahead by more than 2 SE in "
         "every draw (fails); otherwise tie")


@dataclass(frozen=True)
class ShareSpec:
    """What to run.

    Attributes:
        ratios: fractions of the projection parameters removed.
        methods: a subset of :data:`~geodrift.compress.table.METHODS`.
        group_size: layers per shared basis.
        calib_draws: calibration draws (each a disjoint block of calibration windows).
        first_draw: index of the first draw (draws ``first_draw .. first_draw + calib_draws - 1``).
        greedy_windows: calibration windows that score the greedy search's candidates.
        select_windows: calibration windows that settle geodrift's space per projection (0: the whitened loss alone).
        verdict_ratio: ratio of the per-projection sharing evidence (None: skip it).
    """

    ratios: tuple[float, ...] = (0.2, 0.3, 0.4)
    methods: tuple[str, ...] = tuple(METHODS)
    group_size: int = 2
    calib_draws: int = 1
    first_draw: int = 0
    greedy_windows: int = 2
    select_windows: int = 4
    verdict_ratio: float | None = 0.3

    def check(self, n_layers: int | None = None) -> None:
        """Raise GeodriftError naming the option on an invalid value."""
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise GeodriftError(f"--methods: unknown {', '.join(unknown) or '(empty)'}; choose from {', '.join(METHODS)}")
        if self.group_size < 2:
            raise GeodriftError(f"--group-size: must be at least 2 (layers sharing a basis), got {self.group_size}")
        if n_layers is not None and self.group_size > n_layers:
            raise GeodriftError(f"--group-size: {self.group_size} > the model's {n_layers} layers")
        if not self.ratios:
            raise GeodriftError("--ratios: give at least one ratio, e.g. 0.2,0.3,0.4")
        for r in (*self.ratios, *([self.verdict_ratio] if self.verdict_ratio is not None else [])):
            if not 0.0 < r < 1.0:
                raise GeodriftError(f"--ratios/--verdict-ratio: {r} is not a fraction of parameters removed in (0, 1)")
        if n_layers is not None and any(METHODS[m].order is not None for m in self.methods):
            if round(max(self.ratios) * n_layers) >= n_layers:
                raise GeodriftError(f"--ratios {max(self.ratios)}: pruning would remove every layer of {n_layers}")
        if self.calib_draws < 1:
            raise GeodriftError(f"--calib-draws: must be at least 1, got {self.calib_draws}")
        if self.first_draw < 0:
            raise GeodriftError(f"--first-draw: must be at least 0, got {self.first_draw}")
        if self.greedy_windows < 1:
            raise GeodriftError(f"--greedy-windows: must be at least 1, got {self.greedy_windows}")
        if self.select_windows < 0:
            raise GeodriftError(f"--select-windows: must be at least 0, got {self.select_windows}")

    @property
    def draw_ids(self) -> list[int]:
        """The calibration draws run."""
        return list(range(self.first_draw, self.first_draw + self.calib_draws))


@dataclass
class MethodRun:
    """One method at one ratio on one calibration draw."""

    method: str
    kind: str
    ratio: float
    draw: int
    ppl: float
    nll: float
    nll_se: float
    kept_params: int
    dense_params: int
    build_seconds: float
    eval_seconds: float
    removed: list[int]
    window_nll: list[float]
    notes: list[str] = field(default_factory=list)


@dataclass
class ShareResult:
    """Everything ``compress share`` measured (JSON: ``to_dict``; CSV: ``rows``)."""

    model: str
    weights: str
    n_layers: int
    corpus: dict[str, str]
    seq_len: int
    calib_windows: int
    eval_windows: int
    group_size: int
    ratios: list[float]
    methods: list[str]
    calib_draws: int
    draw_ids: list[int]
    baseline_ppl: float
    baseline_nll_se: float
    runs: list[MethodRun]
    comparisons: list[dict[str, Any]]
    choices: list[dict[str, Any]]
    verdict_ratio: float | None
    sharing: list[dict[str, Any]]
    verdicts: list[Verdict]
    whitening: list[str]
    orders: list[dict[str, Any]]
    seconds: dict[str, float]
    eval_seconds: float
    notes: list[str] = field(default_factory=list)
    saved: Saved | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``saved``: :meth:`geodrift.compress.saved.Saved.to_dict`, ``{}`` when nothing was saved)."""
        return {**asdict(self), "saved": saved_dict(self.saved)}

    def rows(self) -> list[dict[str, Any]]:
        """Tidy CSV rows: one per method, ratio and calibration draw."""
        return [{"model": self.model, "weights": self.weights, "draw": r.draw, "ratio": r.ratio, "method": r.method,
                 "kind": r.kind, "ppl": r.ppl, "nll": r.nll, "nll_se": r.nll_se, "kept_params": r.kept_params,
                 "dense_params": r.dense_params, "seconds": r.build_seconds + r.eval_seconds,
                 "baseline_ppl": self.baseline_ppl} for r in self.runs]

    def run(self, method: str, ratio: float, draw: int) -> MethodRun | None:
        """The run of ``method`` at ``ratio`` on ``draw`` (None when it did not run)."""
        return next((r for r in self.runs if (r.method, r.ratio, r.draw) == (method, ratio, draw)), None)


Progress = Callable[[str, int, int], None]


def _start(compressed: Compressed, n_layers: int) -> int:
    # The first layer whose computation differs from the dense model's.
    changed = list(compressed.removed) + [layer for _, layer in compressed.factors]
    if compressed.replaced:
        changed += list(merge_targets(n_layers, compressed.removed))
    return min(changed) if changed else n_layers


def _orders_needed(methods: tuple[str, ...]) -> list[str]:
    # The removal orders the methods use (each keyed by the method that owns it), in the table's order.
    used = {METHODS[m].order for m in methods}
    return [owner for owner in METHODS if owner in used]


def evaluate_sharing(setup: Setup[LlamaLM], spec: ShareSpec, draws: list[torch.Tensor] | None = None,
              progress: Progress | None = None, cache: str | None = None,
              keep: tuple[str, float] | None = None) -> tuple[ShareResult, Compressed | None]:
    """Run every method at every ratio on every calibration draw, then the sharing evidence and the verdicts.

    Args:
        setup: the loaded model and its held-out windows (``setup.calib``: the first draw).
        spec: what to run.
        draws: calibration windows per draw index (None: ``[setup.calib]``); those of ``spec.draw_ids`` are used.
        progress: ``(stage, done, total)`` callback.
        cache: folder of the calibration-moment cache (None: none).
        keep: ``(method, ratio)`` whose first-draw configuration to return (for ``--save``).

    Returns:
        ``(result, the kept configuration or None)``.

    Raises:
        GeodriftError: on an invalid spec, too few calibration tokens or too few draws.
    """
    spec.check(setup.n_layers)
    draws = draws if draws is not None else [setup.calib]
    if len(draws) <= spec.draw_ids[-1]:
        raise GeodriftError(f"--calib-draws/--first-draw: draw {spec.draw_ids[-1]} asked, only {len(draws)} cut")
    for d in spec.draw_ids:
        check_calibration(setup.model, draws[d])
    model, L = setup.model, setup.n_layers
    report = progress or (lambda stage, done, total: None)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    prefix = layer_states(model, setup.evaluation)  # (L + 1, W, T, d): the dense model's layer inputs
    base = torch.cat([nll_from_hidden(model, prefix[L, i: i + 8], setup.evaluation[i: i + 8, 1:])
                      for i in range(0, setup.evaluation.shape[0], 8)])
    eval_seconds = time.perf_counter() - start
    runs: list[MethodRun] = []
    orders: list[dict[str, Any]] = []
    whitening: set[str] = set()
    choices: list[dict[str, Any]] = []
    sharing: list[ProjectionSharing] = []
    kept: Compressed | None = None
    # One count over the whole run, so the progress ends at total/total: every method at every ratio on every draw,
    # and the sharing evidence; the calibration pass and the greedy search show their own count in the stage text.
    total = spec.calib_draws * len(spec.ratios) * len(spec.methods) + (spec.verdict_ratio is not None)
    done = 0

    def stage(label: str) -> Callable[[int, int], None]:
        return lambda i, n: report(f"{label} {i}/{n}", done, total)
    first = spec.draw_ids[0]
    for d in spec.draw_ids:
        calib = draws[d]
        start = time.perf_counter()
        moments, hit = cached_moments(model, calib, cache, stage(f"draw {d}: calibration pass"))
        seconds[f"draw {d}: calibration moments{' (cached)' if hit else ''}"] = time.perf_counter() - start
        order: dict[str, list[int]] = {}
        n_max = max(round(r * L) for r in spec.ratios)
        for owner in _orders_needed(spec.methods):
            start = time.perf_counter()
            if METHODS[owner].ranking == BLOCK_INFLUENCE:
                states = layer_states(model, calib)
                order[owner] = rank.order_from_scores([-b for b in rank.block_influence(states)])
                del states
                seconds[f"draw {d}: block influence"] = time.perf_counter() - start
            else:
                assert METHODS[owner].ranking == GREEDY
                order[owner], _ = rank.greedy_order(model, calib[: spec.greedy_windows], n_max,
                                                    progress=stage(f"draw {d}: greedy search"))
                seconds[f"draw {d}: greedy search"] = time.perf_counter() - start
        orders.append({"draw": d, **{k: v[:n_max] for k, v in order.items()}})
        comp = Compressor(model, moments, spec.group_size, order, seed=d,
                          select=calib[: spec.select_windows] if spec.select_windows else None)
        for ratio in spec.ratios:
            for method in spec.methods:
                start = time.perf_counter()
                compressed = comp.build(method, ratio)
                built = time.perf_counter() - start
                with applied(model, compressed):
                    nll = heldout_nll(model, setup.evaluation, compressed.removed, prefix, _start(compressed, L))
                evaluated = time.perf_counter() - start - built
                runs.append(MethodRun(method, METHODS[method].kind, ratio, d, perplexity_of(nll), float(nll.mean()),
                                      spread(nll), compressed.kept_params, compressed.dense_params, built, evaluated,
                                      list(compressed.removed), nll.tolist(), compressed.notes))
                if keep == (method, ratio) and d == first:
                    kept = compressed
                done += 1
                report(f"draw {d}: {method} at {ratio:.0%}", done, total)
        if d == first and any(METHODS[m].measured for m in spec.methods):
            choices = [{"ratio": ratio, **asdict(c)} for ratio in spec.ratios for c in comp.choices(ratio).values()]
        if d == first and spec.verdict_ratio is not None:
            start = time.perf_counter()
            report("sharing evidence per projection (no forward pass)", done, total)
            sharing = sharing_evidence(comp, spec.verdict_ratio)
            done += 1
            report("sharing evidence per projection (no forward pass)", done, total)
            seconds["sharing evidence (both budgets)"] = time.perf_counter() - start
        whitening |= {f"draw {d}: {w}" for w in comp.whitening()}
        seconds[f"draw {d}: building the methods"] = sum(r.build_seconds for r in runs if r.draw == d)
        seconds[f"draw {d}: held-out evaluations"] = sum(r.eval_seconds for r in runs if r.draw == d)
        del comp
    comparisons = _comparisons(runs, spec)
    verdicts = [v for ratio in spec.ratios if (v := _beats(runs, ratio, spec)) is not None]
    verdicts += [v for p in sharing for v in p.verdicts]
    notes = [f"evaluation: {setup.corpus.get('evaluation', 'held-out split')}; calibration: "
             f"{setup.corpus.get('calibration', 'training split')}",
             f"pruning removes round(ratio x {L}) layers: " + ", ".join(f"{r:.0%} -> {round(r * L)}" for r in spec.ratios)]
    notes += [f"{r.method} at {r.ratio:.0%} (draw {r.draw}): {note}" for r in runs
              if METHODS[r.method].merge and r.draw == first for note in r.notes]
    result = ShareResult(
        model=setup.label, weights=setup.weights, n_layers=L, corpus=setup.corpus,
        seq_len=setup.evaluation.shape[1] - 1, calib_windows=draws[first].shape[0],
        eval_windows=setup.evaluation.shape[0], group_size=spec.group_size, ratios=list(spec.ratios),
        methods=list(spec.methods), calib_draws=spec.calib_draws, draw_ids=spec.draw_ids,
        baseline_ppl=perplexity_of(base),
        baseline_nll_se=spread(base), runs=runs, comparisons=comparisons, choices=choices,
        verdict_ratio=spec.verdict_ratio, sharing=[asdict(p) for p in sharing], verdicts=verdicts,
        whitening=sorted(whitening) or ["every moment had a Cholesky factor"], orders=orders, seconds=seconds,
        eval_seconds=eval_seconds, notes=notes)
    return result, kept


def best_baseline(runs: list[MethodRun], ratio: float, draw: int) -> MethodRun | None:
    """The baseline with the lowest held-out NLL at ``ratio`` on ``draw`` (None when no baseline ran)."""
    cands = [r for r in runs if r.kind == BASELINE and r.ratio == ratio and r.draw == draw]
    return min(cands, key=lambda r: r.nll) if cands else None


def _comparisons(runs: list[MethodRun], spec: ShareSpec) -> list[dict[str, Any]]:
    out = []
    for d in spec.draw_ids:
        for ratio in spec.ratios:
            best = best_baseline(runs, ratio, d)
            by = {r.method: r for r in runs if r.ratio == ratio and r.draw == d}
            pairs: list[tuple[str, str, str]] = []
            if best is not None:
                pairs += [(m, best.method, "against the best baseline") for m in AGAINST_BEST if m in by]
            pairs += [(CONTROL_OF[c], c, "attribution control") for c in CONTROL_OF
                      if c in by and CONTROL_OF[c] in by and (CONTROL_OF[c], c) not in {(a, b) for a, b, _ in pairs}]
            for a, b, what in pairs:
                out.append({"draw": d, "ratio": ratio, "a": a, "b": b, "what": what,
                            **paired(by[a].window_nll, by[b].window_nll)})
    return out


def _beats(runs: list[MethodRun], ratio: float, spec: ShareSpec) -> Verdict | None:
    if CANDIDATE not in spec.methods or not any(METHODS[m].kind == BASELINE for m in spec.methods):
        return None
    parts, met, behind = [], 0, 0
    for d in spec.draw_ids:
        mine, best = next(r for r in runs if (r.method, r.ratio, r.draw) == (CANDIDATE, ratio, d)), \
            best_baseline(runs, ratio, d)
        assert best is not None
        diff = paired(mine.window_nll, best.window_nll)
        control = next((r for r in runs if (r.method, r.ratio, r.draw) == (GROUPING_CONTROL, ratio, d)), None)
        ctrl = paired(mine.window_nll, control.window_nll) if control is not None else None
        ok = diff["mean"] < -MARGIN and diff["mean"] < -2 * diff["se"] and ctrl is not None and \
            ctrl["mean"] < -2 * ctrl["se"]
        met += ok
        behind += diff["mean"] > 2 * diff["se"]
        parts.append(f"draw {d}: geodrift - {best.method} {diff['mean']:+.3f} ± {diff['se']:.3f}"
                     + (f", - random groups {ctrl['mean']:+.3f} ± {ctrl['se']:.3f}" if ctrl else ", no random-group control"))
    verdict = "holds" if met == spec.calib_draws else "fails" if behind == spec.calib_draws else "tie"
    return Verdict(f"At {ratio:.0%} of the projection parameters removed, geodrift's continuity-guided compression "
                   "beats the best baseline", BEATS, "; ".join(parts) + " (nats/token)", verdict)
