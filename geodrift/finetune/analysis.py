"""The forgetting question answered from a grid's run records: which indicator ranks forgetting, with what certainty.

For every (run, checkpoint) point the grid measured forgetting (the paired change of held-out NLL on the
original kind of text) and every indicator. Per indicator:

- **pooled rho**: Spearman's rank correlation with forgetting over all points, with a 95 % percentile
  bootstrap interval (points resampled with replacement, :data:`BOOTSTRAP` draws, seeded);
- **control sign**: on the in-domain control's checkpoints, the share whose predicted sign is that of the
  forgetting measured there (at lr 1e-4 the control lowered the probe NLL, at 5e-4 it raised it). A weights-only indicator predicts forgetting (+) when it exceeds its
  noise floor - the same indicator for a random update of the same size - and no forgetting (-) below it; on
  the floor it predicts nothing (never right): ``||dW||/||W||`` equals its floor by construction, so a
  magnitude alone cannot tell forgetting from in-domain learning. The Taylor / EWC prediction has its own sign;
- **per-layer rho**: at the last checkpoint of each run with single-layer reverts, Spearman between the
  indicator's per-layer values and the NLL each layer's revert recovers; the mean over the shifted-domain runs
  (95 % bootstrap over layers, run by run), the control's listed apart.

An indicator "worth shipping" (issue 41) has pooled rho >= 0.8, control sign >= 90 % and per-layer rho >= 0.5.
Derived directional indicators (computed here from what each run recorded): ``rotation_excess`` (top-k
rotation over a random update's) and ``frame_enrichment`` (frame share over the random-direction ``k/d``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import rankdata, spearmanr

BOOTSTRAP = 2000
SHIP = {"pooled": 0.8, "control_sign": 0.9, "per_layer": 0.5}
# name -> (what it is, whether it uses data)
INDICATOR_LABELS: dict[str, tuple[str, bool]] = {
    "rel_dw": ("‖ΔW‖/‖W‖", False),
    "rotation_v1": ("v1/u1 rotation (the paper's drift), raw", False),
    "rotation_topk": ("top-8 subspace rotation, raw", False),
    "rotation_topk_gauge": ("top-8 subspace rotation, gauge fixed", False),
    "intruders": ("intruder dimensions (top-10, eps 0.5)", False),
    "frame_share": ("share of ΔW in the base's top-8 frame", False),
    "frame_energy": ("ΔW in the base's top-8 frame / ‖W‖", False),
    "rotation_excess": ("top-8 rotation / a random update's", False),
    "frame_enrichment": ("frame share / k/d", False),
    "taylor": ("first-order Taylor + EWC (4 windows of data)", True),
}


@dataclass
class IndicatorResult:
    """One indicator's answer."""

    name: str
    label: str
    uses_data: bool
    pooled_rho: float
    pooled_ci: tuple[float, float]
    control_right: int
    control_total: int
    per_layer_rho: float | None
    per_layer_ci: tuple[float, float] | None
    per_layer_runs: dict[str, float] = field(default_factory=dict)
    control_per_layer: dict[str, float] = field(default_factory=dict)

    @property
    def control_share(self) -> float:
        """Share of control checkpoints with the sign right."""
        return self.control_right / self.control_total if self.control_total else math.nan

    @property
    def ships(self) -> bool:
        """All three of issue 41's bars met."""
        return (self.pooled_rho >= SHIP["pooled"] and self.control_share >= SHIP["control_sign"]
                and self.per_layer_rho is not None and self.per_layer_rho >= SHIP["per_layer"])


def points(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (run, checkpoint): forgetting, learning and every indicator (derived ones included)."""
    rows = []
    for rec in records:
        for c in rec["checkpoints"]:
            if "indicators" not in c:
                continue
            value, noise, null = c["indicators"]["value"], c["indicators"]["noise"], c["indicators"]["null"]
            row = {"run": rec["label"], "corpus": rec["spec"]["corpus"], "lr": rec["spec"]["lr"], "step": c["step"],
                   "control": rec["spec"]["corpus"] == rec["spec"]["probe"], "forgetting": c["forgetting"]["mean"],
                   "forgetting_se": c["forgetting"]["se"], "learning": c["learning"]["mean"],
                   "learning_se": c["learning"]["se"], "taylor": c["taylor"]["total"] if "taylor" in c else math.nan}
            for name in value:  # JSON writes NaN as null (the gauge view has no random-update floor)
                row[name] = math.nan if value[name] is None else value[name]
                row[f"{name}_noise"] = math.nan if noise.get(name) is None else noise[name]
            row["rotation_excess"] = value["rotation_topk"] / noise["rotation_topk"]
            row["rotation_excess_noise"] = 1.0
            row["frame_enrichment"] = value["frame_share"] / null["frame_share_random"]
            row["frame_enrichment_noise"] = noise["frame_share"] / null["frame_share_random"]
            rows.append(row)
    return rows


def per_layer_values(record: dict[str, Any], name: str) -> list[float] | None:
    """An indicator's per-layer values at a run's last checkpoint (None when it has none per layer)."""
    last = record["checkpoints"][-1]
    if name == "taylor":
        per = last.get("taylor", {}).get("per_layer")
    elif name in ("rotation_excess", "frame_enrichment"):
        return None
    else:
        per = last.get("indicators", {}).get("per_layer", {}).get(name)
    if not per:
        return None
    return [float(per[str(layer)]) for layer in range(len(per))]


def analyse(records: list[dict[str, Any]], seed: int = 0) -> list[IndicatorResult]:
    """Every indicator's pooled rho (with interval), control sign and per-layer rho; see the module docstring."""
    rows = points(records)
    forgetting = np.array([r["forgetting"] for r in rows])
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(rows), size=(BOOTSTRAP, len(rows)))
    out = []
    for name, (label, uses_data) in INDICATOR_LABELS.items():
        values = np.array([r.get(name, math.nan) for r in rows], dtype=float)
        if not np.isfinite(values).all():
            continue
        rho = _spearman(values, forgetting)
        boot = _spearman_rows(values[draws], forgetting[draws])
        control = [r for r in rows if r["control"]]
        right = sum(_predicted_sign(r, name) == (1 if r["forgetting"] > 0 else -1) for r in control)
        layer = _per_layer(records, name, rng)
        out.append(IndicatorResult(name, label, uses_data, rho, _interval(boot), right, len(control), *layer))
    return out


def _predicted_sign(row: dict[str, Any], name: str) -> int:
    # +1 above the floor, -1 below it, 0 (no prediction: never right) on it (within float32 rounding of the norms:
    # 1e-4 relative) - ||dW||/||W|| equals its floor by
    # construction, so it predicts no sign at all.
    if name == "taylor":
        return 1 if row["taylor"] > 0 else -1
    value, floor = row[name], row[f"{name}_noise"]
    if not math.isfinite(floor) or abs(value - floor) <= 1e-4 * max(abs(value), abs(floor)):
        return 0
    return 1 if value > floor else -1


def _per_layer(records: list[dict[str, Any]], name: str, rng: np.random.Generator
               ) -> tuple[float | None, tuple[float, float] | None, dict[str, float], dict[str, float]]:
    shifted: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    control: dict[str, float] = {}
    for rec in records:
        values = per_layer_values(rec, name)
        if not rec.get("reverts") or values is None:
            continue
        recovery = np.array([r["recovery"] for r in rec["reverts"]])
        pair = (np.array(values), recovery)
        if rec["spec"]["corpus"] == rec["spec"]["probe"]:
            control[rec["label"]] = _spearman(*pair)
        else:
            shifted[rec["label"]] = pair
    if not shifted:
        return None, None, {}, control
    per_run = {label: _spearman(*pair) for label, pair in shifted.items()}
    rows = []
    for layer_values, recovery in shifted.values():
        pick = rng.integers(0, len(layer_values), size=(BOOTSTRAP, len(layer_values)))
        rows.append(_spearman_rows(layer_values[pick], recovery[pick]))
    stacked = np.stack(rows)  # (runs, draws): the mean over runs of each draw, NaN (a constant draw) left out
    finite = np.isfinite(stacked)
    boot = np.where(finite.any(0), np.where(finite, stacked, 0).sum(0) / np.maximum(finite.sum(0), 1), np.nan)
    return float(np.mean(list(per_run.values()))), _interval(boot), per_run, control


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(spearmanr(a, b).statistic)


def _spearman_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # Spearman's rho of each row pair of (draws, n) arrays (average ranks for ties); NaN for a constant row.
    ra, rb = rankdata(a, axis=1), rankdata(b, axis=1)
    ra, rb = ra - ra.mean(1, keepdims=True), rb - rb.mean(1, keepdims=True)
    denom = np.sqrt((ra * ra).sum(1) * (rb * rb).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (ra * rb).sum(1) / np.where(denom > 0, denom, 1.0), np.nan)


def _interval(boot: np.ndarray) -> tuple[float, float]:
    finite = boot[np.isfinite(boot)]
    if finite.size == 0:
        return (math.nan, math.nan)
    return float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5))


def best_weights_only(results: list[IndicatorResult]) -> IndicatorResult:
    """The weights-only indicator with the highest pooled rho that has per-layer values (the merge's choice); in a
    grid without reverts, the highest pooled rho."""
    finite = [r for r in results if not r.uses_data and math.isfinite(r.pooled_rho)]
    candidates = [r for r in finite if r.per_layer_rho is not None] or finite  # no reverts yet: pooled rho alone
    return max(candidates, key=lambda r: r.pooled_rho)
