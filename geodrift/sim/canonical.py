"""The simulators' Llama in the canonical view: the tracker's weights at the canonical point of their gauge orbit.

``TrackConfig(view="canonical")`` (``geodrift simulate transformer --view canonical``; refused for the
residual MLP and for ablations that change the group, :func:`geodrift.sim.config.check_canonical_spec`) makes the
training-time tracker and the final report measure :func:`canonical_weightset` instead of the raw
projections: the norm gains folded, the residual basis and every layer brought to the canonical point of
:mod:`geodrift.gauge.canonical` (the convention docs/verdicts.md states), so that every tracked number
is the same for any two models that differ by an exact gauge. The group is the one
:func:`geodrift.gauge.groups.sim_llama_family` derives for the default switches (SiLU-gated MLP,
softmax attention with RoPE, no activation on V, pre-norm residual blocks); other switches change it
and are refused.

Gradients are not recorded in the canonical view: a gauge moves a gradient by the inverse transpose of
what it does to the weight (``W -> A W B`` gives ``G -> A^-T G B^-T``), so the canonical map of the
weights is not the right one for them, and the raw gradient is not gauge-invariant either.

The residual-MLP simulator has no canonical view: its group (``SIM_MLP_GROUPS``: the activation's
commutant, e.g. positive diagonal x permutations for ReLU) acts on the one residual stream that every
block reads and writes, so a single element for the whole network (input layer, every block and the
readout together) would have to be fixed, which :mod:`geodrift.gauge.canonical` does not do.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from geodrift.gauge.canonical import PROJECTIONS, canonicalise
from geodrift.gauge.orbit import GaugeShape, layer_key
from geodrift.lm.llama import LlamaLM
from geodrift.sim.config import check_canonical_spec
from geodrift.weights import TRANSFORMER_ROLES, WeightSet

NAME_OF = dict(zip(TRANSFORMER_ROLES, PROJECTIONS, strict=True))


def check_canonical_model(model: LlamaLM) -> GaugeShape:
    """The gauge shape of a LlamaLM whose group the canonical view knows, or a one-line refusal.

    Raises:
        GeodriftError: a switch that changes the group (:data:`geodrift.sim.config.CANONICAL_SWITCHES`).

    Example:
        >>> check_canonical_model(LlamaLM(vocab_size=20, d_model=8, n_layers=2, n_heads=2, d_ff=12))
        GaugeShape(n_layers=2, n_heads=2, n_kv_heads=2, head_dim=4)
    """
    check_canonical_spec("transformer", SimpleNamespace(**model.switches))
    return GaugeShape.from_model(model)


def canonical_weightset(model: LlamaLM, origin: str = "simulator") -> WeightSet:
    """The model's seven projections per layer at their canonical point (float32, on the CPU, ``view="canonical"``).

    Args:
        model: the simulators' Llama with the default switches (:func:`check_canonical_model`).
        origin: names the WeightSet.

    Returns:
        A WeightSet with the keys of ``model.weightset()``; its numbers are the same for every exactly
        reparametrised copy of ``model`` (:func:`geodrift.gauge.orbit.random_gauge`).

    Raises:
        GeodriftError: see :func:`check_canonical_model`.

    Example:
        >>> m = LlamaLM(vocab_size=20, d_model=8, n_layers=2, n_heads=2, d_ff=12)
        >>> ws = canonical_weightset(m)
        >>> ws.view, ws[("mlp_up", 1)].shape
        ('canonical', torch.Size([12, 8]))
    """
    shape = check_canonical_model(model)
    state = {name: tensor.detach().to("cpu", torch.float64) for name, tensor in model.state_dict().items()}
    canonical = canonicalise(state, shape)
    tensors = {(role, layer): canonical[layer_key(layer, NAME_OF[role])].to(torch.float32)
               for role in TRANSFORMER_ROLES for layer in range(shape.n_layers)}
    return WeightSet.from_tensors(tensors, origin=origin, view="canonical")


__all__ = ["canonical_weightset", "check_canonical_model"]
