"""Gauge diagnosis: where each layer of a Llama-family checkpoint sits on the orbit of each generator of its group.

Every continuous generator (:data:`geodrift.architectures.GENERATORS`) moves scale or direction between
factors while the function stays put. Training leaves a checkpoint at some point of each orbit; a
quantisation method that folds scales or a rotation into the weights (AWQ, SmoothQuant, QuaRot) moves it
far along one, so that raw per-weight numbers (norms, singular vectors) reflect that map as much as
training. One number per generator and layer (:data:`FAMILIES`), each in nats:

- ``mlp`` (``mlp_scale``): the spread (std) over hidden units of ``log(||Up_j|| / ||Down_j||)`` (gains folded);
- ``attn_in``, ``mlp_in`` (``fold``: scales between a norm gain and the columns that read it): the largest
  ``|log(c_i / median c)|`` over residual channels, ``c_i`` the norm of column ``i`` of the *raw* stacked readers
  ([Q; K; V], [Gate; Up]); SmoothQuant and AWQ push activation outliers into these columns;
- ``qk`` (``qk_rope``): the spread over KV heads and RoPE pairs of ``log(||Q_p|| / ||K_p||)``;
- ``vo`` (``vo``): the mean over KV heads of ``log((||V||^2 + ||O_group||^2) / (2 ||O_group V||_*))``: how much
  norm the V/O factorisation carries beyond its balanced (minimum-norm) point, where it is 0;
- ``residual`` (``rotate``): the spread over residual channels of ``log`` of the folded readers' column norms:
  trained models have a privileged residual basis (outlier channels); a rotation of the stream (QuaRot's
  Hadamard) spreads every channel over all and removes it, so here a value *below* the band is off.

Each is compared with :data:`REFERENCE`, the band that trained models span (measured by
``benchmarks/bench_gauge_diagnosis.py``: the transformer simulator trained with and without weight decay, and
the embedded SmolLM2-135M): a family is flagged when its median over layers lies beyond the band by more than
:data:`MARGIN` (above ``MARGIN * high``, or for ``residual`` below ``low / MARGIN``). None of these numbers is
gauge-invariant: they measure the gauge.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from geodrift.gauge.orbit import GaugeShape, StateDict, layer_key

FAMILIES = ("mlp", "attn_in", "mlp_in", "qk", "vo", "residual")
# The generator (geodrift.architectures.GENERATORS) whose orbit each family measures.
GENERATOR_OF: dict[str, str] = {"mlp": "mlp_scale", "attn_in": "fold", "mlp_in": "fold", "qk": "qk_rope", "vo": "vo",
                                "residual": "rotate"}
LOW_IS_OFF = frozenset({"residual"})  # a rotation removes the privileged basis: off balance below the band
# The band of trained models, median over layers of each family (benchmarks/RESULTS_gauge_diagnosis.md:
# `python benchmarks/bench_gauge_diagnosis.py`, the rows "simulator `tiny` ..., weight decay 0.1 / 0" and
# "SmolLM2-135M (embedded)"): a calibration, re-measured by that command.
REFERENCE: dict[str, tuple[float, float]] = {
    "mlp": (0.062, 0.085), "attn_in": (0.332, 0.421), "mlp_in": (0.191, 1.713), "qk": (0.083, 0.143),
    "vo": (0.037, 0.994), "residual": (0.105, 0.328),
}
REFERENCE_LABEL = ("trained: simulator `tiny` (weight decay 0.1 and 0, benchmarks/bench_gauge_diagnosis.py) and the "
                   "embedded SmolLM2-135M")
MARGIN = 1.5  # a setting: how far beyond the trained band a family must lie to be flagged
# Which exact gauges move each family's numbers; permutations move none (a spread or maximum over units, heads,
# pairs or channels ignores their order).
MOVED_BY: dict[str, list[str]] = {"mlp": ["mlp_scale"], "attn_in": ["fold", "rotate", "vo", "qk_rope"],
                                  "mlp_in": ["fold", "rotate", "mlp_scale"], "qk": ["qk_rope"], "vo": ["vo"],
                                  "residual": ["rotate", "vo", "qk_rope", "mlp_scale"]}
_TINY = 1e-300


@dataclass
class LayerGauge:
    """One layer's position on each generator's orbit (see the module docstring), nats."""

    layer: int
    values: dict[str, float]


@dataclass
class GaugeDiagnosis:
    """Per layer :class:`LayerGauge`; per family the median over layers against the trained band."""

    model: str
    layers: list[LayerGauge]
    reference: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(REFERENCE))
    reference_label: str = REFERENCE_LABEL
    medians: dict[str, float] = field(default_factory=dict)
    flagged_families: list[str] = field(default_factory=list)
    flagged: bool = False
    margin: float = MARGIN
    gauge: str = "varies"  # geodrift.gauge.status: these numbers measure the gauge
    moved_by: dict[str, list[str]] = field(default_factory=lambda: dict(MOVED_BY))
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (docs/output-schema.md, ``gauge_diagnosis``)."""
        return asdict(self)

    def values(self, family: str) -> list[float]:
        """Per layer, ``family``'s value (one of :data:`FAMILIES`)."""
        return [x.values[family] for x in self.layers]

    def off(self, family: str) -> bool:
        """Whether ``family``'s median lies beyond the trained band by more than the margin."""
        low, high = self.reference[family]
        value = self.medians[family]
        return value < low / self.margin if family in LOW_IS_OFF else value > high * self.margin

    def judge(self) -> GaugeDiagnosis:
        """Set :attr:`medians`, :attr:`flagged_families` and :attr:`flagged` (call after adding layers)."""
        self.medians = {f: statistics.median(self.values(f)) for f in FAMILIES}
        self.flagged_families = [f for f in FAMILIES if self.off(f)]
        self.flagged = bool(self.flagged_families)
        return self

    def summary(self) -> str:
        """One line: each flagged family with the generator that moved it, or ``balanced``."""
        if not self.flagged:
            return f"gauge: every generator within {self.margin:g}x of trained models' band: balanced"
        parts = []
        for f in self.flagged_families:
            low, high = self.reference[f]
            edge = f"below {low / self.margin:.3g}" if f in LOW_IS_OFF else f"above {high * self.margin:.3g}"
            parts.append(f"{f} {self.medians[f]:.3g} ({edge}: {GENERATOR_OF[f]})")
        return "gauge: OFF BALANCE - " + "; ".join(parts) + " (a fold or rotation applied after training?)"


def _max_deviation(columns: torch.Tensor) -> float:
    logs = columns.clamp_min(_TINY).log()
    return float((logs - logs.median()).abs().max())


def layer_gauge(sd: StateDict, shape: GaugeShape, layer: int) -> LayerGauge:
    """One layer of a Hugging Face-named Llama state dict (gains not yet folded): its :data:`FAMILIES` values.

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> shape = GaugeShape(1, 2, 1, 4)
        >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=5, generator=torch.Generator().manual_seed(0))
        >>> sorted(layer_gauge(sd, shape, 0).values) == sorted(FAMILIES)
        True
    """
    w = {n: sd[layer_key(layer, n)].double() for n in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                         "up_proj", "down_proj")}
    g_attn = sd[layer_key(layer, "input_layernorm")].double()
    g_mlp = sd[layer_key(layer, "post_attention_layernorm")].double()
    values: dict[str, float] = {}
    up = (w["up_proj"] * g_mlp).norm(dim=1)
    values["mlp"] = float(torch.log(up.clamp_min(_TINY) / w["down_proj"].norm(dim=0).clamp_min(_TINY)).std())
    attn_raw = torch.cat([w["q_proj"], w["k_proj"], w["v_proj"]])
    mlp_raw = torch.cat([w["gate_proj"], w["up_proj"]])
    values["attn_in"], values["mlp_in"] = _max_deviation(attn_raw.norm(dim=0)), _max_deviation(mlp_raw.norm(dim=0))
    folded = torch.cat([attn_raw * g_attn, mlp_raw * g_mlp]).norm(dim=0)
    values["residual"] = float(folded.clamp_min(_TINY).log().std())
    q, k, v = w["q_proj"] * g_attn, w["k_proj"] * g_attn, w["v_proj"] * g_attn
    hd, group, half = shape.head_dim, shape.group, shape.pairs
    d = q.shape[1]
    q_pairs = q.reshape(shape.n_kv_heads, group, 2, half, d).permute(0, 3, 1, 2, 4).reshape(shape.n_kv_heads, half, -1)
    k_pairs = k.reshape(shape.n_kv_heads, 2, half, d).permute(0, 2, 1, 3).reshape(shape.n_kv_heads, half, -1)
    values["qk"] = float(torch.log(q_pairs.norm(dim=-1).clamp_min(_TINY) / k_pairs.norm(dim=-1).clamp_min(_TINY))
                         .flatten().std())
    excess = []
    for j in range(shape.n_kv_heads):
        v_j = v[j * hd:(j + 1) * hd]
        o_j = torch.cat([w["o_proj"][:, h * hd:(h + 1) * hd] for h in range(j * group, (j + 1) * group)])
        # ||O V||_* from the triangular factors (hd x hd): O = Q_o R_o, V^T = Q_v R_v, so O V = Q_o (R_o R_v^T) Q_v^T
        nuclear = float(torch.linalg.svdvals(torch.linalg.qr(o_j).R @ torch.linalg.qr(v_j.T).R.T).sum())
        energy = float(v_j.pow(2).sum() + o_j.pow(2).sum())
        # An all-zero head (pruned) is balanced: no map of the orbit moves it (0 = 2 * 0), excess 0.
        excess.append(math.log(energy / max(2 * nuclear, _TINY)) if energy > 0 else 0.0)
    values["vo"] = sum(excess) / len(excess)
    return LayerGauge(layer, values)


def diagnose(layers: list[tuple[int, StateDict]], shape: GaugeShape, model: str) -> GaugeDiagnosis:
    """Every given layer's :func:`layer_gauge`, judged against the trained band.

    Args:
        layers: ``(layer, tensors)`` pairs; each dict holds that layer's tensors (HF names).
        shape: the model's heads.
        model: its label.

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> shape = GaugeShape(2, 2, 1, 4)
        >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=5, generator=torch.Generator().manual_seed(0))
        >>> len(diagnose([(0, sd), (1, sd)], shape, "toy").layers)
        2
    """
    out = GaugeDiagnosis(model, [layer_gauge(sd, shape, layer) for layer, sd in layers])
    return out.judge() if out.layers else out
