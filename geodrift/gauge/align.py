"""Orbit alignment of two Llama-family checkpoints: bring B into A's gauge before comparing them.

Two checkpoints that compute the same function can differ by the network's exact symmetries
(issue 31, docs/scan.md "Aligned comparison"): a rotation of the residual stream once the norm gains
are folded, a permutation of each layer's hidden units with a nonzero scale each (Up rows against Down
columns, the sign included; Gate rows permuted only), an invertible map per key-value head on V's rows
against O's columns, a rotation-scaling per key-value head and RoPE frequency pair on K's rows against
Q's, and a permutation of the heads. :func:`align` recovers each of them from the weights alone and
applies their inverses to B with :mod:`geodrift.gauge.orbit`'s maps:

1. **fold** both models' norm gains into the projections that read them (Q/K/V, Gate/Up, the head);
2. **residual rotation**, first from the token-indexed rows (the embedding and the folded head, which no
   other gauge moves), by orthogonal Procrustes (``scipy.linalg.orthogonal_procrustes``);
3. per layer, the **head and hidden side** (:func:`geodrift.gauge.align_layer.align_layer`: head
   permutations, V/O and Q/K maps, hidden units matched with their signs, Up/Down scales);
4. the residual rotation **refitted on every residual-side weight** (the embedding, the head and every
   projection's residual side, the layers as step 3 left them), and steps 3-4 repeated while the rotation
   still moves (at most :data:`MAX_PASSES` passes): a model whose embedding does not fix the rotation (a
   vocabulary smaller than the width, a zero embedding) is aligned by its layers. Attention enters the refit
   only where its per-head maps can be exact (``general``, or two balanced models): rotations alone cannot undo
   a V/O or Q/K map that is not orthogonal, and the attention left apart would pull the rotation off the rest.

For an exact reparametrisation every step is exact, and the aligned B equals the folded A up to
float error; for two independently trained models each step is the best fit of its kind, and the
report says how good (the fit residuals, the mean matched cosine, the share of mutual best matches,
the weight distance left) and whether the two are one orbit apart (:data:`ORBIT_TOLERANCE`).
All of this works on Hugging Face-named state dicts in memory (float64 inside), for models
whose MLP is gated (SwiGLU) with RMSNorm pre-norms and RoPE in the half-split layout.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import scipy.linalg
import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.align_layer import HEAD_MAPS, LayerAlignment, align_layer
from geodrift.gauge.orbit import (
    EMBED,
    LM_HEAD,
    GaugeShape,
    StateDict,
    fold_gains,
    layer_key,
    rotate_residual,
)

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
READERS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")  # read the residual stream: W -> W R^T
WRITERS = ("o_proj", "down_proj")  # write it: W -> R W
# Passes of steps 3-4 at most; they stop once the refitted rotation moves by less than ROTATION_SETTLED (Frobenius).
MAX_PASSES = 4
ROTATION_SETTLED = 1e-9
# Relative weight distance left below which two models are reported as one orbit apart (an exact reparametrisation:
# a float32 copy of SmolLM2 under every gauge at once aligns back to ~2e-6).
ORBIT_TOLERANCE = 1e-4


@dataclass
class AlignmentReport:
    """What :func:`align` recovered: the residual rotation's fit and each layer's maps."""

    rotation_residual: float  # ||X_B R - X_A|| / ||X_A|| over the embedding and head rows
    naive_weight_error: float  # ||B - A|| / ||A|| over every projection, both folded, before alignment
    aligned_weight_error: float  # the same after alignment
    layers: list[LayerAlignment] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    seconds: float = 0.0
    passes: int = 1  # passes of the per-layer fits and the rotation refitted on every weight
    one_orbit: bool = False  # aligned_weight_error <= ORBIT_TOLERANCE: B is an exact reparametrisation of A
    notes: list[str] = field(default_factory=list)  # heads whose maps fell back, and why

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (docs/output-schema.md, ``alignment``)."""
        return asdict(self)

    def summary(self) -> str:
        """One line: the fits, the units matched and the distance left.

        Example:
            >>> AlignmentReport(1e-9, 0.9, 2e-8, [LayerAlignment(0, 0.5, 1.0, 1.0, 0.3, 1.0, 0.0, 0.0)]).summary()[:48]
            'aligned B to A: rotation fit residual 1.00e-09, '
        """
        mutual = float(np.mean([x.mutual_best_share for x in self.layers])) if self.layers else float("nan")
        cosine = float(np.mean([x.matched_cosine for x in self.layers])) if self.layers else float("nan")
        flips = float(np.mean([x.sign_flip_share for x in self.layers])) if self.layers else 0.0
        fits = [max(x.vo_residual, x.qk_residual) for x in self.layers if not np.isnan(x.vo_residual)]
        if np.isnan(self.aligned_weight_error):  # the default view's alignment: no distance, the fits say it
            verdict = "one orbit apart (every fit exact)" if self.one_orbit else "not one orbit apart"
            return (f"aligned B to A: hidden units matched with mean cosine {cosine:.3f} ({100 * mutual:.1f}% mutual "
                    f"best, {100 * flips:.1f}% with a sign flip), V/O and Q/K fit residuals up to "
                    f"{max(fits, default=float('nan')):.2e}: {verdict}")
        verdict = ("one orbit apart (an exact reparametrisation)" if self.aligned_weight_error <= ORBIT_TOLERANCE
                   else f"not one orbit apart: {self.aligned_weight_error / max(self.naive_weight_error, 1e-300):.1%}"
                   " of the distance is left")
        return (f"aligned B to A: rotation fit residual {self.rotation_residual:.2e}, hidden units matched with "
                f"mean cosine {cosine:.3f} ({100 * mutual:.1f}% mutual best, {100 * flips:.1f}% with a sign flip), "
                f"weight distance {self.naive_weight_error:.3g} -> {self.aligned_weight_error:.3g} (relative, gains "
                f"folded): {verdict}")


def shape_of(sd: StateDict, n_heads: int, n_kv_heads: int | None = None) -> GaugeShape:
    """The :class:`~geodrift.gauge.orbit.GaugeShape` of a Hugging Face-named Llama state dict.

    Args:
        sd: ``model.embed_tokens.weight`` and ``model.layers.{l}.…`` for ``l = 0..L-1``.
        n_heads, n_kv_heads: from the model's config (``n_kv_heads`` None: ``n_heads``).

    Raises:
        GeodriftError: no embedding, layers not numbered ``0..L-1``, heads that do not divide the width, an
            embedding whose width is not the projections' input width.

    Example:
        >>> shape_of({EMBED: torch.zeros(5, 8), layer_key(0, "q_proj"): torch.zeros(8, 8)}, 2)
        GaugeShape(n_layers=1, n_heads=2, n_kv_heads=2, head_dim=4)
    """
    if EMBED not in sd:
        raise GeodriftError(f"align: the state dict has no {EMBED}; alignment needs a Llama-family model with "
                            "Hugging Face names")
    d = int(sd[EMBED].shape[1])
    layers = sorted({int(k.split(".")[2]) for k in sd if k.startswith("model.layers.")})
    if not layers or layers != list(range(len(layers))):
        raise GeodriftError("align: the state dict's layers are not numbered 0..L-1; pass a whole model")
    q = sd.get(layer_key(0, "q_proj"))
    if q is not None and int(q.shape[1]) != d:
        raise GeodriftError(f"align: {EMBED} is {'x'.join(map(str, sd[EMBED].shape))} but "
                            f"{layer_key(0, 'q_proj')} reads {int(q.shape[1])}-wide vectors; the token embedding must "
                            "be as wide as the residual stream")
    kv = n_kv_heads or n_heads
    if n_heads <= 0 or d % n_heads or n_heads % kv:
        raise GeodriftError(f"align: {n_heads} heads / {kv} key-value heads do not divide d_model {d}")
    return GaugeShape(len(layers), n_heads, kv, d // n_heads)


# The per-head maps ``compare``/``drift --align`` fit unless told (``--head-maps``): orthogonal. Between two
# independently trained models a general least-squares map per head distorts them (benchmarks/RESULTS_barriers.md,
# 3 seed pairs of the tiny simulator Llama: loss barrier 0.616 without head maps, 0.441 with orthogonal ones,
# 2.102 with general ones, above the naive 1.165; seeds 1, 2: weight distance 1.513 -> 0.278 orthogonal, 4.751
# general), while an isometry per head never does. ``general`` is for an exactly reparametrised copy whose V/O or
# Q/K maps are not orthogonal (AWQ's V/O scales, a random gauge): it recovers every exact gauge (and stays the
# default of :func:`align` itself). In the canonical view both models are balanced first (every non-orthogonal
# gauge fixed), so the orthogonal maps are exact there too (geodrift.scanner.series_gauge).
DEFAULT_HEAD_MAPS = "orthogonal"


def align(sd_a: StateDict, sd_b: StateDict, shape: GaugeShape, *, head_maps: str = "general"
          ) -> tuple[StateDict, StateDict, AlignmentReport]:
    """Bring B into A's gauge: residual rotation, head and hidden permutations, signed scalings, V/O and Q/K maps.

    Args:
        sd_a, sd_b: Hugging Face-named Llama state dicts of one shape (tied or untied heads).
        shape: their :class:`~geodrift.gauge.orbit.GaugeShape`.
        head_maps: the per-head V/O and Q/K maps fitted: ``general`` (any invertible V/O map and any
            rotation-scaling per RoPE pair: recovers every exact gauge), ``orthogonal`` (rotations only:
            the conservative fit for two unrelated models) or ``none``.

    Returns:
        ``(a_folded, b_aligned, report)``: A with its gains folded, B folded and mapped into A's frame
        by the inverse maps (float64; each computes its model's function), and what was recovered.

    Raises:
        GeodriftError: the two differ in a tensor's presence or shape (naming the tensor), or an
            unknown ``head_maps``.

    Example:
        >>> from geodrift.gauge.orbit import random_gauge, toy_state_dict
        >>> shape = GaugeShape(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=4)
        >>> sd = toy_state_dict(shape, d_model=16, d_ff=24, vocab=40, generator=torch.Generator().manual_seed(0))
        >>> moved = random_gauge(sd, shape, torch.Generator().manual_seed(1), condition=10.0, sigma=0.5)
        >>> _, _, rep = align(sd, moved, shape)
        >>> rep.naive_weight_error > 0.5, rep.aligned_weight_error < 1e-9, rep.one_orbit
        (True, True, True)
    """
    if head_maps not in HEAD_MAPS:
        raise GeodriftError(f"align: head_maps {head_maps!r} is not one of {', '.join(HEAD_MAPS)}")
    check_same_shape(sd_a, sd_b, shape)
    a = fold_gains({k: v.detach().to(torch.float64) for k, v in sd_a.items()}, shape, in_place=True)
    b = fold_gains({k: v.detach().to(torch.float64) for k, v in sd_b.items()}, shape, in_place=True)
    b, report = align_folded(a, b, shape, head_maps=head_maps)
    return a, b, report


def fold_float64(sd: StateDict, shape: GaugeShape) -> StateDict:
    """``sd`` in float64 with its gains folded, **emptying** ``sd`` as it goes (one tensor at a time in two
    precisions, instead of the whole model).

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> s = GaugeShape(1, 2, 2, 2); sd = toy_state_dict(s, 4, 6, 5, torch.Generator().manual_seed(1))
        >>> wide = fold_float64(sd, s)
        >>> len(sd), wide[EMBED].dtype
        (0, torch.float64)
    """
    wide = {}
    for key in list(sd):
        wide[key] = sd.pop(key).detach().to(torch.float64)
    return fold_gains(wide, shape, in_place=True)


def align_folded(a: StateDict, b: StateDict, shape: GaugeShape, *, head_maps: str = "general",
                 scales: str = "fit", score: str = "cosine") -> tuple[StateDict, AlignmentReport]:
    """:func:`align` on models whose gains are folded, float64 (:func:`fold_float64`): ``b`` is consumed (its
    tensors replaced in place where the maps allow), ``a`` only read, so a series aligns every model to one
    folded ``a``.

    Args:
        a, b, shape, head_maps: as :func:`align`'s.
        scales, score: :func:`geodrift.gauge.align_layer.align_layer`'s (``keep`` and ``inner`` for two balanced
            models).

    Returns:
        ``(b_aligned, report)``.

    Raises:
        GeodriftError: an unknown ``head_maps``.
    """
    t0 = time.perf_counter()
    if head_maps not in HEAD_MAPS:
        raise GeodriftError(f"align: head_maps {head_maps!r} is not one of {', '.join(HEAD_MAPS)}")
    naive = weight_error(a, b, shape)
    cross, start_note = starting_cross(a, b, shape)
    b = rotate_residual(b, shape, nearest_rotation(cross), in_place=True)  # B's stream to A's
    rot_residual = (sum(float(torch.linalg.vector_norm(b[n] - a[n])) ** 2 for n in (EMBED, LM_HEAD))
                    / max(sum(float(torch.linalg.vector_norm(a[n])) ** 2 for n in (EMBED, LM_HEAD)), 1e-300)) ** 0.5
    passes, layers = 0, []
    while passes < MAX_PASSES:
        passes += 1
        for index in range(shape.n_layers):
            ref = {name: a[layer_key(index, name)] for name in PROJECTIONS}
            mine = {name: b[layer_key(index, name)] for name in PROJECTIONS}
            done, info = align_layer(ref, mine, shape, index, head_maps=head_maps, scales=scales, score=score)
            b.update({layer_key(index, name): value for name, value in done.items()})
            # what was recovered is the first pass's (later passes refine near the identity); the fits, the last's
            layers.append(info) if passes == 1 else _refit(layers[index], info)
        turn = nearest_rotation(full_cross(a, b, shape, attention=head_maps == "general" or scales == "keep"))
        moved = float(torch.linalg.matrix_norm(turn - torch.eye(turn.shape[0], dtype=turn.dtype)))
        b = rotate_residual(b, shape, turn, in_place=True)
        if moved <= ROTATION_SETTLED:
            break
    steps = ["fold gains", "residual rotation (Procrustes on embedding and head rows)",
             "head permutation (linear_sum_assignment on OV and QK cosines)"]
    steps += [f"V/O map per key-value head ({head_maps})", f"Q/K map per RoPE pair ({head_maps})"] \
        if head_maps != "none" else []
    attention = head_maps == "general" or scales == "keep"
    steps += ["hidden permutation with signs (Gate + |Up + Down| scores)",
              "Up/Down scaling" if scales == "fit" else "Up/Down scales kept (balanced)",
              f"residual rotation refitted on every residual-side weight{'' if attention else ' but attention'}"
              f" ({passes} pass{'es' if passes > 1 else ''})"]
    error = weight_error(a, b, shape)
    report = AlignmentReport(rot_residual, naive, error, layers, steps, time.perf_counter() - t0, passes,
                             error <= ORBIT_TOLERANCE, start_note + [note for x in layers for note in x.notes])
    return b, report


def check_same_shape(sd_a: StateDict, sd_b: StateDict, shape: GaugeShape, label_a: str = "A",
                     label_b: str = "B") -> None:
    """Refuse two state dicts that differ in a projection's presence or shape.

    Raises:
        GeodriftError: one line naming the tensor, both shapes and both models.
    """
    names = [EMBED] + [layer_key(lay, r) for lay in range(shape.n_layers) for r in PROJECTIONS]
    for name in names:
        ta, tb = sd_a.get(name), sd_b.get(name)
        sa = "missing" if ta is None else "x".join(map(str, ta.shape))
        sb = "missing" if tb is None else "x".join(map(str, tb.shape))
        if sa != sb or ta is None:
            raise GeodriftError(f"--align: {name} is {sa} in {label_a} but {sb} in {label_b}; --align needs two "
                                "models of one architecture and shape")


def weight_error(a: StateDict, b: StateDict, shape: GaugeShape) -> float:
    """``||B - A|| / ||A||`` over the embedding, the head and every projection (Frobenius, all stacked).

    Example:
        >>> from geodrift.gauge.orbit import toy_state_dict
        >>> s = GaugeShape(1, 2, 2, 2); sd = toy_state_dict(s, 4, 6, 5, torch.Generator().manual_seed(1))
        >>> weight_error(sd, sd, s)
        0.0
    """
    names = [EMBED, LM_HEAD] + [layer_key(lay, r) for lay in range(shape.n_layers) for r in PROJECTIONS]
    num = sum(float(torch.linalg.vector_norm(b[n].double() - a[n].double())) ** 2 for n in names if n in a)
    den = sum(float(torch.linalg.vector_norm(a[n].double())) ** 2 for n in names if n in a)
    return (num / den) ** 0.5 if den else 0.0


def _refit(first: LayerAlignment, last: LayerAlignment) -> None:
    first.mutual_best_share, first.matched_cosine = last.mutual_best_share, last.matched_cosine
    first.vo_residual, first.qk_residual = last.vo_residual, last.qk_residual
    first.notes = list(dict.fromkeys(first.notes + last.notes))


# ---- the residual rotation ---------------------------------------------------------------------------
def nearest_rotation(cross: torch.Tensor) -> torch.Tensor:
    """The rotation ``R`` (for :func:`geodrift.gauge.orbit.rotate_residual`) maximising ``tr(R cross)``: with
    ``cross = sum X_B^T X_A`` over readers' rows (``X R^T``) and ``sum W_B W_A^T`` over writers (``R W``), it brings
    B's stream nearest A's (orthogonal Procrustes; the identity for a zero ``cross``).

    Example:
        >>> r = nearest_rotation(torch.eye(3, dtype=torch.float64) * 2)
        >>> bool(torch.allclose(r, torch.eye(3, dtype=torch.float64)))
        True
    """
    return nearest_rotation_and_values(cross)[0]


def nearest_rotation_and_values(cross: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`nearest_rotation` and the singular values of ``cross`` (descending, float64), from its one SVD.

    Example:
        >>> r, s = nearest_rotation_and_values(torch.diag(torch.tensor([3.0, -2.0], dtype=torch.float64)))
        >>> r.tolist(), s.tolist()
        ([[1.0, 0.0], [0.0, -1.0]], [3.0, 2.0])
    """
    # orthogonal_procrustes(I, cross) (the SVD of cross, Q = U V^T) maximises tr(Q^T cross); R = Q^T maximises
    # tr(R cross). Its SVD computed here, as scipy computes it, to keep the singular values.
    u, s, vt = scipy.linalg.svd(cross.double().numpy())
    return torch.from_numpy(u @ vt).T.contiguous(), torch.from_numpy(s)


def token_cross(a: StateDict, b: StateDict) -> torch.Tensor:
    """``E_B^T E_A + H_B^T H_A``: the token-indexed rows (embedding, folded head), which no other gauge moves."""
    return b[EMBED].T @ a[EMBED] + b[LM_HEAD].T @ a[LM_HEAD]


# Below this share of its largest singular value, the token rows' cross leaves the rotation undetermined.
TOKEN_RANK_TOLERANCE = 1e-8


def starting_cross(a: StateDict, b: StateDict, shape: GaugeShape) -> tuple[torch.Tensor, list[str]]:
    """The cross matrix of the first residual rotation: the token rows' (:func:`token_cross`), plus, where they do not
    fix the rotation (a vocabulary smaller than the width, a zero embedding), every layer's Gate rows matched by
    norm (Gate rows are only permuted by the other gauges, so for an exact copy the norms match them exactly; the
    passes of :func:`align_folded` refine the start). Returns the cross and the note saying so (or none)."""
    cross = token_cross(a, b)
    s = torch.linalg.svdvals(cross)
    if float(s[-1]) > TOKEN_RANK_TOLERANCE * float(s[0]):
        return cross, []
    for layer in range(shape.n_layers):
        ga, gb = a[layer_key(layer, "gate_proj")], b[layer_key(layer, "gate_proj")]
        order_a = torch.argsort(ga.norm(dim=1), descending=True, stable=True)
        order_b = torch.argsort(gb.norm(dim=1), descending=True, stable=True)
        cross += gb[order_b].T @ ga[order_a]
    rank = int((s > TOKEN_RANK_TOLERANCE * max(float(s[0]), 1e-300)).sum())
    return cross, [f"the token embedding and head fix the residual rotation in {rank} of {s.numel()} dimensions; "
                   "it was started from every layer's Gate rows matched by norm and refitted on every weight"]


def full_cross(a: StateDict, b: StateDict, shape: GaugeShape, attention: bool = True) -> torch.Tensor:
    """:func:`token_cross` plus every projection's residual side (readers' columns, writers' rows); without
    ``attention``, Q/K/V/O are left out (their per-head maps could not be undone exactly, so their head sides
    differ by them)."""
    cross = token_cross(a, b)
    for layer in range(shape.n_layers):
        for name in READERS + WRITERS:
            if not attention and name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                continue
            wa, wb = a[layer_key(layer, name)], b[layer_key(layer, name)]
            cross += wb @ wa.T if name in WRITERS else wb.T @ wa
    return cross


__all__ = ["DEFAULT_HEAD_MAPS", "HEAD_MAPS", "ORBIT_TOLERANCE", "AlignmentReport", "LayerAlignment", "align",
           "align_folded", "check_same_shape", "fold_float64", "full_cross", "nearest_rotation",
           "nearest_rotation_and_values", "shape_of", "token_cross", "weight_error"]
