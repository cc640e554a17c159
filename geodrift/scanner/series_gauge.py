"""The default gauge fixing of a series (``drift``, ``compare``): a canonical reference, every other checkpoint
aligned to it.

Each checkpoint on its own is brought to the canonical point of its orbit (:mod:`geodrift.gauge.canonical`):
exact, but a canonical form breaks ties (the order of hidden units and heads, the signs and in-pair rotations
of the per-head factors), and a tie-break is discontinuous: a relative change of 1e-3 in the weights turned
into ~10 degrees of "drift" when each checkpoint was canonicalised alone (issue 38). Across checkpoints the gauge
is therefore fixed *relative to the reference* (checkpoint 0 of ``drift``, A of ``compare``):

1. the reference is read in the canonical view, its layers kept (:class:`ReferenceLayers`);
2. every other checkpoint is canonicalised too, which fixes every non-orthogonal gauge (the balanced Up/Down
   split, V/O factorisation and Q/K scale: continuous functions of the weights), and is then brought to the
   point of its remaining orbit nearest the reference's, by orthogonal maps only (:class:`AlignedLayers`): the
   residual rotation by Procrustes on the token rows (the embedding and folded head, the residual-side weights
   no other gauge moves; where they do not fix it, every layer's Gate rows too), and per layer the head
   permutation, a rotation per key-value head on V/O and per RoPE pair on Q/K, and a signed permutation of the
   hidden units (:func:`geodrift.gauge.align_layer.align_layer`: the nearest Gate rows, certified near the
   diagonal where the checkpoints are close, each match signed by its Up and Down rows).

Why this is exact and continuous. Exact: a gauge of a checkpoint leaves its canonical form unchanged up to
orthogonal maps (the tie-breaks and the residual rotation), which the nearest-point alignment then removes;
a gauge of the reference moves its canonical form by orthogonal maps only, which alignment follows
(nearest points are equivariant under isometries) and which leave every cross-checkpoint ``|cos|`` and
principal angle unchanged, since they act on both sides. Continuous: the balanced forms move continuously with
the weights, and the nearest orthogonal maps near the identity are continuous functions of the cross matrices;
no tie-break of one checkpoint enters a cross-checkpoint number. The ``alignment`` report gives the distance of the
two canonical forms (the residual rotation fitted) and what is left after the alignment (measured: the raw
distance, within a few percent; ``tests/test_series_continuity.py``).

Cost: per checkpoint, one product of the token rows and, per layer, the layer turned into the reference's frame
and the small per-head fits; the hidden units are scored near the diagonal only when certified (else every pair:
the reference's Gate self-products, once per series, bound the rest). ``benchmarks/bench_series_views.py``.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.align import ORBIT_TOLERANCE, WRITERS, AlignmentReport, nearest_rotation
from geodrift.gauge.align_canonical import align_canonical_layer, head_features
from geodrift.gauge.align_layer import LayerAlignment, align_layer, gate_peaks
from geodrift.gauge.orbit import GaugeShape
from geodrift.scanner.canonical_view import CanonicalLayers, canonical_weightset, check_canonical
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.readers import load_canonical, norm_gain, weightset
from geodrift.weights import WeightSet

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_DEGENERATE = 1e-8  # the token rows' cross below this share of its largest singular value fixes no rotation


def token_rows(ckpt: Checkpoint) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(embedding, lm_head or None where tied, final norm gain or None)`` of a checkpoint, float32."""
    embedding = load_canonical(ckpt, ("embed", None)).to(torch.float32)
    head = load_canonical(ckpt, ("lm_head", None)).to(torch.float32) if ("lm_head", None) in ckpt.plan else None
    gain = norm_gain(ckpt, ("norm_final", None)).to(torch.float32) if ("norm_final", None) in ckpt.plan else None
    return embedding, head, gain


@dataclass
class ReferenceStore:
    """What the other checkpoints are aligned to: the reference's canonical layers (float32, filled as its own scan
    computes them) and its token rows. Plain tensors, so that a Ray task receives it whole."""

    shape: GaugeShape
    label: str
    embedding: torch.Tensor
    head: torch.Tensor | None  # None: tied to the embedding
    gain: torch.Tensor | None  # the final norm's gain (None: none)
    layers: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    gate_peaks: dict[int, torch.Tensor] = field(default_factory=dict)
    head_features: dict[int, torch.Tensor] = field(default_factory=dict)

    def tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embedding, folded head)``, float64: the head (the embedding where tied) times the final norm's gain,
        as :func:`geodrift.gauge.orbit.fold_gains` folds it."""
        return folded_tokens(self.embedding, self.head, self.gain)

    def features(self, layer: int) -> torch.Tensor:
        """:func:`geodrift.gauge.align_canonical.head_features` of the layer, computed once."""
        if layer not in self.head_features:
            self.head_features[layer] = head_features(self.layer(layer), self.shape)
        return self.head_features[layer]

    def peaks(self, layer: int) -> torch.Tensor:
        """:func:`geodrift.gauge.align_layer.gate_peaks` of the layer's Gate rows, computed once."""
        if layer not in self.gate_peaks:
            self.gate_peaks[layer] = gate_peaks(self.layer(layer)["gate_proj"])
        return self.gate_peaks[layer]

    def layer(self, layer: int) -> dict[str, torch.Tensor]:
        """The canonical layer, float32.

        Raises:
            GeodriftError: a layer the reference's scan did not compute (the series selects the same layers).
        """
        if layer not in self.layers:
            raise GeodriftError(f"{self.label}: layer {layer} was not read, so no checkpoint can be aligned to it; "
                                "select the same --layers for every checkpoint")
        return self.layers[layer]


def folded_tokens(embedding: torch.Tensor, head: torch.Tensor | None, gain: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(embedding, head times the final gain)`` in float64 (``head`` None: tied to the embedding)."""
    e = embedding.to(torch.float64)
    h = e if head is None else head.to(torch.float64)
    return e, h if gain is None else h * gain.to(torch.float64).reshape(1, -1)


class ReferenceLayers(CanonicalLayers):
    """The reference's canonical layers: handed to its own scan like :class:`CanonicalLayers`'s, and kept (float32)
    in its :class:`ReferenceStore` for the other checkpoints' alignment."""

    def __init__(self, ckpt: Checkpoint, folded: WeightSet, shape: GaugeShape) -> None:
        super().__init__({key: functools.partial(folded.__getitem__, key) for key in folded.entries},
                         lambda: load_canonical(ckpt, ("embed", None)), shape, label=ckpt.label)
        self.store = ReferenceStore(shape, ckpt.label, *token_rows(ckpt))

    def compute(self, layer: int) -> dict[str, torch.Tensor]:
        kept = self.store.layers.get(layer)
        if kept is None:
            kept = self.store.layers[layer] = super().compute(layer)
        return {name: value.clone() for name, value in kept.items()}  # the scan's copy is handed out and dropped


class AlignedLayers(CanonicalLayers):
    """A checkpoint's canonical layers brought, by orthogonal maps, to the point nearest the reference's.

    The rotation ``R`` of the token rows takes B's residual frame to the reference's; each canonical layer is
    aligned on its head and hidden side in its own frame (:func:`geodrift.gauge.align_canonical.align_canonical_layer`:
    only V's and K's rows, and Gate's where the checkpoints are far apart, are turned into the reference's frame for
    the fits), and the measurement rotates the singular vectors by ``R`` afterwards (:meth:`correction`, the
    WeightSet's ``before_rotation``). With ``head_maps="general"`` each layer is turned into the reference's frame,
    aligned by least squares (:func:`geodrift.gauge.align_layer.align_layer`) and turned back.
    """

    def __init__(self, ckpt: Checkpoint, folded: WeightSet, shape: GaugeShape, reference: ReferenceStore,
                 head_maps: str) -> None:
        super().__init__({key: functools.partial(folded.__getitem__, key) for key in folded.entries},
                         lambda: load_canonical(ckpt, ("embed", None)), shape, label=ckpt.label)
        self.ckpt, self.reference, self.head_maps = ckpt, reference, head_maps
        self.layer_info: dict[int, LayerAlignment] = {}
        self._start: tuple[torch.Tensor, float] | None = None
        self._notes: list[str] = []
        self._lock_start = threading.Lock()

    def sign_reference(self) -> torch.Tensor:
        # the signs are tie-breaks the alignment undoes: any reference will do, none refuses
        try:
            return super().sign_reference()
        except GeodriftError:
            return torch.zeros(self.reference.embedding.shape[1], dtype=torch.float64)

    def start(self) -> tuple[torch.Tensor, float]:
        """``(R, ||R - I||)``: the residual rotation from B's frame to the reference's (readers ``W R^T``, writers
        ``R W``) by Procrustes on the token rows (the embedding and the folded head, which no other gauge moves);
        where they fix no rotation (a vocabulary smaller than the width, a zero embedding), on every layer's Gate
        rows matched by norm too (a pass over the Gate rows first)."""
        with self._lock_start:
            if self._start is None:
                cross = token_cross(self.reference, *token_rows(self.ckpt))
                s = torch.linalg.svdvals(cross)
                if float(s[-1]) <= _DEGENERATE * max(float(s[0]), 1e-300):
                    rank = int((s > _DEGENERATE * max(float(s[0]), 1e-300)).sum())
                    for layer in sorted({layer for _, layer in self.loaders}):
                        ga = self.reference.layer(layer)["gate_proj"]  # canonical: sorted by norm
                        gb = self.loaders[("mlp_gate", layer)]().to(torch.float32)
                        cross += (gb[torch.argsort(gb.norm(dim=1), descending=True, stable=True)].T @ ga).double()
                    self._notes.append(f"{self.label}: its token embedding and head fix the residual rotation in "
                                       f"{rank} of {s.numel()} dimensions; it was fitted on every layer's Gate rows "
                                       "matched by norm too")
                rotation = nearest_rotation(cross)
                distance = float(torch.linalg.matrix_norm(rotation - torch.eye(rotation.shape[0],
                                                                              dtype=rotation.dtype), ord=2))
                self._start = (rotation.to(torch.float32), distance)
            return self._start

    def compute(self, layer: int) -> dict[str, torch.Tensor]:
        rotation, distance = self.start()
        mine, ref = super().compute(layer), self.reference.layer(layer)
        if self.head_maps == "general":  # least squares in the reference's frame, turned back
            turned = {name: rotation @ w if name in WRITERS else w @ rotation.T for name, w in mine.items()}
            done, info = align_layer(ref, turned, self.shape, layer, head_maps="general", scales="keep",
                                     score="gate", peaks=self.reference.peaks(layer))
            done = {name: rotation.T @ w if name in WRITERS else w @ rotation for name, w in done.items()}
        else:
            done, info = align_canonical_layer(ref, mine, self.shape, layer, rotation, self.reference.peaks(layer),
                                               self.head_maps, slack=distance, features=self.reference.features(layer))
        with self._lock_start:
            self.layer_info[layer] = info
        return done

    def correction(self) -> torch.Tensor:
        """``R`` as the ``basis`` of :func:`geodrift.gauge.canonical.rotate_residual` (``R^T``: the decomposed matrices
        are in B's frame, their residual-side vectors ``v -> R v``)."""
        return self.start()[0].double().T.contiguous()

    def report(self) -> AlignmentReport:
        """What was recovered (after every layer): per layer the matches and fit residuals; the weight distances are
        not computed here (NaN: that needs every matrix turned into the reference's frame), and the two are reported
        one orbit apart where every fit is exact (every unit matched as mutual best with matched cosine 1, V/O and
        Q/K residuals 0, to :data:`geodrift.gauge.align.ORBIT_TOLERANCE`)."""
        infos = [self.layer_info[layer] for layer in sorted(self.layer_info)]
        exact = bool(infos) and all(
            x.mutual_best_share == 1.0 and x.matched_cosine >= 1 - ORBIT_TOLERANCE
            and (self.head_maps == "none" or max(x.vo_residual, x.qk_residual) <= ORBIT_TOLERANCE) for x in infos)
        steps = ["canonical form (balanced: every non-orthogonal gauge fixed)",
                 "residual rotation (Procrustes on embedding and head rows)",
                 "head permutation (linear_sum_assignment on the heads' OV and QK singular values)"
                 if self.head_maps != "general" else "head permutation (linear_sum_assignment on OV and QK cosines)"]
        steps += [f"V/O map per key-value head ({self.head_maps})", f"Q/K map per RoPE pair ({self.head_maps})"] \
            if self.head_maps != "none" else []
        steps += ["hidden permutation with signs (nearest Gate rows, signed by Up and Down)"]
        notes = self._notes + [note for x in infos for note in x.notes]
        return AlignmentReport(float("nan"), float("nan"), float("nan"), infos, steps, 0.0, 1, exact, notes)


def token_cross(reference: ReferenceStore, embedding: torch.Tensor, head: torch.Tensor | None,
                gain: torch.Tensor | None) -> torch.Tensor:
    """``E_B^T E_A + H_B^T H_A`` (float32 products, float64 result) for B's token rows against the reference's, the
    heads folded; a head tied in both is the embedding's product scaled (``H = E diag(g)``), not a second product."""
    ea, eb = reference.embedding.float(), embedding.float()
    cross = (eb.T @ ea).double()
    if reference.head is None and head is None:  # both tied: H = E diag(g)
        gb = torch.ones(eb.shape[1], dtype=torch.float64) if gain is None else gain.double()
        ga = torch.ones(ea.shape[1], dtype=torch.float64) if reference.gain is None else reference.gain.double()
        return cross + gb.reshape(-1, 1) * cross * ga.reshape(1, -1)
    _, hb = folded_tokens(embedding, head, gain)
    _, ha = folded_tokens(reference.embedding, reference.head, reference.gain)
    return cross + (hb.float().T @ ha.float()).double()


def reference_weightset(ckpt: Checkpoint) -> tuple[WeightSet, ReferenceStore]:
    """The reference's canonical WeightSet, reading through a :class:`ReferenceLayers` that keeps its layers in the
    returned store (filled as the WeightSet is read)."""
    shape = check_canonical(ckpt)
    folded = weightset(ckpt, "folded")
    source = ReferenceLayers(ckpt, folded, shape)
    return canonical_weightset(ckpt, folded, source.embedding, source), source.store


def aligned_weightset(ckpt: Checkpoint, reference: ReferenceStore, head_maps: str) -> tuple[WeightSet, AlignedLayers]:
    """A checkpoint's canonical WeightSet aligned to ``reference``: its matrices in its own frame, the rotation to the
    reference's applied to the singular vectors by the measurement (``before_rotation``)."""
    shape = check_canonical(ckpt)
    if shape != reference.shape:
        raise GeodriftError(f"{ckpt.label} has {shape.n_heads}/{shape.n_kv_heads} heads of {shape.head_dim} but "
                            f"{reference.label} has {reference.shape.n_heads}/{reference.shape.n_kv_heads} of "
                            f"{reference.shape.head_dim}; a series needs checkpoints of one architecture")
    folded = weightset(ckpt, "folded")
    source = AlignedLayers(ckpt, folded, shape, reference, head_maps)
    ws = canonical_weightset(ckpt, folded, source.embedding, source)
    return WeightSet(ws.entries, origin=ws.origin, view="canonical", before_rotation=(ws, source.correction)), source


__all__ = ["AlignedLayers", "ReferenceLayers", "ReferenceStore", "aligned_weightset", "folded_tokens",
           "reference_weightset", "token_rows"]
