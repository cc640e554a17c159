"""The simulators' Llama in the canonical view: the tracker's weights at the canonical point of their gauge orbit.

``TrackConfig(view="canonical")`` (``geodrift simulate transformer --view canonical``; refused for the
residual MLP and for ablations that change the group: ``Simulator.check_track_view``) makes the
training-time tracker and the final report measure canonical weights instead of the raw projections:
the norm gains folded and every layer at the canonical point of :mod:`geodrift.gauge.canonical` (the
convention docs/verdicts.md states; no residual basis: the scan's canonical view, number for number), so that
every tracked number is the same for any two models that differ by an exact gauge. The group is the one
:func:`geodrift.gauge.groups.sim_llama_family` derives for the default switches (SiLU-gated MLP,
softmax attention with RoPE, no activation on V, pre-norm residual blocks); other switches change it
and are refused.

Across tracked steps the gauge is fixed **relative to the first tracked step** (:class:`CanonicalFrame`), as
``geodrift drift`` fixes it relative to checkpoint 0 (:mod:`geodrift.scanner.series_gauge`): the first step's
canonical weights are the reference, and every later step's canonical weights are aligned to them by orthogonal
maps (:func:`geodrift.gauge.align_canonical.align_canonical_layer`), so that the tracked rotation from the first
step (``rotation_deg``) moves continuously from step to step, as the raw view's does; canonicalising each step on
its own would let the canonical tie-breaks jump.

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

from geodrift.gauge.align import nearest_rotation
from geodrift.gauge.align_canonical import align_canonical_layer
from geodrift.gauge.align_layer import gate_peaks
from geodrift.gauge.canonical import PROJECTIONS, canonical_layer
from geodrift.gauge.orbit import EMBED, LM_HEAD, GaugeShape, fold_gains, layer_key
from geodrift.lm.llama import LlamaLM
from geodrift.sim.config import check_canonical_llama
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
    check_canonical_llama(SimpleNamespace(**model.switches))
    return GaugeShape.from_model(model)


def canonical_layers(model: LlamaLM, shape: GaugeShape) -> tuple[dict[int, dict[str, torch.Tensor]], torch.Tensor,
                                                                   torch.Tensor]:
    """``(canonical layers, embedding, folded head)`` of the model: every layer folded and canonical (float32, signed
    against the embedding's mean), and the token rows (float64) a later step is aligned by."""
    state = fold_gains({name: tensor.detach().to("cpu", torch.float64) for name, tensor in model.state_dict().items()},
                       shape)
    reference = state[EMBED].mean(0)
    layers = {layer: {name: value.to(torch.float32) for name, value in canonical_layer(
        {name: state[layer_key(layer, name)] for name in PROJECTIONS}, shape, reference).items()}
        for layer in range(shape.n_layers)}
    return layers, state[EMBED], state[LM_HEAD]


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
    layers, _, _ = canonical_layers(model, shape)
    return _weightset(layers, origin)


class CanonicalFrame:
    """The tracker's canonical view across steps: the first call's canonical weights are the reference, every later
    call's are aligned to them (see the module docstring).

    Example:
        >>> m = LlamaLM(vocab_size=40, d_model=8, n_layers=2, n_heads=2, d_ff=12)
        >>> frame = CanonicalFrame(m)
        >>> frame.weightset(m).before_rotation is None, frame.weightset(m).before_rotation is not None
        (True, True)
    """

    def __init__(self, model: LlamaLM) -> None:
        self.shape = check_canonical_model(model)
        self.reference: tuple[dict[int, dict[str, torch.Tensor]], torch.Tensor, torch.Tensor] | None = None

    def weightset(self, model: LlamaLM, origin: str = "simulator") -> WeightSet:
        """The model's canonical weights, aligned to the first call's (its singular vectors then in the first call's
        residual frame: ``before_rotation``)."""
        layers, embedding, head = canonical_layers(model, self.shape)
        if self.reference is None:
            self.reference = (layers, embedding, head)
            return _weightset(layers, origin)
        ref_layers, ref_embedding, ref_head = self.reference
        rotation = nearest_rotation(embedding.T @ ref_embedding + head.T @ ref_head)
        slack = float(torch.linalg.matrix_norm(rotation - torch.eye(rotation.shape[0], dtype=rotation.dtype)))
        aligned = {layer: align_canonical_layer(ref_layers[layer], mine, self.shape, layer, rotation.float(),
                                                gate_peaks(ref_layers[layer]["gate_proj"]), slack=slack)[0]
                   for layer, mine in layers.items()}
        ws = _weightset(aligned, origin)
        basis = rotation.T.contiguous()
        return WeightSet(ws.entries, origin=origin, view="canonical", before_rotation=(ws, lambda: basis))


def _weightset(layers: dict[int, dict[str, torch.Tensor]], origin: str) -> WeightSet:
    tensors = {(role, layer): weights[NAME_OF[role]] for layer, weights in layers.items() for role in TRANSFORMER_ROLES}
    return WeightSet.from_tensors(tensors, origin=origin, view="canonical")


__all__ = ["CanonicalFrame", "canonical_layers", "canonical_weightset", "check_canonical_model"]
