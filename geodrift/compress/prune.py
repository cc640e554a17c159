"""``geodrift compress prune``: which layers can go? Rankings, held-out perplexity, rank correlations.

For n = 1..N removed layers, each method's removal set is evaluated on the held-out windows
(one loaded model, layers skipped by index; a set two methods share is evaluated once). The
random floor is ``random_seeds`` permutations (20 by default): their median per n, and a rank test
(:data:`BEATS_RANDOM`) that one order hitting a critical layer cannot flip. Spearman's rho (scipy)
compares each data-free score with Block Influence, the angular distance of single layers
(n = 1) and the greedy order (layers it removed ranked by step, the rest tied last).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from scipy.stats import spearmanr

from geodrift.compress import rank
from geodrift.compress.model import Setup, kept_layers, layer_states, perplexity_of, spread, window_nll
from geodrift.compress.saved import PRUNED, Saved, file_sizes, saved_dict
from geodrift.compress.table import (
    AGREEMENT_REFERENCE,
    ANGULAR,
    BLOCK_INFLUENCE,
    GEOMETRY,
    RANKINGS,
    SEARCH,
    STATES,
    names,
)
from geodrift.continuity import MeasureSpec
from geodrift.continuity.verdicts import Verdict
from geodrift.errors import GeodriftError
from geodrift.lm.hf_causal import HFCausalLM
from geodrift.lm.llama import LlamaLM

METHODS = names(RANKINGS)  # every ranking, in the table's order (geodrift.compress.table.RANKINGS)
RANK_TEST_ORDERS = 20  # random orders the rank test needs: with 20, beating 19 of them is p = 2/21 < 0.1
# More random orders than this is no longer a check but a hang: each order costs --max-remove evaluations.
MAX_RANDOM_ORDERS = 10_000
RANK_TEST_LEVEL = 0.10
BEATS_RANDOM = ("rank test of the mean held-out log-perplexity over n = 1..N against R >= 20 random orders: holds when "
                "p = (1 + #orders at or below it) / (R + 1) <= 0.10 (with 20 orders: it beats at least 19), fails when "
                "(1 + #orders at or above it) / (R + 1) <= 0.10, otherwise tie. Exact under exchangeability: a random "
                "order judged as a method holds (or fails) with probability 2/21 = 0.095, and one order that hits a "
                "critical layer cannot flip the verdict. The fraction of orders it beats at each n and their median "
                "are reported beside it")
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
    random_seeds: int = RANK_TEST_ORDERS
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
            raise GeodriftError(f"--random-seeds: need at least 2 for a median and spread, got {self.random_seeds} "
                                f"(the rank-test verdict needs {RANK_TEST_ORDERS})")
        if self.random_seeds > MAX_RANDOM_ORDERS:
            raise GeodriftError(f"--random-seeds: {self.random_seeds} random orders would each need {self.max_remove} "
                                f"held-out evaluations; use at most {MAX_RANDOM_ORDERS} (the rank test needs "
                                f"{RANK_TEST_ORDERS})")
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
    random_median: list[float]
    beats_random: dict[str, list[float]]
    scores: dict[str, list[float]]
    geometry: list[dict[str, Any]]
    spearman: list[dict[str, Any]]
    seconds: dict[str, float]
    eval_seconds: float
    notes: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    weights: str = ""
    saved: Saved | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``saved``: :meth:`geodrift.compress.saved.Saved.to_dict`, ``{}`` when nothing was saved)."""
        return {**asdict(self), "saved": saved_dict(self.saved)}

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
        for n, m in enumerate(self.random_median, 1):
            out.append({"model": self.model, "method": "random-median", "n_removed": n, "removed": "",
                        "ppl": m, "nll_se": "", "baseline_ppl": self.baseline_ppl})
        return out


Progress = Callable[[str, int, int], None]


def evaluate_pruning(setup: Setup[LlamaLM | HFCausalLM], spec: PruneSpec, progress: Progress | None = None) -> PruneResult:
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
    if any(RANKINGS[m].signal == GEOMETRY for m in spec.methods):
        start = time.perf_counter()
        continuity = rank.geometry_report(model, MeasureSpec(k=spec.k, null_draws=spec.null_draws, seed=spec.seed))
        geometry = rank.geometry_scores(continuity, L)
        floors = rank.geometry_floors(continuity)
        seconds["geometry (both scores)"] = time.perf_counter() - start
        for m in RANKINGS:
            if m in spec.methods and RANKINGS[m].signal == GEOMETRY:
                scores[RANKINGS[m].score] = geometry[m]
                order = rank.order_from_scores(geometry[m])
                sets[m] = [sorted(order[:n]) for n in range(1, N + 1)]
    if any(RANKINGS[m].signal == STATES for m in spec.methods):
        start = time.perf_counter()
        states = layer_states(model, setup.calib)
        bi = rank.block_influence(states)
        blocks = [rank.angular_block(states, n) for n in range(1, N + 1)]
        angular1 = rank.angular_distances(states, 1)
        del states
        seconds["block-influence + angular (one calibration pass)"] = time.perf_counter() - start
        if BLOCK_INFLUENCE in spec.methods:
            scores[RANKINGS[BLOCK_INFLUENCE].score] = bi
            order = rank.order_from_scores([-b for b in bi])
            sets[BLOCK_INFLUENCE] = [sorted(order[:n]) for n in range(1, N + 1)]
        if ANGULAR in spec.methods:
            scores[RANKINGS[ANGULAR].score] = angular1
            sets[ANGULAR] = blocks
    greedy_nll: list[float] = []
    for m in RANKINGS:
        if m in spec.methods and RANKINGS[m].signal == SEARCH:
            start = time.perf_counter()
            order, greedy_nll = rank.greedy_order(model, setup.calib[:spec.greedy_windows], N,
                                                  progress=lambda done, total: report("greedy search", done, total))
            seconds[m] = time.perf_counter() - start
            scores[RANKINGS[m].score] = [float(order.index(i) + 1) if i in order else float("nan") for i in range(L)]
            sets[m] = [sorted(order[:n]) for n in range(1, N + 1)]
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
        random_median=by_n.quantile(0.5, dim=0).tolist(),
        beats_random={c.method: beaten_fractions(c, random_curves) for c in curves},
        scores=scores, geometry=floors, spearman=correlations, seconds=seconds, eval_seconds=eval_seconds, notes=notes,
        verdicts=prune_verdicts(curves, random_curves, correlations), weights=setup.weights,
    )


def beaten_fractions(curve: Curve, random_curves: list[Curve]) -> list[float]:
    """For each n, the fraction of random orders whose perplexity is above ``curve``'s (ties count half).

    Example:
        >>> c = Curve("geom-v1", [[0]], [40.0], [0.1])
        >>> beaten_fractions(c, [Curve("r", [[1]], [p], [0.1]) for p in (30.0, 40.0, 50.0, 60.0)])
        [0.625]
    """
    out = []
    for n, mine in enumerate(curve.ppl):
        others = [r.ppl[n] for r in random_curves]
        out.append((sum(o > mine for o in others) + 0.5 * sum(o == mine for o in others)) / max(len(others), 1))
    return out


def rank_test(mine: float, random: list[float]) -> tuple[float, float]:
    """One-sided exact rank p-values of ``mine`` among ``random`` (lower is better): ``(p_better, p_worse)``.

    ``p_better = (1 + #random <= mine) / (R + 1)``; ``p_worse = (1 + #random >= mine) / (R + 1)``.

    Example:
        >>> rank_test(1.0, [2.0] * 20)
        (0.047619047619047616, 1.0)
    """
    r = len(random)
    return (1 + sum(x <= mine for x in random)) / (r + 1), (1 + sum(x >= mine for x in random)) / (r + 1)


def prune_verdicts(curves: list[Curve], random_curves: list[Curve], spearman: list[dict[str, Any]]) -> list[Verdict]:
    """The paper's pruning corollary, judged for each data-free geometry ranking that ran.

    Two claims per geometry method: its removal order beats random removal (:data:`BEATS_RANDOM`, a
    rank test against the random orders; ``n/a`` with fewer than :data:`RANK_TEST_ORDERS` of them),
    and it agrees with ShortGPT's Block Influence (:data:`AGREES`, when Block Influence ran). The
    criteria use the random orders' ranks and the rank correlation's p-value, never a published number.

    Args:
        curves: the ranking methods' curves; random_curves: one per random seed (same n = 1..N);
        spearman: the rows of ``PruneResult.spearman``.

    Returns:
        One ``Verdict`` (``holds``, ``fails``, ``tie`` or ``n/a``) per claim, in method order.

    Example:
        >>> c = Curve("geom-v1", [[3]], [40.0], [0.1])
        >>> r = [Curve(f"random-{s}", [[s]], [50.0 + s], [0.1]) for s in range(20)]
        >>> prune_verdicts([c], r, [])[0].verdict
        'holds'
    """
    out = []
    logs = [statistics.fmean(math.log(p) for p in c.ppl) for c in random_curves]
    for c in curves:
        if c.method not in RANKINGS or RANKINGS[c.method].signal != GEOMETRY:
            continue
        claim = f"Continuity tells which layers can go: the {c.method} order beats random removal"
        mine = statistics.fmean(math.log(p) for p in c.ppl)
        beaten = beaten_fractions(c, random_curves)
        medians = [statistics.median(r.ppl[n] for r in random_curves) for n in range(len(c.ppl))] \
            if random_curves else []
        per_n = ", ".join(f"n={n + 1}: {b:.0%} (median {m:.1f})" for n, (b, m) in enumerate(zip(beaten, medians, strict=True)))
        if len(logs) < RANK_TEST_ORDERS:
            out.append(Verdict(claim, BEATS_RANDOM, f"only {len(logs)} random orders (the rank test needs "
                               f"{RANK_TEST_ORDERS}); orders beaten per n: {per_n}", "n/a"))
        else:
            p_better, p_worse = rank_test(mine, logs)
            verdict = "holds" if p_better <= RANK_TEST_LEVEL else "fails" if p_worse <= RANK_TEST_LEVEL else "tie"
            out.append(Verdict(claim, BEATS_RANDOM, f"mean log ppl {mine:.3f}, below {sum(x > mine for x in logs)} of "
                               f"{len(logs)} random orders (median {statistics.median(logs):.3f}; p better "
                               f"{p_better:.3f}, p worse {p_worse:.3f}); orders beaten per n: {per_n}", verdict))
        reference = RANKINGS[AGREEMENT_REFERENCE].score
        row = next((r for r in spearman if r["data_free"] == c.method and r["reference"] == reference), None)
        if row is not None:
            agrees = row["rho"] > 0 and row["p_value"] < 0.05
            out.append(Verdict(f"The {c.method} order agrees with Block Influence (ShortGPT)", AGREES,
                               f"rho {row['rho']:+.3f}, p {row['p_value']:.2g} ({row['layers']} layers)",
                               "holds" if agrees else "fails"))
    return out


def _removability(name: str, values: list[float]) -> list[float]:
    # Higher = removed earlier, for every score (``name``: a ranking's score name): importance scores are negated;
    # the greedy step is nan for layers the search never removed (they tie last).
    ranking = next(r for r in RANKINGS.values() if r.score == name)
    if not ranking.importance:
        return list(values)
    return [-v if v == v else -math.inf for v in values]


def _correlations(scores: dict[str, list[float]], n_layers: int) -> list[dict[str, Any]]:
    out = []
    for mine in (r.score for r in RANKINGS.values() if r.signal == GEOMETRY):
        if mine not in scores:
            continue
        for other in (r.score for r in RANKINGS.values() if r.signal != GEOMETRY):
            if other not in scores:
                continue
            a = _removability(mine, scores[mine])
            b = [v if math.isfinite(v) else -1e9 for v in _removability(other, scores[other])]
            rho, p = spearmanr(a, b)
            out.append({"data_free": mine, "reference": other, "rho": float(rho), "p_value": float(p),
                        "layers": n_layers})
    return out


def save_pruned(setup: Setup[LlamaLM | HFCausalLM], result: PruneResult, method: str, n: int, folder: str | Path, *,
                source: str | Path | None, force: bool = False, inputs: Iterable[str | Path | None] = ()) -> Saved:
    """Write the model without the ``n`` layers ``method`` removed, with the input's tokenizer, as a Hugging Face folder.

    The folder is written whole or not at all (:func:`geodrift.io.outdir.replace_folder`); the remaining
    layers are renumbered ``0..L-n-1``.

    Args:
        setup, result: the loaded model and its :func:`evaluate_pruning` result.
        method: a ranking that ran; n: how many of its layers go (1..N).
        folder: the folder to write; source: the checkpoint the model came from (its tokenizer is kept).
        force, inputs: as :func:`geodrift.io.outdir.replace_folder` (the output-folder policy).

    Returns:
        What was written: the removed and kept layers (indices of the input model), the tokenizer files
        and every file's size (:class:`geodrift.compress.saved.Saved`).

    Raises:
        GeodriftError: ``method`` did not run, ``n`` is outside 1..N, or the folder is refused.
    """
    from geodrift.io.manifest import record_written
    from geodrift.io.outdir import replace_folder
    from geodrift.lm.hf import save_hf
    from geodrift.pretrained import keep_tokenizer

    curve = next((c for c in result.curves if c.method == method), None)
    if curve is None or not 1 <= n <= len(curve.removed):
        raise GeodriftError(f"--save-method/--save-n: {method} with {n} layers removed did not run")
    removed = list(curve.removed[n - 1])
    kept = kept_layers(setup.n_layers, removed)
    model, tokenizer_files = setup.model, []

    def write(tmp: Path) -> None:
        if isinstance(model, LlamaLM):
            save_hf(model, tmp, layers=kept, context_length=setup.config.get("context_length"))
        else:
            model.save_pruned(tmp, kept)
            for written in sorted(tmp.iterdir()):  # transformers' files, listed as geodrift's (a later --force may
                record_written(written)            # replace them)
        tokenizer_files.extend(keep_tokenizer(source, tmp))

    out = replace_folder(folder, write, force=force, inputs=inputs)
    return Saved(str(folder), PRUNED, method, file_sizes(out), n=n, removed=tuple(removed), kept=tuple(kept),
                 tokenizer=tuple(tokenizer_files))
