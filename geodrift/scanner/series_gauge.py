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
   hidden units (:func:`geodrift.gauge.align_canonical.align_canonical_layer`, in the checkpoint's own frame:
   heads by their OV/QK singular values, V/O and Q/K rotations on V's and K's rows, hidden units by their Gate
   rows near the diagonal, certified, each match signed by its Up and Down rows); the scan decomposes the
   aligned layers, and their singular vectors are turned by the residual rotation refitted on every
   residual-side weight: the token rows and every projection's top-k part (:meth:`AlignedLayers.rotated`).

Why this is exact and continuous. Exact: a gauge of a checkpoint leaves its canonical form unchanged up to
orthogonal maps (the tie-breaks and the residual rotation), which the nearest-point alignment then removes;
a gauge of the reference moves its canonical form by orthogonal maps only, which alignment follows
(nearest points are equivariant under isometries) and which leave every cross-checkpoint ``|cos|`` and
principal angle unchanged, since they act on both sides. Continuous: the balanced forms move continuously with
the weights, and the nearest orthogonal maps near the identity are continuous functions of the cross matrices;
no tie-break of one checkpoint enters a cross-checkpoint number. ``tests/test_series_continuity.py`` checks both,
and that the aligned weights are as far from the reference's as the raw weights are. The single scan needs
none of this: its numbers compare one checkpoint's layers, whose common residual frame cancels, so it computes
no residual basis and no alignment (:mod:`geodrift.scanner.canonical_view`).

Cost (``benchmarks/bench_series_views.py``): per checkpoint, its canonical form (as a single scan's), one
product of the token rows, and per layer the small per-head fits and ``O(d_ff d)`` for the hidden units when
the checkpoints are close (every pair, ``d_ff^2 d``, where the certificate fails); the reference's Gate
self-cosines once per series. The reference's canonical layers are kept in memory (float32) while the others are
read (``--max-memory`` counts them).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.align import (
    ORBIT_TOLERANCE,
    WRITERS,
    AlignmentReport,
    nearest_rotation,
    nearest_rotation_and_values,
)
from geodrift.gauge.align_canonical import align_canonical_layer, head_features
from geodrift.gauge.align_layer import LayerAlignment, align_layer, gate_peaks
from geodrift.gauge.canonical import rotate_residual
from geodrift.gauge.orbit import GaugeShape
from geodrift.linalg import SVDTriplets
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
    spectra: dict[tuple[str, int], SVDTriplets] = field(default_factory=dict)  # its kept triplets, once decomposed
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

    per_layer = True

    def __init__(self, ckpt: Checkpoint, folded: WeightSet, shape: GaugeShape) -> None:
        super().__init__({key: functools.partial(folded.__getitem__, key) for key in folded.entries},
                         lambda: self.store.embedding, shape, label=ckpt.label)  # the token rows, read once
        self.store = ReferenceStore(shape, ckpt.label, *token_rows(ckpt))

    def compute(self, layer: int) -> dict[str, torch.Tensor]:
        kept = self.store.layers.get(layer)
        if kept is None:
            kept = self.store.layers[layer] = super().compute(layer)
        # the kept tensors themselves (a copy of every layer was 425 MB of writes on SmolLM2): the scan reads them and
        # modifies none, and the other checkpoints are aligned to these same tensors
        return dict(kept)


class AlignedLayers(CanonicalLayers):
    """A checkpoint's canonical layers brought, by orthogonal maps, to the point nearest the reference's.

    The rotation ``R0`` of the token rows takes B's residual frame to the reference's; each canonical layer is
    aligned on its head and hidden side in its own frame (:func:`geodrift.gauge.align_canonical.align_canonical_layer`:
    only V's and K's rows, and Gate's where the checkpoints are far apart, are turned into the reference's frame for
    the fits); after the decomposition :meth:`rotated` refits the residual rotation on every residual-side weight
    and turns the singular vectors by it. With ``head_maps="general"`` each layer is turned into the reference's
    frame by ``R0``, aligned by least squares (:func:`geodrift.gauge.align_layer.align_layer`) and turned back.
    """

    per_layer = True

    def __init__(self, ckpt: Checkpoint, folded: WeightSet, shape: GaugeShape, reference: ReferenceStore,
                 head_maps: str) -> None:
        super().__init__({key: functools.partial(folded.__getitem__, key) for key in folded.entries},
                         self._embedding, shape, label=ckpt.label)
        self.ckpt, self.reference, self.head_maps = ckpt, reference, head_maps
        self._held_embedding: torch.Tensor | None = None  # the token embedding while :meth:`start` holds it
        self.layer_info: dict[int, LayerAlignment] = {}
        self._start: tuple[torch.Tensor, float] | None = None
        self._tokens = torch.zeros(0, dtype=torch.float64)  # the token rows' cross (B^T A)
        self.final: torch.Tensor | None = None  # the rotation refitted on every weight (:meth:`rotated`)
        self._notes: list[str] = []
        self._lock_start = threading.Lock()

    def sign_reference(self) -> torch.Tensor:
        # the signs are tie-breaks the alignment undoes: any reference will do, none refuses
        try:
            return super().sign_reference()
        except GeodriftError:
            return torch.zeros(self.reference.embedding.shape[1], dtype=torch.float64)

    def _embedding(self) -> torch.Tensor:
        # the embedding :meth:`start` read (the signs are computed there, from the same read), else read again
        return self._held_embedding if self._held_embedding is not None else load_canonical(self.ckpt, ("embed", None))

    def start(self) -> tuple[torch.Tensor, float]:
        """``(R, ||R - I||)``: the residual rotation from B's frame to the reference's (readers ``W R^T``, writers
        ``R W``) by Procrustes on the token rows (the embedding and the folded head, which no other gauge moves);
        where they fix no rotation (a vocabulary smaller than the width, a zero embedding), on every layer's Gate
        rows matched by norm too (a pass over the Gate rows first)."""
        with self._lock_start:
            if self._start is None:
                rows = token_rows(self.ckpt)
                self._held_embedding = rows[0]
                try:
                    self.sign_reference()  # from this read of the embedding (it is not kept)
                finally:
                    self._held_embedding = None
                cross = token_cross(self.reference, *rows)
                del rows
                rotation, s = nearest_rotation_and_values(cross)  # one SVD: the rotation and the rank check
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
                distance = float(torch.linalg.matrix_norm(rotation - torch.eye(rotation.shape[0], dtype=rotation.dtype)))
                self._start, self._tokens = (rotation.to(torch.float32), distance), cross
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

    def rotated(self, spectra: dict[tuple[str, int], SVDTriplets]) -> dict[tuple[str, int], SVDTriplets]:
        """B's decomposed layers (its own frame) with their residual-side vectors turned into the reference's frame by
        the residual rotation **refitted on every residual-side weight**: the token rows, and every projection's
        top-``k`` part ``U S V^T`` against the reference's (:meth:`ReferenceStore.spectra`; attention only with
        per-head maps), which anchors the frame in the layers too (fine-tuning moves the rows of the tokens it sees
        more than the layers). Exact for an exact copy; continuous save where a ``k``-th singular value crosses the
        next (the top-``k`` part jumps there)."""
        self.final = nearest_rotation(self._tokens + principal_cross(spectra, self.reference.spectra,
                                                                     self.head_maps != "none"))
        return rotate_residual(spectra, self.final.T.contiguous())

    def correction(self) -> torch.Tensor:
        """The rotation's transpose, as the ``basis`` of :func:`geodrift.gauge.canonical.rotate_residual` (vectors
        ``v -> R v``): the refitted one (:meth:`rotated`) once computed, else the token rows'."""
        return (self.final if self.final is not None else self.start()[0].double()).T.contiguous()

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


READ_SIDE = ("attn_q", "attn_k", "attn_v", "mlp_gate", "mlp_up")  # residual side: v (rows' columns)
WRITE_SIDE = ("attn_o", "mlp_down")  # residual side: u


def principal_cross(b: dict[tuple[str, int], SVDTriplets], a: dict[tuple[str, int], SVDTriplets],
                    attention: bool = True) -> torch.Tensor:
    """``sum X_B^T X_A`` (readers) and ``W_B W_A^T`` (writers) over the projections both decomposed, each matrix by its
    top-``k`` part ``U S V^T`` (float64, ``d x d``): B's head and hidden sides are aligned to A's, its residual side
    in its own frame; the cross :func:`geodrift.gauge.align.nearest_rotation` turns into the residual rotation."""
    cross: torch.Tensor | None = None
    for key, tb in b.items():
        ta = a.get(key)
        if ta is None or key[0] not in READ_SIDE + WRITE_SIDE or (not attention and key[0].startswith("attn")):
            continue
        k = min(tb.S.shape[0], ta.S.shape[0])
        ub, sb, vb = tb.U[:, :k].double(), tb.S[:k].double(), tb.Vh[:k].double().T
        ua, sa, va = ta.U[:, :k].double(), ta.S[:k].double(), ta.Vh[:k].double().T
        if key[0] in READ_SIDE:  # X = U S V^T, residual side V: X_B^T X_A = V_B S_B (U_B^T U_A) S_A V_A^T
            part = (vb * sb) @ (ub.T @ ua) @ (va * sa).T
        else:  # W = U S V^T, residual side U: W_B W_A^T = U_B S_B (V_B^T V_A) S_A U_A^T
            part = (ub * sb) @ (vb.T @ va) @ (ua * sa).T
        cross = part if cross is None else cross + part
    if cross is None:
        raise GeodriftError("no projection decomposed in both checkpoints: nothing to fit the residual rotation on")
    return cross


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


def reference_weightset(ckpt: Checkpoint, layers: list[int] | None = None) -> tuple[WeightSet, ReferenceStore]:
    """The reference's canonical WeightSet, reading through a :class:`ReferenceLayers` that keeps its layers in the
    returned store (filled as the WeightSet is read); ``layers``: those the scan selects (None: all)."""
    shape = check_canonical(ckpt)
    folded = weightset(ckpt, "folded")
    source = ReferenceLayers(ckpt, folded, shape)
    source.layers_read = layers
    return canonical_weightset(ckpt, folded, source), source.store


def aligned_weightset(ckpt: Checkpoint, reference: ReferenceStore, head_maps: str, layers: list[int] | None = None
                      ) -> tuple[WeightSet, AlignedLayers]:
    """A checkpoint's canonical WeightSet aligned to ``reference`` on its head and hidden side, its matrices in its own
    residual frame: decompose it, then turn its triplets by :meth:`AlignedLayers.rotated`; ``layers``: those the scan
    selects (None: all)."""
    shape = check_canonical(ckpt)
    if shape != reference.shape:
        raise GeodriftError(f"{ckpt.label} has {shape.n_heads}/{shape.n_kv_heads} heads of {shape.head_dim} but "
                            f"{reference.label} has {reference.shape.n_heads}/{reference.shape.n_kv_heads} of "
                            f"{reference.shape.head_dim}; a series needs checkpoints of one architecture")
    folded = weightset(ckpt, "folded")
    source = AlignedLayers(ckpt, folded, shape, reference, head_maps)
    source.layers_read = layers
    return canonical_weightset(ckpt, folded, source), source


__all__ = ["AlignedLayers", "ReferenceLayers", "ReferenceStore", "aligned_weightset", "folded_tokens",
           "reference_weightset", "token_rows"]
