"""How far the maps that alignment recovered are from the identity: ``geodrift merge``'s one-gauge verdict.

Two checkpoints sit in one gauge when the maps that bring one into the other's gauge are the identity. Between
two fine-tunes of one base the fit still finds maps, but near the identity: they absorb the share of the
fine-tunes' difference that lies along the gauge orbit, which for a short fine-tune can be a quarter of the weight
distance (benchmarks/RESULTS_merge.md), so the
weight distance removed by alignment does not tell the two cases apart. The maps themselves do. From ``B`` as
read and ``B`` aligned, :func:`map_deviation` measures

- **discrete maps**, per layer: the share of hidden units matched to the unit of the same index and the share
  of key-value heads kept (the lowest over layers), the share of units matched with a sign flip (the highest);
- **continuous maps**, each as the RMS deviation from the identity of the map fitted between ``B`` (gains folded)
  and the aligned ``B``, ``||M - I||_F / sqrt(n)``: the **residual rotation** (orthogonal Procrustes on the
  embedding and head rows, which no other map moves), each key-value head's **V/O map** and **Q/K map** (least
  squares on its V rows and K rows once the rotation is undone; the largest over heads and layers) and the
  **Up/Down scales** (per unit, the median over units of ``|log |s||``; the largest over layers).

The verdict (:func:`one_gauge`): every discrete map keeps at least :data:`KEEP_SHARE` of its units, heads and
signs, and every continuous map lies within :data:`MAP_TOLERANCE` of the identity. Both thresholds follow from
what the maps are, not from the pairs they are checked on:

- a gauge permutation relabels almost every unit (a random one keeps ``1/n`` of them), a fine-tune relabels
  none; :data:`KEEP_SHARE` = 1/2 asks for a majority kept;
- :data:`MAP_TOLERANCE` = 0.1: a map within 0.1 (RMS) of the identity moves each weight by about a tenth of
  itself. For a weight average (``linear``, ``slerp``) the average of a model and its image under such a map
  ``g = I + e`` differs from the model's own midpoint along the orbit only at second order, ``|e|^2 / 8``, about
  1e-3 relative (tests/test_merge_one_gauge.py: a map 0.02 from the identity left in place moves a linear merge by
  less than 0.005 nats). The gauges checkpoints arrive with lie far outside it: a random rotation of the stream and
  a Hadamard rotation sit near ``sqrt(2)``, a permutation keeps almost no unit, AWQ's scales spread over a factor of
  several. The maps between fine-tunes of one base (the share of their update that lies along the orbit) lie an
  order of magnitude inside it.

What it does not cover: for task-vector methods (``task-arithmetic``, ``ties``, ``dare``) a genuine map inside the
tolerance is not small against the task vector, and leaving it in place changes the merge at first order (the test
Llama, a map 0.02 from the identity under ``ties``: 0.06 nats); ``--align on`` repairs a checkpoint known to carry
one. A fine-tune's own near-identity maps are its update, and ``--align auto`` merges that update as trained.

benchmarks/RESULTS_merge_one_gauge.md measures every statistic on real pairs against these thresholds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from scipy.linalg import orthogonal_procrustes

from geodrift.gauge.align import AlignmentReport
from geodrift.gauge.orbit import EMBED, FINAL_NORM, LM_HEAD, GaugeShape, StateDict, layer_key

KEEP_SHARE = 0.5
MAP_TOLERANCE = 0.1


@dataclass
class MapDeviation:
    """How far the recovered maps are from the identity (the module docstring's statistics).

    Attributes:
        units_kept: the lowest share over layers of hidden units matched to the unit of the same index.
        heads_kept: the lowest share over layers of key-value heads matched to the head of the same index.
        sign_flips: the highest share over layers of hidden units matched with their Up row and Down column negated.
        rotation: ``||R - I||_F / sqrt(d)`` of the residual rotation.
        vo, qk: the largest ``||N - I||_F / sqrt(head_dim)`` over key-value heads and layers of the V/O, Q/K maps.
        updown: the largest over layers of the median over units of ``|log |s||`` of the Up/Down scales.
    """

    units_kept: float
    heads_kept: float
    sign_flips: float
    rotation: float
    vo: float
    qk: float
    updown: float

    @property
    def largest_map(self) -> float:
        """The largest continuous deviation (nan ones left out)."""
        values = [v for v in (self.rotation, self.vo, self.qk, self.updown) if v == v]
        return max(values, default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def one_gauge(dev: MapDeviation) -> bool:
    """Whether the recovered maps are the identity within the module's thresholds.

    Example:
        >>> one_gauge(MapDeviation(1.0, 1.0, 0.0, 0.004, 0.01, 0.02, 0.003))
        True
        >>> one_gauge(MapDeviation(1.0, 1.0, 0.0, 1.41, 0.01, 0.02, 0.003))
        False
    """
    return (dev.units_kept >= KEEP_SHARE and dev.heads_kept >= KEEP_SHARE and dev.sign_flips <= 1 - KEEP_SHARE
            and dev.largest_map <= MAP_TOLERANCE)


def map_deviation(other: StateDict, aligned: StateDict, report: AlignmentReport, shape: GaugeShape) -> MapDeviation:
    """The deviations from the identity of the maps that took ``other`` to ``aligned``.

    Args:
        other: B as read (gains not folded; only read).
        aligned: B folded and aligned (:func:`geodrift.merging.frame.check_pair`'s first result).
        report: the alignment's report (its per-layer matches).
        shape: their gauge shape.

    Example:
        >>> from geodrift.gauge.align import align
        >>> from geodrift.gauge.orbit import random_gauge, toy_state_dict
        >>> s = GaugeShape(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=4)
        >>> sd = toy_state_dict(s, d_model=16, d_ff=24, vocab=40, generator=torch.Generator().manual_seed(0))
        >>> _, same, rep = align(sd, sd, s)
        >>> one_gauge(map_deviation(sd, same, rep, s))
        True
        >>> moved = random_gauge(sd, s, torch.Generator().manual_seed(1))
        >>> _, back, rep = align(sd, moved, s)
        >>> dev = map_deviation(moved, back, rep, s)
        >>> one_gauge(dev), dev.rotation > 1
        (False, True)
    """
    layers = report.layers
    units = min((x.identity_share for x in layers), default=1.0)
    heads = min((x.heads_kept for x in layers), default=1.0)
    flips = max((x.sign_flip_share for x in layers), default=0.0)
    embed = other[EMBED].double()
    head = other.get(LM_HEAD, other[EMBED]).double() * other[FINAL_NORM].double().reshape(1, -1)
    source = torch.cat([embed, head])
    target = torch.cat([aligned[EMBED].double(), aligned[LM_HEAD].double()])
    q, _ = orthogonal_procrustes(source.numpy(), target.numpy())  # source @ q ~ target: q = R^T
    turn = torch.from_numpy(q)
    eye = torch.eye(turn.shape[0], dtype=turn.dtype)
    rotation = float(torch.linalg.matrix_norm(turn - eye)) / turn.shape[0] ** 0.5
    vo = qk = updown = float("nan")
    for layer in range(shape.n_layers):
        for name, attr in (("v_proj", "vo"), ("k_proj", "qk")):
            before, after = _folded_turned(other, layer, name, "input_layernorm", turn), aligned[layer_key(layer, name)].double()
            for kv in range(shape.n_kv_heads):
                rows = slice(kv * shape.head_dim, (kv + 1) * shape.head_dim)
                found = _head_map_deviation(before[rows], after[rows])
                if attr == "vo":
                    vo = _largest(vo, found)
                else:
                    qk = _largest(qk, found)
        before, after = _folded_turned(other, layer, "up_proj", "post_attention_layernorm", turn), aligned[layer_key(layer, "up_proj")].double()
        scale = (after * before).sum(dim=1) / (before * before).sum(dim=1).clamp_min(1e-300)
        logs = scale.abs().clamp_min(1e-300).log().abs()
        updown = _largest(updown, float(logs.median()))
    return MapDeviation(float(units), float(heads), float(flips), rotation, vo, qk, updown)


def _folded_turned(other: StateDict, layer: int, name: str, norm: str, turn: torch.Tensor) -> torch.Tensor:
    # B's projection with its norm gain folded and the residual rotation applied (readers: W -> W R^T = W turn)
    gain = other[layer_key(layer, norm)].double().reshape(1, -1)
    return (other[layer_key(layer, name)].double() * gain) @ turn


def _head_map_deviation(before: torch.Tensor, after: torch.Tensor) -> float:
    # The map N with N before ~ after (least squares), ||N - I||_F / sqrt(n); nan for rows that fix no map.
    s = torch.linalg.svdvals(before)
    if float(s[0]) == 0 or float(s[-1]) <= 1e-8 * float(s[0]):
        return float("nan")
    found = torch.linalg.lstsq(before.T, after.T).solution.T
    eye = torch.eye(found.shape[0], dtype=found.dtype)
    return float(torch.linalg.matrix_norm(found - eye)) / found.shape[0] ** 0.5


def _largest(current: float, value: float) -> float:
    if value != value:
        return current
    return value if current != current else max(current, value)


__all__ = ["KEEP_SHARE", "MAP_TOLERANCE", "MapDeviation", "map_deviation", "one_gauge"]
