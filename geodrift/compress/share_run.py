"""The ``compress share`` experiment: policies at equal parameter count, and each projection alone.

Whole-model policies (``geodrift.compress.share.POLICIES``) are evaluated on the held-out windows at
each compression ratio of the projection parameters. Then each projection alone (everything else
dense) at one ratio, factored in input space, output space or privately, and a verdict:

- criterion: two configurations differ when their paired per-window mean-NLL difference is beyond
  2 standard errors over the evaluation windows (``|mean d| > 2 std(d)/sqrt(W)``);
- Q, K, Gate, Up (predicted input) and O, Down (predicted output): ``holds`` when the predicted
  space beats the other space, ``fails`` when the other space beats it, ``tie`` otherwise;
- V (predicted neither): ``holds`` when neither shared space beats private, ``fails`` otherwise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from geodrift.compress.model import Setup, perplexity_of, spread, window_nll
from geodrift.compress.share import POLICIES, Assignment, Bases, groups_of, rank_for, swapped_weights
from geodrift.errors import GeodriftError
from geodrift.weights import ROLE_LABELS, TRANSFORMER_ROLES

PREDICTED = {"attn_q": "input", "attn_k": "input", "mlp_gate": "input", "mlp_up": "input",
             "attn_o": "output", "mlp_down": "output", "attn_v": None}
CRITERION = "paired per-window NLL difference beyond 2 standard errors over the evaluation windows"


@dataclass(frozen=True)
class ShareSpec:
    """What to run: group size g, ratios, policies, and the per-projection ratio (None: skip)."""

    group_size: int = 2
    ratios: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4)
    policies: tuple[str, ...] = tuple(POLICIES)
    alone_ratio: float | None = 0.3

    def check(self, n_layers: int | None = None) -> None:
        """Raise GeodriftError naming the option on an invalid value."""
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown or not self.policies:
            raise GeodriftError(f"--policies: unknown {', '.join(unknown) or '(empty)'}; choose from "
                                f"{', '.join(POLICIES)}")
        if self.group_size < 2:
            raise GeodriftError(f"--group-size: must be at least 2 (layers sharing a basis), got {self.group_size}")
        if n_layers is not None and self.group_size > n_layers:
            raise GeodriftError(f"--group-size: {self.group_size} > the model's {n_layers} layers")
        if not self.ratios:
            raise GeodriftError("--ratios: give at least one ratio, e.g. 0.1,0.2,0.3,0.4")
        for r in (*self.ratios, *([self.alone_ratio] if self.alone_ratio is not None else [])):
            if not 0.0 < r < 1.0:
                raise GeodriftError(f"--ratios/--alone-ratio: {r} is not a fraction of parameters removed in (0, 1)")


@dataclass
class PolicyCurve:
    """One policy's held-out perplexity per ratio, with the parameters it keeps."""

    policy: str
    spaces: dict[str, str]
    ppl: list[float]
    nll_se: list[float]
    kept_params: list[int]
    dense_params: int


@dataclass
class AloneRow:
    """One projection compressed alone in one space."""

    role: str
    label: str
    space: str
    ranks: list[int]
    kept_params: int
    ppl: float
    nll_se: float


@dataclass
class AloneVerdict:
    """Per projection: the predicted space, the winner, the paired differences (nats/token) and the verdict."""

    role: str
    label: str
    predicted: str
    best: str
    differences: dict[str, dict[str, float]]
    verdict: str
    criterion: str = CRITERION


@dataclass
class ShareResult:
    """Everything ``compress share`` measured."""

    model: str
    n_layers: int
    corpus: dict[str, str]
    eval_windows: int
    group_size: int
    ratios: list[float]
    baseline_ppl: float
    baseline_nll_se: float
    curves: list[PolicyCurve]
    alone_ratio: float | None
    alone: list[AloneRow]
    verdicts: list[AloneVerdict]
    seconds: dict[str, float]
    eval_seconds: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)

    def rows(self) -> list[dict[str, Any]]:
        """Tidy CSV rows: one per policy and ratio, then one per projection-alone configuration."""
        out = []
        for c in self.curves:
            for ratio, ppl, se, kept in zip(self.ratios, c.ppl, c.nll_se, c.kept_params, strict=True):
                out.append({"model": self.model, "experiment": "policy", "name": c.policy, "space": "",
                            "ratio": ratio, "group_size": self.group_size, "kept_params": kept,
                            "dense_params": c.dense_params, "ppl": ppl, "nll_se": se, "baseline_ppl": self.baseline_ppl})
        for a in self.alone:
            out.append({"model": self.model, "experiment": "alone", "name": a.label, "space": a.space,
                        "ratio": self.alone_ratio, "group_size": self.group_size, "kept_params": a.kept_params,
                        "dense_params": "", "ppl": a.ppl, "nll_se": a.nll_se, "baseline_ppl": self.baseline_ppl})
        return out


def run_share(setup: Setup, spec: ShareSpec, progress: Callable[[str, int, int], None] | None = None,
              keep_bases: bool = False) -> tuple[ShareResult, Bases | None]:
    """Evaluate every policy at every ratio, then each projection alone.

    Returns:
        ``(result, bases)``; ``bases`` (to write a compressed model) only with ``keep_bases``.

    Raises:
        GeodriftError: on an invalid spec (e.g. a ratio leaving rank 0).
    """
    spec.check(setup.n_layers)
    model = setup.model
    report = progress or (lambda stage, done, total: None)
    groups = groups_of(setup.n_layers, spec.group_size)
    weights = {key: w.detach().clone() for key, w in model.weight_tensors().items()}
    shapes: dict[str, tuple[int, int]] = {role: (weights[(role, 0)].shape[0], weights[(role, 0)].shape[1])
                                          for role in TRANSFORMER_ROLES}
    assignments = [Assignment(p, POLICIES[p]) for p in spec.policies]
    alone = ([Assignment(f"{role}:{space}", {role: space}) for role in TRANSFORMER_ROLES
              for space in ("input", "output", "private")] if spec.alone_ratio is not None else [])
    need: dict[tuple[str, str, int], int] = {}
    jobs = [(a, r) for a in assignments for r in spec.ratios] + [(a, spec.alone_ratio) for a in alone]
    for a, ratio in jobs:
        assert ratio is not None
        for key, r in a.needs(shapes, groups, ratio).items():
            need[key] = max(need.get(key, 0), r)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    base = window_nll(model, setup.evaluation)
    eval_seconds = time.perf_counter() - start
    report("bases (SVD per projection, group and space)", 0, 1)
    start = time.perf_counter()
    bases = Bases(weights, groups, need)
    seconds["bases"] = time.perf_counter() - start
    results: dict[tuple[str, float], tuple[torch.Tensor, int, int]] = {}
    start = time.perf_counter()
    for done, (a, ratio) in enumerate(jobs, 1):
        assert ratio is not None
        new, kept, dense = a.weights(bases, shapes, ratio)
        with swapped_weights(model, new):
            results[(a.name, ratio)] = (window_nll(model, setup.evaluation), kept, dense)
        report("held-out perplexity", done, len(jobs))
    seconds["held-out evaluations"] = time.perf_counter() - start
    curves = []
    for a in assignments:
        got = [results[(a.name, r)] for r in spec.ratios]
        curves.append(PolicyCurve(a.name, dict(a.spaces), [perplexity_of(g[0]) for g in got],
                                  [spread(g[0]) for g in got], [g[1] for g in got], got[0][2]))
    rows, verdicts = [], []
    if spec.alone_ratio is not None:
        for role in TRANSFORMER_ROLES:
            nll = {}
            for space in ("input", "output", "private"):
                x, kept, _ = results[(f"{role}:{space}", spec.alone_ratio)]
                nll[space] = x
                ranks = [rank_for(space, shapes[role], len(g), spec.alone_ratio) for g in groups]
                rows.append(AloneRow(role, ROLE_LABELS[role], space, ranks, kept, perplexity_of(x), spread(x)))
            verdicts.append(_verdict(role, nll))
    notes = [f"groups of {spec.group_size}: " + " ".join(f"{g[0]}-{g[-1]}" for g in groups),
             "data-free factorisation (no calibration whitening)"]
    result = ShareResult(setup.label, setup.n_layers, setup.corpus, setup.evaluation.shape[0], spec.group_size,
                         list(spec.ratios), perplexity_of(base), spread(base), curves, spec.alone_ratio, rows, verdicts,
                         seconds, eval_seconds, notes)
    return result, (bases if keep_bases else None)


def paired(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Paired difference of window NLLs ``a - b``: mean, its standard error and whether it is beyond 2 SE."""
    d = (a - b).double()
    se = float(d.std() / math.sqrt(d.numel())) if d.numel() > 1 else float("inf")
    mean = float(d.mean())
    return {"mean": mean, "se": se, "significant": float(abs(mean) > 2 * se)}


def _verdict(role: str, nll: dict[str, torch.Tensor]) -> AloneVerdict:
    predicted = PREDICTED[role]
    best = min(nll, key=lambda s: float(nll[s].mean()))
    if predicted is None:
        diffs = {f"{s} - private": paired(nll[s], nll["private"]) for s in ("input", "output")}
        shared_wins = any(d["significant"] and d["mean"] < 0 for d in diffs.values())
        verdict = "fails" if shared_wins else "holds"
        label = "neither"
    else:
        other = "output" if predicted == "input" else "input"
        diffs = {f"{predicted} - {other}": paired(nll[predicted], nll[other]),
                 f"{predicted} - private": paired(nll[predicted], nll["private"])}
        d = diffs[f"{predicted} - {other}"]
        verdict = "tie" if not d["significant"] else ("holds" if d["mean"] < 0 else "fails")
        label = predicted
    return AloneVerdict(role, ROLE_LABELS[role], label, best, diffs, verdict)
