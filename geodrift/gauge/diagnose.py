"""Gauge diagnosis: how far each layer of a Llama-family checkpoint sits from its balanced (canonical) point.

Every continuous gauge of a layer (:mod:`geodrift.gauge.orbit`) moves scale from one factor to the
other while the function stays put; its orbit has one minimum-norm point, where both factors carry
the same scale. How far a layer sits from it is therefore a property of the *parametrisation*, not of
the function - and a large one says the checkpoint has been through such a map (AWQ and SmoothQuant
fold per-channel scales exactly this way), so that raw per-weight numbers (norms, singular vectors)
reflect that map as much as training. Per layer, every quantity a log-ratio in nats (0 = balanced):

- ``mlp``: ``log(||Up_j|| / ||Down_j||)`` over hidden units ``j`` (Up rows against Down columns; gains
  folded). Balanced: 0 for every unit.
- ``mlp_norm``, ``attn_norm``: ``log(|g_i| / ||W[:, i]||)`` over residual channels ``i``, ``g`` the block's
  RMSNorm gain and ``W`` its stacked readers ([Gate; Up] or [Q; K; V]): the scale SmoothQuant/AWQ move
  between a norm and the columns after it. Its spread, not its level, is the signal (the level depends
  on the init scale).
- ``qk``: ``log(||Q_p||_F / ||K_p||_F)`` per key-value head and RoPE pair ``p`` (``Q_p``: the pair's rows
  in every query head of the group). Balanced: 0.
- ``vo``: per key-value head, the balance of ``V`` against the stacked ``O`` columns of its query heads:
  ``||V V^T - Σ_h O_h^T O_h||_F / ||V V^T + Σ_h O_h^T O_h||_F`` (0 at the balanced factorisation, 1 at
  most), beside ``log(||V||_F / ||O_group||_F)``.

Each family gets its root mean square (the distance from the balanced point) and its standard
deviation (the spread, which a uniform rescaling does not change). :func:`fresh_reference` computes
the same for a freshly initialised layer of the same shape - the reference a scan prints beside
them; trained references (a simulator model with and without weight decay) are measured in
``benchmarks/bench_gauge_diagnosis.py``. None of these numbers is gauge-invariant: they measure the
gauge.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from geodrift.gauge.orbit import GaugeShape, StateDict, layer_key

FAMILIES = ("mlp", "mlp_norm", "attn_norm", "qk", "vo_log")
# A setting, not a measurement: a checkpoint is flagged "off balance" when the median over layers of its
# hidden-unit spread is at least this many times a fresh initialisation's (benchmarks/RESULTS_gauge_diagnosis.md
# measures where trained models and an AWQ-folded one fall).
FLAG_RATIO = 3.0
# Which exact gauges (geodrift.gauge.orbit.GENERATORS) move each family's numbers; none leaves all of them
# unchanged, and permutations move none (a spread over units, heads or pairs ignores their order).
MOVED_BY: dict[str, list[str]] = {"mlp": ["mlp_scale"], "mlp_norm": ["fold", "rotate"], "attn_norm": ["fold", "rotate"],
                                  "qk": ["qk"], "vo_log": ["vo"], "vo_gram": ["vo"]}


@dataclass
class Spread:
    """A family's log-imbalances in one layer: root mean square (distance from balance) and spread."""

    rms: float
    std: float
    n: int


@dataclass
class LayerGauge:
    """One layer's distance from its balanced point, per gauge family (see the module docstring)."""

    layer: int
    spreads: dict[str, Spread]
    vo_gram: float  # mean over KV heads of the relative V/O Gram imbalance (0 balanced, 1 at most)


@dataclass
class GaugeDiagnosis:
    """Per layer :class:`LayerGauge`, and the same numbers for a fresh initialisation of that shape."""

    model: str
    layers: list[LayerGauge]
    reference: LayerGauge
    reference_label: str
    mlp_median_ratio: float = float("nan")  # median over layers of the mlp spread / the reference's
    flagged: bool = False  # mlp_median_ratio >= flag_ratio: the hidden units were rescaled after training
    flag_ratio: float = FLAG_RATIO
    gauge: str = "varies"  # geodrift.gauge.status: these numbers measure the gauge
    moved_by: dict[str, list[str]] = field(default_factory=lambda: dict(MOVED_BY))
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (docs/output-schema.md, ``gauge_diagnosis``)."""
        return asdict(self)

    def spread(self, family: str) -> list[float]:
        """Per layer, ``family``'s standard deviation (one of :data:`FAMILIES`)."""
        return [x.spreads[family].std for x in self.layers]

    def ratios(self, family: str) -> list[float]:
        """Per layer, ``family``'s spread over the fresh-initialisation reference's."""
        ref = self.reference.spreads[family].std
        return [s / ref if ref > 0 else float("inf") for s in self.spread(family)]

    def judge(self) -> GaugeDiagnosis:
        """Set :attr:`mlp_median_ratio` and :attr:`flagged` from :attr:`layers` (call after adding layers)."""
        ratios = sorted(self.ratios("mlp"))
        mid = len(ratios) // 2
        self.mlp_median_ratio = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
        self.flagged = self.mlp_median_ratio >= self.flag_ratio
        return self

    def summary(self) -> str:
        """One line: the hidden-unit balance against the reference, and the flag."""
        verdict = "OFF BALANCE (units rescaled?)" if self.flagged else "balanced"
        return f"gauge: Up/Down spread {self.mlp_median_ratio:.1f}x fresh init (flag >= {self.flag_ratio:g}x): {verdict}"


def _spread(x: torch.Tensor) -> Spread:
    x = x.double().flatten()
    return Spread(float(x.pow(2).mean().sqrt()), float(x.std()) if x.numel() > 1 else 0.0, int(x.numel()))


def layer_gauge(sd: StateDict, shape: GaugeShape, layer: int) -> LayerGauge:
    """The balance of one layer of a Hugging Face-named Llama state dict (gains not yet folded).

    Args:
        sd: holds this layer's Q/K/V/O, Gate/Up/Down and both RMSNorm gains.
        shape: the model's :class:`~geodrift.gauge.orbit.GaugeShape`.
        layer: which layer.

    Returns:
        LayerGauge.

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> shape = GaugeShape(1, 2, 1, 4)
        >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=5, generator=torch.Generator().manual_seed(0))
        >>> sorted(layer_gauge(sd, shape, 0).spreads) == sorted(FAMILIES)
        True
    """
    w = {n: sd[layer_key(layer, n)].double() for n in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                         "up_proj", "down_proj")}
    g_attn = sd[layer_key(layer, "input_layernorm")].double()
    g_mlp = sd[layer_key(layer, "post_attention_layernorm")].double()
    tiny = 1e-300
    up = (w["up_proj"] * g_mlp).norm(dim=1)
    spreads = {"mlp": _spread(torch.log(up.clamp_min(tiny) / w["down_proj"].norm(dim=0).clamp_min(tiny)))}
    readers_mlp = torch.cat([w["gate_proj"], w["up_proj"]]).norm(dim=0)
    readers_attn = torch.cat([w["q_proj"], w["k_proj"], w["v_proj"]]).norm(dim=0)
    spreads["mlp_norm"] = _spread(torch.log(g_mlp.abs().clamp_min(tiny) / readers_mlp.clamp_min(tiny)))
    spreads["attn_norm"] = _spread(torch.log(g_attn.abs().clamp_min(tiny) / readers_attn.clamp_min(tiny)))
    q, k = w["q_proj"] * g_attn, w["k_proj"] * g_attn
    qk, vo_log, grams = [], [], []
    for g in range(shape.n_kv_heads):
        heads = range(g * shape.group, (g + 1) * shape.group)
        for p in range(shape.pairs):
            q_rows = torch.cat([shape.head_rows(h, pair=p) for h in heads])
            qk.append(torch.log(q[q_rows].norm() / k[shape.head_rows(g, pair=p)].norm().clamp_min(tiny)))
        v = w["v_proj"][shape.head_rows(g)] * g_attn
        o_cols = torch.cat([shape.head_rows(h) for h in heads])
        o = w["o_proj"][:, o_cols]
        o_gram = sum(o[:, i * shape.head_dim:(i + 1) * shape.head_dim].T @ o[:, i * shape.head_dim:(i + 1) * shape.head_dim]
                     for i in range(shape.group))
        assert isinstance(o_gram, torch.Tensor)
        v_gram = v @ v.T
        grams.append(float((v_gram - o_gram).norm() / (v_gram + o_gram).norm().clamp_min(tiny)))
        vo_log.append(torch.log(v.norm() / o.norm().clamp_min(tiny)))
    spreads["qk"] = _spread(torch.stack(qk))
    spreads["vo_log"] = _spread(torch.stack(vo_log))
    return LayerGauge(layer, spreads, sum(grams) / len(grams))


def fresh_reference(shape: GaugeShape, d_model: int, d_ff: int, seed: int = 0, std: float = 0.02) -> LayerGauge:
    """:func:`layer_gauge` of one freshly initialised layer of this shape (every weight ~ N(0, std²), gains 1,
    as :class:`~geodrift.lm.llama.LlamaLM` and Hugging Face initialise a Llama).

    Example:
        >>> ref = fresh_reference(GaugeShape(1, 4, 2, 8), d_model=32, d_ff=64)
        >>> ref.spreads["mlp_norm"].std < 0.2, ref.vo_gram < 1.0
        (True, True)
    """
    g = torch.Generator().manual_seed(seed)
    hd = shape.head_dim
    sizes = {"q_proj": (shape.n_heads * hd, d_model), "k_proj": (shape.n_kv_heads * hd, d_model),
             "v_proj": (shape.n_kv_heads * hd, d_model), "o_proj": (d_model, shape.n_heads * hd),
             "gate_proj": (d_ff, d_model), "up_proj": (d_ff, d_model), "down_proj": (d_model, d_ff)}
    sd = {layer_key(0, n): std * torch.randn(*s, generator=g, dtype=torch.float64) for n, s in sizes.items()}
    sd[layer_key(0, "input_layernorm")] = torch.ones(d_model, dtype=torch.float64)
    sd[layer_key(0, "post_attention_layernorm")] = torch.ones(d_model, dtype=torch.float64)
    return layer_gauge(sd, GaugeShape(1, shape.n_heads, shape.n_kv_heads, hd), 0)


def diagnose(layers: list[tuple[int, StateDict]], shape: GaugeShape, d_model: int, d_ff: int,
             model: str) -> GaugeDiagnosis:
    """Every given layer's :func:`layer_gauge` beside a fresh initialisation's.

    Args:
        layers: ``(layer, tensors)`` pairs; each dict holds that layer's tensors (HF names).
        shape, d_model, d_ff: the model's sizes.
        model: its label.

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> shape = GaugeShape(2, 2, 1, 4)
        >>> sd = toy_state_dict(shape, d_model=8, d_ff=6, vocab=5, generator=torch.Generator().manual_seed(0))
        >>> len(diagnose([(0, sd), (1, sd)], shape, 8, 6, "toy").layers)
        2
    """
    out = GaugeDiagnosis(model, [layer_gauge(sd, shape, layer) for layer, sd in layers],
                         fresh_reference(shape, d_model, d_ff), "fresh initialisation (N(0, 0.02²), gains 1)")
    return out.judge() if out.layers else out
