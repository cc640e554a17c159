"""Which space should a shared basis live in? Per projection, at equal rank and at equal parameters, without a forward pass.

For each projection and each group of adjacent layers (the groups of ``--group-size``), with the
whitened error of :mod:`geodrift.compress.lowrank` (input-space coefficients refit per layer) and
every error divided by the group's whitened energy ``sum_l tr(W_l C_l W_l^T)``:

- **equal rank** (the bookkeeping removed): the *sharing penalty* ``err_shared(r) - err_private(r)``,
  every layer at the same rank ``r`` (the uniform private rank at the ratio), in input and in
  output space. Its ceiling is the *unrelated* penalty: the same group with the weights of every
  layer but the first rotated by an independent Haar-random orthogonal matrix in that space
  (output: ``Q W``; input: ``W Q^T``), the calibration moments left as they are - so the layers
  still read the same inputs, and only the weights' alignment is gone. (Rotating the moments too
  would also remove the alignment that the shared input distribution alone gives: on a random
  model, input-space sharing then looks 10-50 % "aligned".) The *alignment* of a group,
  ``1 - penalty / unrelated penalty`` (one rotation per group), is 0 for weights that share nothing beyond their inputs
  and 1 for layers that share their whole rank-r subspace; it is comparable across spaces of
  different sizes. The same over random (non-adjacent) groups is reported beside it: adjacent
  groups ahead of random ones is what a depth path predicts, equal alignment what a shared frame
  predicts.
- **equal parameters**: ``err_shared(r_s) - err_private(r_p)``, each space at the largest rank its
  parameters allow (a shared basis buys more rank per parameter, most on the wide side).

Verdicts (paired over the groups: a difference counts when ``|mean| > t SE``, ``t`` the two-sided
95 % Student-t quantile with ``groups - 1`` degrees of freedom - 2.14 for SmolLM2's 15 pairs - so that
the false-positive rate is 5 % whatever the number of groups): for Q, K, Gate, Up
(predicted input) and O, Down (predicted output), ``holds`` when the predicted space is ahead of the
other (higher alignment at equal rank; lower error at equal parameters), ``fails`` when behind,
``tie`` otherwise; for V (predicted neither), ``holds`` when in neither space sharing is ahead
(alignment above 0 at equal rank; below private at equal parameters), ``fails`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from geodrift.compress import allocate, grouping
from geodrift.compress.lowrank import Unit, input_unit, output_unit, private_unit, whitened_error
from geodrift.compress.methods import Compressor
from geodrift.continuity.verdicts import Verdict
from geodrift.weights import ROLE_LABELS, TRANSFORMER_ROLES

PREDICTED = {"attn_q": "input", "attn_k": "input", "mlp_gate": "input", "mlp_up": "input",
             "attn_o": "output", "mlp_down": "output", "attn_v": None}
EQUAL_RANK = ("at equal rank r per layer, paired over the adjacent groups: the predicted space's alignment "
              "(1 - sharing penalty / penalty of layers with rotated weights) exceeds the other space's by more than "
              "t SE (holds), falls short by more than t SE (fails), else tie, t the 95 % two-sided Student-t quantile "
              "(groups - 1 df); V: holds when neither space's alignment is above 0 by more than t SE")
EQUAL_PARAMS = ("at equal parameters, paired over the adjacent groups: the predicted space's relative whitened "
                "error is below the other space's by more than t SE (holds), above by more than t SE (fails), "
                "else tie (t as above); V: holds when neither shared space is below private by more than t SE")


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (``std / sqrt(n)``; NaN for one value).

    Example:
        >>> m, se = mean_se([1.0, 2.0, 3.0])
        >>> m, round(se, 4)
        (2.0, 0.5774)
    """
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


@dataclass
class SpaceSharing:
    """One projection, one space: per-group values and their summaries (all relative to the group's energy).

    Attributes:
        penalty: equal-rank sharing penalty per adjacent group; unrelated: the same for rotated weights.
        alignment: ``1 - penalty / unrelated`` per group; alignment_random: over random groups, each
            divided by the mean unrelated penalty of the adjacent groups (random groups get no rotation of their own).
        rank_equal_params: the shared rank at equal parameters; excess: ``err_shared(r_s) - err_private(r_p)`` per group.
    """

    penalty: list[float]
    unrelated: list[float]
    alignment: list[float]
    alignment_random: list[float]
    rank_equal_params: int
    excess: list[float]


@dataclass
class ProjectionSharing:
    """One projection's sharing evidence in both spaces and its two verdicts."""

    role: str
    label: str
    predicted: str
    rank: int
    spaces: dict[str, SpaceSharing]
    verdicts: list[Verdict]


def _haar(n: int, generator: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def _shared_error(unit: Unit, r: int, Ws: list[torch.Tensor], Cs: list[torch.Tensor]) -> float:
    # The group's whitened error with the unit's basis at rank r (input space: each layer's coefficients refit).
    if unit.space == "output":
        # Unweighted output unit (every one here): sum_l tr((I - B B^T) W_l C_l W_l^T) = tr((I - B_r B_r^T) M), M =
        # sum_l W_l C_l W_l^T, is the sum of M's eigenvalues beyond r - its spectrum alone, no factors or products.
        return unit.loss(r)
    factors = unit.factors(r, Cs)
    return sum(whitened_error(W, factors[layer][0] @ factors[layer][1], C)
               for layer, W, C in zip(unit.layers, Ws, Cs, strict=True))


def sharing_evidence(comp: Compressor, ratio: float, seed: int = 0) -> list[ProjectionSharing]:
    """Both budgets for every projection at ``ratio`` (see the module docstring).

    Args:
        comp: the compressor of one calibration set (its units are reused).
        ratio: fraction of parameters removed that sets the ranks.
        seed: seed of the rotations and of the random groups.
    """
    groups = [g for g in grouping.adjacent_groups(comp.n_layers, comp.group_size) if len(g) > 1]
    out = []
    for index, role in enumerate(TRANSFORMER_ROLES):
        gen = torch.Generator().manual_seed(seed * 7919 + index)
        r = allocate.uniform_ranks([comp.private(role, 0)], ratio)[0]
        random_groups = [g for g in grouping.random_groups(comp.n_layers, comp.group_size, seed * 7919 + index)
                         if len(g) > 1]
        spaces = {}
        for space in ("input", "output"):
            r_s = allocate.uniform_ranks([comp.unit(role, groups[0], space)], ratio)[0]
            penalty, unrelated, excess = [], [], []
            for g in groups:
                Ws = [comp.weights[(role, layer)] for layer in g]
                Cs = [comp.moments.of(role, layer) for layer in g]
                energy = sum(comp.energy[(role, layer)] for layer in g)
                private_r = sum(comp.private(role, layer).loss(r) for layer in g)
                unit = comp.unit(role, g, space, vectors=space == "input")  # output: its spectrum suffices
                penalty.append((_shared_error(unit, r, Ws, Cs) - private_r) / energy)
                excess.append((_shared_error(unit, r_s, Ws, Cs) - private_r) / energy)
                rotated = [Ws[0]] + [(_haar(W.shape[0], gen) @ W.double() if space == "output"
                                      else W.double() @ _haar(W.shape[1], gen).T).float() for W in Ws[1:]]
                if space == "output":
                    # Q W C W^T Q^T has W C W^T's eigenvalues: the rotated layers' private losses are their own, and
                    # the shared error is the rotated unit's spectrum beyond r (eigenvalues only).
                    alone = private_r
                    shared = output_unit(role, g, rotated, Cs, vectors=False)
                else:
                    alone = comp.private(role, g[0]).loss(r) + sum(
                        private_unit(role, layer, W, C).loss(r)
                        for layer, W, C in zip(g[1:], rotated[1:], Cs[1:], strict=True))
                    shared = input_unit(role, g, rotated, Cs)
                unrelated.append((_shared_error(shared, r, rotated, Cs) - alone) / energy)
            alignment = [1 - p / u if u > 0 else float("nan") for p, u in zip(penalty, unrelated, strict=True)]
            mean_unrelated = sum(unrelated) / len(unrelated)
            random_alignment = []
            for g in random_groups:
                Ws = [comp.weights[(role, layer)] for layer in g]
                Cs = [comp.moments.of(role, layer) for layer in g]
                energy = sum(comp.energy[(role, layer)] for layer in g)
                private_r = sum(comp.private(role, layer).loss(r) for layer in g)
                p = (_shared_error(comp.unit(role, g, space, vectors=space == "input"), r, Ws, Cs) - private_r) / energy
                random_alignment.append(1 - p / mean_unrelated if mean_unrelated > 0 else float("nan"))
            spaces[space] = SpaceSharing(penalty, unrelated, alignment, random_alignment, r_s, excess)
        predicted = PREDICTED[role]
        out.append(ProjectionSharing(role, ROLE_LABELS[role], predicted or "neither", r, spaces,
                                     _verdicts(role, predicted, spaces, r, ratio)))
    return out


def t_bound(n: int) -> float:
    """The two-sided 95 % Student-t quantile for a mean over ``n`` paired values (``n - 1`` df; inf below 2).

    Example:
        >>> round(t_bound(15), 3)
        2.145
    """
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1)) if n > 1 else float("inf")


def _verdicts(role: str, predicted: str | None, spaces: dict[str, SpaceSharing], r: int, ratio: float) -> list[Verdict]:
    label = ROLE_LABELS[role]
    k = t_bound(len(spaces["input"].penalty))
    if predicted is None:
        gains = {s: mean_se(spaces[s].alignment) for s in spaces}
        shared_wins = any(m > k * se for m, se in gains.values())
        rank_v = Verdict(f"{label}: no space offers a shared basis (equal rank {r})", EQUAL_RANK,
                         "; ".join(f"{s} alignment {m:+.3f} ± {se:.3f}" for s, (m, se) in gains.items()),
                         "fails" if shared_wins else "holds")
        excess = {s: mean_se(spaces[s].excess) for s in spaces}
        params_v = Verdict(f"{label}: sharing does not beat private at equal parameters ({ratio:.0%} removed)",
                           EQUAL_PARAMS, "; ".join(f"{s} - private {m:+.4f} ± {se:.4f}" for s, (m, se) in excess.items()),
                           "fails" if any(m < -k * se for m, se in excess.values()) else "holds")
        return [rank_v, params_v]
    other = "output" if predicted == "input" else "input"
    a = [x - y for x, y in zip(spaces[predicted].alignment, spaces[other].alignment, strict=True)]
    m, se = mean_se(a)
    rank_v = Verdict(f"{label}: a shared basis belongs in {predicted} space (equal rank {r})", EQUAL_RANK,
                     f"alignment {predicted} - {other} {m:+.3f} ± {se:.3f}",
                     "holds" if m > k * se else "fails" if m < -k * se else "tie")
    e = [x - y for x, y in zip(spaces[predicted].excess, spaces[other].excess, strict=True)]
    m, se = mean_se(e)
    params_v = Verdict(f"{label}: a shared basis belongs in {predicted} space (equal parameters, {ratio:.0%} removed)",
                       EQUAL_PARAMS, f"relative error {predicted} - {other} {m:+.4f} ± {se:.4f} (ranks "
                       f"{spaces[predicted].rank_equal_params} vs {spaces[other].rank_equal_params})",
                       "holds" if m < -k * se else "fails" if m > k * se else "tie")
    return [rank_v, params_v]
