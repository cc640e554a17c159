"""``geodrift compress prune``: which layers can go? Rankings, held-out perplexity, rank correlations.

For n = 1..N removed layers, each method's removal set is evaluated on the held-out windows
(one loaded model, layers skipped by index; a set two methods share is evaluated once). The
random floor is the mean and std over ``random_seeds`` permutations. Spearman's rho (scipy)
compares each data-free score with Block Influence, the angular distance of single layers
(n = 1) and the greedy order (layers it removed ranked by step, the rest tied last).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from scipy.stats import spearmanr

from geodrift.compress import rank
from geodrift.compress.model import Setup, layer_states, perplexity_of, spread, window_nll
from geodrift.continuity import MeasureSpec
from geodrift.continuity.verdicts import Verdict
from geodrift.errors import GeodriftError

METHODS = ("geom-v1", "geom-s2wa", "block-influence", "angular", "greedy")
BEATS_RANDOM = ("mean held-out log-perplexity over n = 1..N below the random orders' mean by more than 2 of their "
                "standard deviations over seeds (holds); above by more than 2 (fails); otherwise tie")
AGREES = "Spearman rho of the per-layer removability > 0 with p < 0.05 over the model's layers (else fails)"


@dataclass(frozen=True)
class PruneSpec:
    """What to run.

    Attributes:
        max_remove: N, the largest number of removed layers (n = 1..N).
        methods: a subset of METHODS (random always runs).
        random_seeds: random rankings (seeds 0..R-1).
        greedy_windows: the first this-many calibration windows score the greedy search's candidates.
        k, null_draws, seed: the continuity measurement behind the data-free scores.
    """

    max_remove: int = 10
    methods: tuple[str, ...] = METHODS
    random_seeds: int = 3
    greedy_windows: int = 2
    k: int = 8
    null_draws: int = 100
    seed: int = 0

    def check(self, n_layers: int | None = None) -> None:
        """Raise GeodriftError (naming the option) on an invalid value; ``n_layers`` when known."""
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise GeodriftError(f"--methods: unknown {', '.join(unknown) or '(empty)'}; choose from {', '.join(METHODS)}")
        if self.max_remove < 1:
            raise GeodriftError(f"--max-remove: must be at least 1, got {self.max_remove}")
        if n_layers is not None and self.max_remove >= n_layers:
            raise GeodriftError(f"--max-remove: {self.max_remove} >= the model's {n_layers} layers; remove at most "
                                f"{n_layers - 1}")
        if self.random_seeds < 2:
            raise GeodriftError(f"--random-seeds: need at least 2 for a mean and std, got {self.random_seeds}")
        if self.greedy_windows < 1:
            raise GeodriftError(f"--greedy-windows: must be at least 1, got {self.greedy_windows}")
        MeasureSpec(k=self.k, null_draws=self.null_draws, seed=self.seed)


@dataclass
class Curve:
    """One method's held-out perplexity for n = 1..N (``removed[n-1]`` the layers removed at n)."""

    method: str
    removed: list[list[int]]
    ppl: list[float]
    nll_se: list[float]


@dataclass
class PruneResult:
    """Everything ``compress prune`` measured (JSON: ``to_dict``; CSV: ``rows``)."""

    model: str
    n_layers: int
    corpus: dict[str, str]
    seq_len: int
    calib_windows: int
    eval_windows: int
    baseline_ppl: float
    baseline_nll_se: float
    curves: list[Curve]
    random_mean: list[float]
    random_std: list[float]
    random_curves: list[Curve]
    scores: dict[str, list[float]]
    geometry: list[dict[str, Any]]
    spearman: list[dict[str, Any]]
    seconds: dict[str, float]
    eval_seconds: float
    notes: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)

    def rows(self) -> list[dict[str, Any]]:
        """Tidy rows: one per method (random seeds too) and n."""
        out = []
        for c in self.curves + self.random_curves:
            for n, (layers, ppl, se) in enumerate(zip(c.removed, c.ppl, c.nll_se, strict=True), 1):
                out.append({"model": self.model, "method": c.method, "n_removed": n,
                            "removed": " ".join(map(str, layers)), "ppl": ppl, "nll_se": se,
                            "baseline_ppl": self.baseline_ppl})
        for n, (m, s) in enumerate(zip(self.random_mean, self.random_std, strict=True), 1):
            out.append({"model": self.model, "method": "random-mean", "n_removed": n, "removed": "",
                        "ppl": m, "nll_se": s, "baseline_ppl": self.baseline_ppl})
        return out


Progress = Callable[[str, int, int], None]


def run_prune(setup: Setup, spec: PruneSpec, progress: Progress | None = None) -> PruneResult:
    """Rank the layers by every method and evaluate the pruned model for n = 1..N.

    Args:
        setup: the loaded model and texts (:func:`geodrift.compress.model.load_setup`).
        spec: what to run (checked against the depth).
        progress: ``(stage, done, total)`` callback.

    Returns:
        PruneResult.

    Raises:
        GeodriftError: on an invalid spec for this model.
    """
    spec.check(setup.n_layers)
    model, L, N = setup.model, setup.n_layers, spec.max_remove
    report = progress or (lambda stage, done, total: None)

    seconds: dict[str, float] = {}
    start = time.perf_counter()
    base = window_nll(model, setup.evaluation)
    eval_seconds = time.perf_counter() - start
    prefix = layer_states(model, setup.evaluation)  # (L + 1, W, T, d): every evaluation starts at its first gap
    cache: dict[frozenset[int], torch.Tensor] = {frozenset(): base}

    def evaluate(layers: list[int]) -> torch.Tensor:
        key = frozenset(layers)
        if key not in cache:
            cache[key] = window_nll(model, setup.evaluation, key, prefix=prefix)
        return cache[key]

    scores: dict[str, list[float]] = {}
    floors: list[dict[str, Any]] = []
    sets: dict[str, list[list[int]]] = {}
    if any(m.startswith("geom-") for m in spec.methods):
        start = time.perf_counter()
        continuity = rank.geometry_report(model, MeasureSpec(k=spec.k, null_draws=spec.null_draws, seed=spec.seed))
        geometry = rank.geometry_scores(continuity, L)
        floors = rank.geometry_floors(continuity)
        seconds["geometry (both scores)"] = time.perf_counter() - start
        for m in rank.GEOMETRY_METHODS:
            if m in spec.methods:
                scores[m] = geometry[m]
                order = rank.order_from_scores(geometry[m])
                sets[m] = [sorted(order[:n]) for n in range(1, N + 1)]
    if "block-influence" in spec.methods or "angular" in spec.methods:
        start = time.perf_counter()
        states = layer_states(model, setup.calib)
        bi = rank.block_influence(states)
        blocks = [rank.angular_block(states, n) for n in range(1, N + 1)]
        angular1 = rank.angular_distances(states, 1)
        del states
        seconds["block-influence + angular (one calibration pass)"] = time.perf_counter() - start
        if "block-influence" in spec.methods:
            scores["block-influence"] = bi
            order = rank.order_from_scores([-b for b in bi])
            sets["block-influence"] = [sorted(order[:n]) for n in range(1, N + 1)]
        if "angular" in spec.methods:
            scores["angular (n=1)"] = angular1
            sets["angular"] = blocks
    greedy_nll: list[float] = []
    if "greedy" in spec.methods:
        start = time.perf_counter()
        order, greedy_nll = rank.greedy_order(model, setup.calib[:spec.greedy_windows], N,
                                              progress=lambda done, total: report("greedy search", done, total))
        seconds["greedy"] = time.perf_counter() - start
        scores["greedy (step removed)"] = [float(order.index(i) + 1) if i in order else float("nan") for i in range(L)]
        sets["greedy"] = [sorted(order[:n]) for n in range(1, N + 1)]
    random_sets = {s: [sorted(rank.random_ranking(L, s)[:n]) for n in range(1, N + 1)] for s in range(spec.random_seeds)}

    total = sum(len(v) for v in sets.values()) + sum(len(v) for v in random_sets.values())
    done = 0

    def curve(name: str, removal: list[list[int]]) -> Curve:
        nonlocal done
        nll = []
        for layers in removal:
            nll.append(evaluate(layers))
            done += 1
            report("held-out perplexity", done, total)
        return Curve(name, removal, [perplexity_of(x) for x in nll], [spread(x) for x in nll])

    start = time.perf_counter()
    curves = [curve(m, sets[m]) for m in METHODS if m in sets]
    random_curves = [curve(f"random-{s}", r) for s, r in random_sets.items()]
    seconds["held-out evaluations"] = time.perf_counter() - start
    by_n = torch.tensor([c.ppl for c in random_curves], dtype=torch.float64)  # (R, N)
    notes = [f"{len(cache)} distinct layer sets evaluated on {setup.evaluation.shape[0]} held-out windows"]
    if greedy_nll:
        notes.append("greedy calibration perplexity by step: " + ", ".join(f"{math.exp(v):.1f}" for v in greedy_nll))
    correlations = _correlations(scores, L)
    return PruneResult(
        model=setup.label, n_layers=L, corpus=setup.corpus, seq_len=setup.evaluation.shape[1] - 1,
        calib_windows=setup.calib.shape[0], eval_windows=setup.evaluation.shape[0],
        baseline_ppl=perplexity_of(base), baseline_nll_se=spread(base), curves=curves,
        random_mean=by_n.mean(0).tolist(), random_std=by_n.std(0).tolist(), random_curves=random_curves,
        scores=scores, geometry=floors, spearman=correlations, seconds=seconds, eval_seconds=eval_seconds, notes=notes,
        verdicts=prune_verdicts(curves, random_curves, correlations),
    )


def prune_verdicts(curves: list[Curve], random_curves: list[Curve], spearman: list[dict[str, Any]]) -> list[Verdict]:
    """The paper's pruning corollary, judged for each data-free geometry ranking that ran.

    Two claims per geometry method: its removal order beats random removal (:data:`BEATS_RANDOM`,
    needs at least 2 random seeds), and it agrees with ShortGPT's Block Influence (:data:`AGREES`,
    when Block Influence ran). The criteria use the random orders' spread and the rank test's p-value,
    never a published number.

    Args:
        curves: the ranking methods' curves; random_curves: one per random seed (same n = 1..N);
        spearman: the rows of ``PruneResult.spearman``.

    Returns:
        One ``Verdict`` (``holds``, ``fails`` or ``tie``) per claim, in method order.

    Example:
        >>> c = Curve("geom-v1", [[3]], [40.0], [0.1])
        >>> r = [Curve(f"random-{s}", [[s]], [p], [0.1]) for s, p in enumerate((50.0, 52.0))]
        >>> prune_verdicts([c], r, [])[0].verdict
        'holds'
    """
    out = []
    logs = [statistics.fmean(math.log(p) for p in c.ppl) for c in random_curves]
    for c in curves:
        if not c.method.startswith("geom-"):
            continue
        if len(logs) >= 2:
            mine, mu, sd = statistics.fmean(math.log(p) for p in c.ppl), statistics.fmean(logs), statistics.stdev(logs)
            verdict = "holds" if mine < mu - 2 * sd else "fails" if mine > mu + 2 * sd else "tie"
            out.append(Verdict(f"Continuity tells which layers can go: the {c.method} order beats random removal",
                               BEATS_RANDOM, f"mean log ppl {mine:.3f} vs random {mu:.3f} ± {sd:.3f} "
                               f"({len(logs)} seeds; n = 1..{len(c.ppl)})", verdict))
        row = next((r for r in spearman if r["data_free"] == c.method and r["reference"] == "block-influence"), None)
        if row is not None:
            agrees = row["rho"] > 0 and row["p_value"] < 0.05
            out.append(Verdict(f"The {c.method} order agrees with Block Influence (ShortGPT)", AGREES,
                               f"rho {row['rho']:+.3f}, p {row['p_value']:.2g} ({row['layers']} layers)",
                               "holds" if agrees else "fails"))
    return out


def _removability(name: str, values: list[float]) -> list[float]:
    # Higher = removed earlier, for every score: BI and angular distance are "importance" scores.
    if name in ("block-influence", "angular (n=1)"):
        return [-v for v in values]
    if name.startswith("greedy"):
        return [-v if v == v else -math.inf for v in values]
    return list(values)


def _correlations(scores: dict[str, list[float]], n_layers: int) -> list[dict[str, Any]]:
    out = []
    for mine in rank.GEOMETRY_METHODS:
        if mine not in scores:
            continue
        for other in ("block-influence", "angular (n=1)", "greedy (step removed)"):
            if other not in scores:
                continue
            a = _removability(mine, scores[mine])
            b = [v if math.isfinite(v) else -1e9 for v in _removability(other, scores[other])]
            rho, p = spearmanr(a, b)
            out.append({"data_free": mine, "reference": other, "rho": float(rho), "p_value": float(p),
                        "layers": n_layers})
    return out
