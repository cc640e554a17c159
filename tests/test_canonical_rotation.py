"""The canonical view's shortcut: canonicalise and decompose before the residual rotation, rotate the vectors after.

Every per-layer map of the canonical point commutes with the residual basis change ``P`` except the
third-moment signs (which read coordinates in ``P``), so the canonical layer before the rotation, rotated,
is the canonical layer; and a rotation moves singular vectors exactly. Checked on a toy state dict (float64)
and on the embedded SmolLM2 against the slow path (every matrix multiplied into ``P`` before its SVD).
"""

from __future__ import annotations

import torch

from geodrift.continuity import MeasureSpec
from geodrift.gauge.canonical import PROJECTIONS, canonical_layer, residual_basis, to_basis
from geodrift.gauge.orbit import EMBED, GaugeShape, fold_gains, layer_key, toy_state_dict
from geodrift.scanner.scan import load_weights, scan
from geodrift.weights import WeightSet


def test_the_canonical_layer_before_the_rotation_rotated_is_the_canonical_layer():
    shape = GaugeShape(2, 4, 2, 8)
    sd = fold_gains(toy_state_dict(shape, d_model=32, d_ff=24, vocab=200,
                                   generator=torch.Generator().manual_seed(3)), shape)
    sd = {k: v.to(torch.float64) for k, v in sd.items()}
    basis = residual_basis(sd[EMBED])
    for layer in range(shape.n_layers):
        weights = {name: sd[layer_key(layer, name)] for name in PROJECTIONS}
        slow = canonical_layer(to_basis(weights, basis), shape)
        fast = to_basis(canonical_layer(weights, shape, basis=basis), basis)
        for name in PROJECTIONS:
            assert torch.allclose(slow[name], fast[name], atol=1e-10, rtol=0), (layer, name)


def test_a_canonical_scan_equals_the_scan_of_the_rotated_matrices():
    # the fast path (decompose before the rotation, rotate the vectors) against the same WeightSet without it
    ws, heads = load_weights(None, "canonical", layers=[0, 1, 2, 3])
    assert ws.before_rotation is not None
    slow_ws = WeightSet(ws.entries, origin=ws.origin, view=ws.view)
    spec = MeasureSpec(k=2, null_draws=10, svd="exact")
    fast, slow = scan(ws, spec, heads=heads), scan(slow_ws, spec, heads=heads)
    for a, b in zip(fast.roles, slow.roles, strict=True):
        assert (a.role, a.verdict, a.path_verdict) == (b.role, b.verdict, b.path_verdict)
        for space in ("v", "u"):
            for x, y in zip(a.spaces[space].vectors, b.spaces[space].vectors, strict=True):
                assert abs(x.mean - y.mean) < 1e-5 and abs(x.null_mean - y.null_mean) < 1e-5, (a.role, space, x.k)
