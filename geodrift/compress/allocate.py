"""Ranks for a set of units at one compression ratio: uniform, by loss per parameter, or SVD-LLM-V2-style.

Every allocation keeps each projection type's parameters at or below ``(1 - ratio)`` of its dense
count (the budget is per type, so Q never pays for Down), and no unit beyond its break-even rank.

- :func:`uniform_ranks`: every unit the largest rank within its own share (the baselines).
- :func:`loss_per_parameter_ranks`: one greedy pass over every unit's next rank, taking the
  increments with the largest drop in whitened loss per parameter until the type's budget is spent
  (optimal for the fractional problem, since each unit's gains decrease with rank). The currency is
  the units' own ``spectrum``: geodrift's method weights each layer by ``1 / energy``, so it is the
  relative error.
- :func:`v2_ranks`: SVD-LLM V2's heterogeneous allocation (from its paper's description, not its
  code): within a type, unit i's removed fraction ``rho_i = n rho (1 / log L_i) / sum_j (1 / log L_j)``,
  ``L_i`` its whitened truncation loss at the uniform ratio (moments summed over tokens), so that a
  unit that would lose more is compressed less. A unit whose share would leave it less than rank 1
  keeps rank 1 and the others are scaled to spend the type's budget (the formula alone can overspend
  when some ``log L_i`` is near 0).
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from geodrift.compress.lowrank import Unit
from geodrift.errors import GeodriftError


def _rank_within(unit: Unit, removed: float) -> int:
    budget = (1.0 - removed) * unit.dense_parameters()
    r = min(int(budget // unit.per_rank()), unit.max_rank)
    if r < 1:
        raise GeodriftError(f"--ratios {removed:g}: leaves less than rank 1 for {unit.role} "
                            f"({unit.shape[0]}x{unit.shape[1]}); use a smaller ratio")
    return r


def uniform_ranks(units: list[Unit], ratio: float) -> list[int]:
    """Each unit's largest rank within ``(1 - ratio)`` of its own dense parameters.

    Raises:
        GeodriftError: when a unit cannot keep rank 1.

    Example:
        >>> from geodrift.compress.lowrank import private_unit
        >>> u = private_unit("attn_q", 0, torch.eye(8), torch.eye(8))
        >>> uniform_ranks([u], 0.5)  # 0.5 * 64 parameters / 16 per rank
        [2]
    """
    return [_rank_within(u, ratio) for u in units]


def _by_role(units: list[Unit]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for i, u in enumerate(units):
        out[u.role].append(i)
    return out


def loss_per_parameter_ranks(units: list[Unit], ratio: float) -> list[int]:
    """Greedy allocation of each type's budget by whitened-loss drop per parameter (every unit keeps rank >= 1).

    Example:
        >>> from geodrift.compress.lowrank import private_unit
        >>> flat = private_unit("attn_q", 0, torch.eye(8), torch.eye(8))  # 8 equal singular values
        >>> peaked = private_unit("attn_q", 1, torch.diag(torch.tensor([9.0, 1, 0, 0, 0, 0, 0, 0])), torch.eye(8))
        >>> loss_per_parameter_ranks([flat, peaked], 0.5)  # the peaked layer needs one rank, the flat one the rest
        [3, 1]
    """
    ranks = [1] * len(units)
    for indices in _by_role(units).values():
        budget = sum((1.0 - ratio) * units[i].dense_parameters() for i in indices)
        spent = sum(units[i].per_rank() for i in indices)
        if spent > budget:
            raise GeodriftError(f"--ratios {ratio:g}: leaves less than rank 1 for {units[indices[0]].role}; "
                                "use a smaller ratio")
        gains, costs, owner = [], [], []
        for i in indices:
            u = units[i]
            extra = u.spectrum[1: u.max_rank]  # the loss each further rank removes
            gains.append(extra / u.per_rank())
            costs.append(torch.full_like(extra, float(u.per_rank())))
            owner.append(torch.full((extra.numel(),), i, dtype=torch.long))
        gain, cost, who = torch.cat(gains), torch.cat(costs), torch.cat(owner)
        order = torch.argsort(gain, descending=True, stable=True)
        taken = torch.cumsum(cost[order], 0) <= budget - spent
        # Increments are taken in order until the first one that does not fit (each unit's gains
        # decrease, so a unit's taken increments are always its next ranks).
        stop = int(taken.logical_not().nonzero()[0]) if not bool(taken.all()) else order.numel()
        for i in who[order[:stop]].tolist():
            ranks[i] += 1
    return ranks


def v2_ranks(units: list[Unit], ratio: float) -> list[int]:
    """SVD-LLM V2-style: within each type, removed fraction inversely proportional to ``log`` of the uniform loss.

    Raises:
        GeodriftError: when a unit cannot keep rank 1.
    """
    ranks = [0] * len(units)
    for indices in _by_role(units).values():
        uniform = [_rank_within(units[i], ratio) for i in indices]
        losses = [units[i].loss(r) for i, r in zip(indices, uniform, strict=True)]
        if min(losses) <= 1.0:  # log L <= 0: the formula is undefined; keep the uniform ranks
            for i, r in zip(indices, uniform, strict=True):
                ranks[i] = r
            continue
        inverse = [1.0 / math.log(loss) for loss in losses]
        caps = [1.0 - units[i].per_rank() / units[i].dense_parameters() for i in indices]  # rank 1 at most removed
        scale = _scale_to_budget(inverse, caps, len(indices) * ratio)
        for i, inv, cap in zip(indices, inverse, caps, strict=True):
            removed = min(scale * inv, cap)
            ranks[i] = max(1, min(int((1.0 - removed) * units[i].dense_parameters() // units[i].per_rank()),
                                  units[i].max_rank))
    return ranks


def _scale_to_budget(weights: list[float], caps: list[float], total: float) -> float:
    # The c with sum_i min(c w_i, cap_i) = total (bisection; the sum is continuous and increasing in c):
    # a unit whose share would exceed its cap keeps rank 1 and the others take up the rest, so the
    # type's budget holds even when one loss is close to 1 (log L near 0).
    lo, hi = 0.0, 1.0
    while sum(min(hi * w, c) for w, c in zip(weights, caps, strict=True)) < total and hi < 1e12:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(min(mid * w, c) for w, c in zip(weights, caps, strict=True)) < total:
            lo = mid
        else:
            hi = mid
    return lo
