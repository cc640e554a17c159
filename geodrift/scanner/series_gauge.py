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
   residual rotation from the token rows (embedding and folded head, which no other gauge moves), per layer the
   head permutation, a rotation per key-value head on V/O and per RoPE pair on Q/K, and a signed permutation of
   the hidden units (:func:`geodrift.gauge.align_layer.align_layer`, inner-product scores: each step is the
   nearest point given the others), and finally the residual rotation refitted on every residual-side weight,
   applied to the singular vectors after the decomposition.

Why this is exact and continuous. Exact: a gauge of a checkpoint leaves its canonical form unchanged up to
orthogonal maps (the tie-breaks and the residual rotation), which the nearest-point alignment then removes;
a gauge of the reference moves its canonical form by orthogonal maps only, which alignment follows
(nearest points are equivariant under isometries) and which leave every cross-checkpoint ``|cos|`` and
principal angle unchanged, since they act on both sides. Continuous: the balanced forms move continuously with
the weights, and the nearest orthogonal maps near the identity are continuous functions of the cross matrices;
no tie-break of one checkpoint enters a cross-checkpoint number. And the aligned distance never exceeds the
distance of the two canonical forms with the residual rotation fitted (each step is a nearest point, so it can
only shorten it): the ``alignment`` report gives both.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.align import ORBIT_TOLERANCE, WRITERS, AlignmentReport, nearest_rotation
from geodrift.gauge.align_layer import LayerAlignment, align_layer
from geodrift.gauge.canonical import PROJECTIONS
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

    def tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embedding, folded head)``, float64: the head (the embedding where tied) times the final norm's gain,
        as :func:`geodrift.gauge.orbit.fold_gains` folds it."""
        return folded_tokens(self.embedding, self.head, self.gain)

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

    Everything happens in B's own residual frame: the reference's layer is turned into it by the first rotation
    ``R0`` (from the token rows), B's canonical layer aligned to that, and the matrices handed to the scan stay in
    B's frame; :meth:`correction` is the rotation refitted on every weight seen (``R = R0 D``), which the
    measurement applies to the singular vectors once every layer is done.
    """

    def __init__(self, ckpt: Checkpoint, folded: WeightSet, shape: GaugeShape, reference: ReferenceStore,
                 head_maps: str) -> None:
        super().__init__({key: functools.partial(folded.__getitem__, key) for key in folded.entries},
                         lambda: load_canonical(ckpt, ("embed", None)), shape, label=ckpt.label)
        self.ckpt, self.reference, self.head_maps = ckpt, reference, head_maps
        self.layer_info: dict[int, LayerAlignment] = {}
        self._start: torch.Tensor | None = None
        self._tokens = torch.zeros(0, dtype=torch.float64)  # E_B^T E_A + H_B^T H_A (float64)
        self._token_norms = (0.0, 0.0)  # ||E_B||^2 + ||H_B||^2, the same of A
        # over the layers aligned so far, B's frame: sum of X^T Y (readers' rows; writers: X Y^T) of B aligned (X) and
        # A turned into B's frame (Y); ||X - Y||^2 after and before the head-side alignment; ||Y||^2
        self._cross = torch.zeros(0, dtype=torch.float64)
        self._after = self._before = self._theirs = 0.0
        self._notes: list[str] = []
        self._sums_lock = threading.Lock()

    def sign_reference(self) -> torch.Tensor:
        # the signs are tie-breaks the alignment undoes: any reference will do, none refuses
        try:
            return super().sign_reference()
        except GeodriftError:
            return torch.zeros(self.reference.embedding.shape[1], dtype=torch.float64)

    def start(self) -> torch.Tensor:
        """The first residual rotation ``R0`` from B's frame to A's (readers ``W R0^T``, writers ``R0 W``): from the
        token rows, or where they fix no rotation (a vocabulary smaller than the width, a zero embedding) from every
        layer's Gate rows matched by norm too (a pass over the Gate rows first)."""
        with self._sums_lock:
            if self._start is None:
                cross, mine, theirs = token_cross(self.reference, *token_rows(self.ckpt))
                s = torch.linalg.svdvals(cross)
                start = cross.clone()
                if float(s[-1]) <= _DEGENERATE * max(float(s[0]), 1e-300):
                    rank = int((s > _DEGENERATE * max(float(s[0]), 1e-300)).sum())
                    for layer in sorted({layer for _, layer in self.loaders}):
                        ga = self.reference.layer(layer)["gate_proj"]  # canonical: sorted by norm
                        gb = self.loaders[("mlp_gate", layer)]().to(torch.float32)
                        start += (gb[torch.argsort(gb.norm(dim=1), descending=True, stable=True)].T @ ga).double()
                    self._notes.append(f"{self.label}: its token embedding and head fix the residual rotation in "
                                       f"{rank} of {s.numel()} dimensions; it was started from every layer's Gate "
                                       "rows matched by norm and refitted on every weight")
                self._start = nearest_rotation(start)
                self._tokens, self._token_norms = cross, (mine, theirs)
                self._cross = torch.zeros_like(cross)
            return self._start

    def compute(self, layer: int) -> dict[str, torch.Tensor]:
        r0 = self.start().to(torch.float32)
        mine = super().compute(layer)
        ref = {name: r0.T @ w if name in WRITERS else w @ r0 for name, w in self.reference.layer(layer).items()}
        done, info = align_layer(ref, mine, self.shape, layer, head_maps=self.head_maps, scales="keep", score="inner")
        cross = torch.zeros_like(self._cross)
        after = before = theirs = 0.0
        for name in PROJECTIONS:
            after += float((done[name] - ref[name]).pow(2).sum(dtype=torch.float64))
            before += float((mine[name] - ref[name]).pow(2).sum(dtype=torch.float64))
            theirs += float(ref[name].pow(2).sum(dtype=torch.float64))
            if name in ATTENTION and self.head_maps == "none":
                continue  # their head sides were not aligned: they would pull the rotation off the rest
            w = done[name]
            cross += (w @ ref[name].T if name in WRITERS else w.T @ ref[name]).double()
        with self._sums_lock:
            self.layer_info[layer] = info
            self._cross += cross
            self._after += after
            self._before += before
            self._theirs += theirs
        return done

    def _turn(self) -> torch.Tensor:
        # D: the rotation, in B's frame, refitted on the token rows and every layer aligned so far (R = R0 D)
        r0 = self.start()
        return nearest_rotation(self._cross + self._tokens @ r0)

    def rotation(self) -> torch.Tensor:
        """The residual rotation from B's frame to A's, refitted on the token rows and every layer aligned so far."""
        return self.start() @ self._turn()

    def correction(self) -> torch.Tensor:
        """:meth:`rotation` as the ``basis`` of :func:`geodrift.gauge.canonical.rotate_residual` (``R^T``: the
        decomposed matrices are in B's frame, their residual-side vectors ``v -> R v``)."""
        return self.rotation().T.contiguous()

    def report(self) -> AlignmentReport:
        """What was recovered (after every layer): the relative distances over the token rows and every layer aligned
        (before: the two canonical forms with the first rotation; after: with every map), the token rows' fit."""
        r0, turn = self.start(), self._turn()
        mine, theirs = self._token_norms
        tokens = self._tokens @ r0  # B's token rows against A's turned into B's frame
        eye = torch.eye(turn.shape[0], dtype=turn.dtype)
        token_start = max(mine + theirs - 2 * float(torch.trace(tokens)), 0.0)
        token_end = max(mine + theirs - 2 * float(torch.trace(turn @ tokens)), 0.0)
        layers_end = max(self._after - 2 * float(torch.trace((turn - eye) @ self._cross)), 0.0)
        total = max(theirs + self._theirs, 1e-300)
        before = math.sqrt((token_start + self._before) / total)
        after = math.sqrt((token_end + layers_end) / total)
        infos = [self.layer_info[layer] for layer in sorted(self.layer_info)]
        steps = ["canonical form (balanced: every non-orthogonal gauge fixed)",
                 "residual rotation (Procrustes on embedding and head rows)",
                 "head permutation (linear_sum_assignment on OV and QK cosines)"]
        steps += [f"V/O map per key-value head ({self.head_maps})", f"Q/K map per RoPE pair ({self.head_maps})"] \
            if self.head_maps != "none" else []
        steps += ["hidden permutation with signs (Gate + |Up + Down| inner products)",
                  "residual rotation refitted on every residual-side weight (applied to the singular vectors)"]
        notes = self._notes + [note for x in infos for note in x.notes]
        return AlignmentReport(math.sqrt(token_start / max(theirs, 1e-300)), before, after, infos, steps, 0.0, 1,
                               after <= ORBIT_TOLERANCE, notes)


def token_cross(reference: ReferenceStore, embedding: torch.Tensor, head: torch.Tensor | None,
                gain: torch.Tensor | None) -> tuple[torch.Tensor, float, float]:
    """``(E_B^T E_A + H_B^T H_A, ||E_B||^2 + ||H_B||^2, ||E_A||^2 + ||H_A||^2)`` in float64 (precise distances need it)
    for B's token rows against the reference's, the heads folded; a head tied in both is the embedding's product
    scaled (``H = E diag(g)``), not a second product."""
    ea, eb = reference.embedding.double(), embedding.double()
    cross = eb.T @ ea
    norms = [float(x.pow(2).sum()) for x in (eb, ea)]
    if reference.head is None and head is None:  # both tied: H = E diag(g)
        gb = torch.ones(eb.shape[1], dtype=torch.float64) if gain is None else gain.double()
        ga = torch.ones(ea.shape[1], dtype=torch.float64) if reference.gain is None else reference.gain.double()
        cross += gb.reshape(-1, 1) * cross * ga.reshape(1, -1)
        return cross, norms[0] + float((eb * gb).pow(2).sum()), norms[1] + float((ea * ga).pow(2).sum())
    _, hb = folded_tokens(embedding, head, gain)
    _, ha = folded_tokens(reference.embedding, reference.head, reference.gain)
    return cross + hb.T @ ha, norms[0] + float(hb.pow(2).sum()), norms[1] + float(ha.pow(2).sum())


def reference_weightset(ckpt: Checkpoint) -> tuple[WeightSet, ReferenceStore]:
    """The reference's canonical WeightSet, reading through a :class:`ReferenceLayers` that keeps its layers in the
    returned store (filled as the WeightSet is read)."""
    shape = check_canonical(ckpt)
    folded = weightset(ckpt, "folded")
    source = ReferenceLayers(ckpt, folded, shape)
    return canonical_weightset(ckpt, folded, source.embedding, source), source.store


def aligned_weightset(ckpt: Checkpoint, reference: ReferenceStore, head_maps: str) -> tuple[WeightSet, AlignedLayers]:
    """A checkpoint's canonical WeightSet aligned to ``reference``: its matrices in the first rotation's frame, the
    refitted rotation applied to the singular vectors by the measurement (``before_rotation``)."""
    shape = check_canonical(ckpt)
    if shape != reference.shape:
        raise GeodriftError(f"{ckpt.label} has {shape.n_heads}/{shape.n_kv_heads} heads of {shape.head_dim} but "
                            f"{reference.label} has {reference.shape.n_heads}/{reference.shape.n_kv_heads} of "
                            f"{reference.shape.head_dim}; a series needs checkpoints of one architecture")
    folded = weightset(ckpt, "folded")
    source = AlignedLayers(ckpt, folded, shape, reference, head_maps)
    ws = canonical_weightset(ckpt, folded, source.embedding, source)
    correction: Callable[[], torch.Tensor] = source.correction
    return WeightSet(ws.entries, origin=ws.origin, view="canonical", before_rotation=(ws, correction)), source


__all__ = ["AlignedLayers", "ReferenceLayers", "ReferenceStore", "aligned_weightset", "folded_tokens",
           "reference_weightset", "token_rows"]
