"""Rankings of decoder layers for pruning: which layer to remove first.

Every ranking is a *removability* score per layer (higher = removed earlier) or, for the two
search methods, the removal set for each n directly.

Data-free (weights only, through the one continuity path ``geodrift.continuity.measure`` and its
permutation nulls):

- ``geom-v1``: for each projection with a predicted space (Q, K, Gate, Up: input space ``v``; O,
  Down: output space ``u``; V has none and is left out), the adjacent-pair ``|cos|`` of the first
  singular vector in that space minus that pair's own permutation-null mean (the continuity a
  shared frame explains). A layer's score is the mean over those six projections and over its
  (one or two) adjacent pairs: a layer that continues its neighbours' frame is taken as the most
  redundant.
- ``geom-s2wa``: the same with the sigma^2-weighted alignment (Eq. 2, from the top-k triplets) per
  adjacent pair in the predicted space, minus its permutation-null mean.

From activations on calibration text (one forward pass that records every layer's input):

- ``block-influence`` (ShortGPT, Men et al. 2024): ``BI_l = 1 - mean_tokens cos(x_l, x_{l+1})``,
  ``x_l`` the residual stream entering layer ``l``; removability ``-BI``.
- ``angular`` (Gromov et al. 2024): for each n, the block of n consecutive layers ``l..l+n-1``
  minimising ``mean_tokens arccos(cos(x_l, x_{l+n})) / pi`` (all tokens, not only the last one
  as in the paper; no healing fine-tune).
- ``random``: a uniform permutation per seed (``torch.randperm``), the floor.
- ``greedy`` (SLEB, Song et al. 2024): remove, one at a time, the layer whose removal gives the
  lowest calibration perplexity. Candidates share the forward up to their own index (the current
  model's layer inputs are recorded once per step), so a candidate at depth ``i`` costs the layers
  after ``i`` plus the head.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import torch

from geodrift.compress.model import BATCH, LayerStack, kept_layers, nll_from_hidden
from geodrift.compress.table import GEOMETRY_S2WA, GEOMETRY_V1
from geodrift.continuity import MeasureSpec, Report, measure
from geodrift.weights import PREDICTED_SPACE


def geometry_report(model: LayerStack, spec: MeasureSpec) -> Report:
    """The continuity Report of the model's seven projections (the scan's numbers, without OV)."""
    return measure(model.weightset(origin="compress"), spec)


def geometry_scores(report: Report, n_layers: int) -> dict[str, list[float]]:
    """Both data-free removability scores per layer, from a continuity Report.

    Args:
        report: :func:`geometry_report`'s output (every layer of every projection).
        n_layers: depth L.

    Returns:
        ``{"geom-v1": [L floats], "geom-s2wa": [L floats]}``.
    """
    pair_v1 = torch.zeros(n_layers - 1, dtype=torch.float64)
    pair_wa = torch.zeros(n_layers - 1, dtype=torch.float64)
    roles = 0
    for r in report.roles:
        space = PREDICTED_SPACE.get(r.role)
        if space is None or r.layers != list(range(n_layers)):
            continue
        s = r.spaces[space]
        v1 = s.vectors[0]
        pair_v1 += torch.tensor(v1.per_pair, dtype=torch.float64) - torch.tensor(v1.per_pair_null_mean,
                                                                                  dtype=torch.float64)
        pair_wa += torch.tensor(s.sigma2_wa_per_pair, dtype=torch.float64) - s.sigma2_null_mean
        roles += 1
    if roles == 0:
        raise ValueError("continuity report holds no projection with a predicted space over every layer")
    return {GEOMETRY_V1: _layer_means(pair_v1 / roles), GEOMETRY_S2WA: _layer_means(pair_wa / roles)}


def geometry_floors(report: Report) -> list[dict[str, float | str]]:
    """Per projection scored: its predicted space's mean first-vector continuity with both floors.

    Returns:
        One dict per projection with a predicted space: ``role``, ``label``, ``space``, ``mean``
        (Eq. 1 over adjacent pairs), ``null_mean``, ``null_std`` (permutation null), ``random_floor``
        (``sqrt(2/(pi d))``), ``sigma2_wa`` and ``sigma2_null_mean``.
    """
    out: list[dict[str, float | str]] = []
    for r in report.roles:
        space = PREDICTED_SPACE.get(r.role)
        if space is None:
            continue
        s = r.spaces[space]
        v1 = s.vectors[0]
        out.append({"role": r.role, "label": r.label, "space": space, "mean": v1.mean, "null_mean": v1.null_mean,
                    "null_std": v1.null_std, "random_floor": v1.baseline, "sigma2_wa": s.sigma2_wa,
                    "sigma2_null_mean": s.sigma2_null_mean})
    return out


def _layer_means(pairs: torch.Tensor) -> list[float]:
    # pairs: (L-1,) per adjacent pair -> (L,) per layer, the mean of the pairs it belongs to.
    n = pairs.numel() + 1
    out = []
    for layer in range(n):
        near = [pairs[p] for p in (layer - 1, layer) if 0 <= p < n - 1]
        out.append(float(sum(near) / len(near)))
    return out


def _token_cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.flatten(0, -2).double(), b.flatten(0, -2).double(), dim=-1)


def block_influence(states: torch.Tensor) -> list[float]:
    """ShortGPT's BI per layer, ``1 - mean_tokens cos(x_l, x_{l+1})``, from :func:`~geodrift.compress.model.layer_states`."""
    return [float(1 - _token_cos(states[i], states[i + 1]).mean()) for i in range(states.shape[0] - 1)]


def angular_distances(states: torch.Tensor, n: int) -> list[float]:
    """Gromov et al.'s ``mean_tokens arccos(cos(x_l, x_{l+n})) / pi`` for every start ``l`` (``L - n + 1`` values)."""
    return [float(torch.arccos(_token_cos(states[i], states[i + n]).clamp(-1, 1)).mean() / math.pi)
            for i in range(states.shape[0] - n)]


def angular_block(states: torch.Tensor, n: int) -> list[int]:
    """The n consecutive layers with the smallest angular distance between their input and output."""
    d = angular_distances(states, n)
    start = min(range(len(d)), key=d.__getitem__)
    return list(range(start, start + n))


def random_ranking(n_layers: int, seed: int) -> list[int]:
    """Removal order of a uniform random permutation (``torch.Generator().manual_seed(seed)``)."""
    return torch.randperm(n_layers, generator=torch.Generator().manual_seed(seed)).tolist()


def order_from_scores(scores: list[float]) -> list[int]:
    """Layer indices by decreasing removability (ties: lower index first)."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


@torch.no_grad()
def greedy_order(model: LayerStack, windows: torch.Tensor, steps: int,
                 progress: Callable[[int, int], None] | None = None) -> tuple[list[int], list[float]]:
    """SLEB-style greedy removal order by calibration NLL.

    Args:
        model: the model (not modified).
        windows: ``(W, T + 1)`` calibration windows.
        steps: how many layers to remove.
        progress: called with ``(candidates done, candidates total)`` after each candidate.

    Returns:
        ``(order, nll)``: the removed layers in order and the calibration mean NLL after each step.
    """
    n_layers = model.n_layers
    total = sum(n_layers - s for s in range(steps))
    done = 0
    removed: list[int] = []
    history: list[float] = []
    targets = windows[:, 1:]
    inputs: dict[int, list[torch.Tensor]] = defaultdict(list)  # the current model's layer inputs, per batch

    def record(i: int, x: torch.Tensor) -> None:
        inputs[i].append(x)

    for _ in range(steps):
        kept = kept_layers(n_layers, removed)
        inputs.clear()
        for b in range(0, windows.shape[0], BATCH):
            model.run_layers(model.embed(windows[b: b + BATCH, :-1]), kept, record=record)
        best: tuple[float, int] | None = None
        for pos, cand in enumerate(kept):
            rest = kept[pos + 1:]
            nll = torch.cat([nll_from_hidden(model, model.run_layers(h, rest), targets[b * BATCH: b * BATCH + h.shape[0]])
                             for b, h in enumerate(inputs[cand])])
            value = float(nll.mean())
            if best is None or value < best[0]:
                best = (value, cand)
            done += 1
            if progress is not None:
                progress(done, total)
        assert best is not None
        removed.append(best[1])
        history.append(best[0])
    return removed, history
