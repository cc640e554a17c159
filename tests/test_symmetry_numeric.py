"""Property tests of the torch side of the symmetry claims, on the simulator's own models.

The symbolic claims (geodrift.proofs) computed a second time in torch: equivariant activations
commute with every rotation, element-wise ones do not; the simulator's MLP and Llama keep the
conjugation gauge exactly when their activation is equivariant; and, at the WeightSet level, one
rotation shared by every layer leaves continuity unchanged while independent rotations per layer
(the paper's rotation drift) drive it down to its permutation null.
"""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given
from strategies import DIMS, ENTRIES, arrays, examples, matrices, orthogonal_matrices, skew_matrices

from geodrift.continuity import MeasureSpec, measure
from geodrift.prove.gauge import (
    MLP_ELEMENTWISE,
    MLP_EQUIVARIANT,
    V_ELEMENTWISE,
    V_EQUIVARIANT,
    conjugate_mlp_,
    orbit_momentum,
    rotate_value_heads_,
    toy_llama,
    toy_mlp,
    train_trace,
)
from geodrift.prove.symmetry import (
    ELEMENTWISE,
    EQUIVARIANT,
    equivariance_error,
    orthogonal_qr,
    witness_tensors,
)
from geodrift.weights import WeightSet


def _plane_rotation(d: int, i: int, j: int, angle: float) -> torch.Tensor:
    # A rotation by `angle` in the (i, j) coordinate plane of R^d.
    r = torch.eye(d, dtype=torch.float64)
    c, s = math.cos(angle), math.sin(angle)
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r


# Angles away from multiples of pi/2: there a plane rotation is a signed permutation, which some
# element-wise activations (abs, odd ones with sign flips) do commute with.
ANGLES = st.floats(min_value=0.2, max_value=math.pi / 2 - 0.2)
PLANES = st.tuples(st.integers(0, 7), st.integers(0, 7)).filter(lambda ij: ij[0] != ij[1])


@given(orthogonal_matrices())
def test_orthogonal_strategy_gives_orthogonal_matrices(r: torch.Tensor) -> None:
    assert torch.allclose(r.T @ r, torch.eye(r.shape[0], dtype=r.dtype), atol=1e-10)


@given(skew_matrices())
def test_exp_of_a_skew_matrix_is_a_rotation(a: torch.Tensor) -> None:
    assert abs(float(torch.linalg.det(torch.linalg.matrix_exp(a))) - 1.0) < 1e-9


@given(st.sampled_from(sorted(EQUIVARIANT)), DIMS.flatmap(
    lambda d: st.tuples(orthogonal_matrices(st.just(d)), matrices(st.integers(1, 8), st.just(d)))))
def test_linear_and_radial_activations_commute_with_every_orthogonal_matrix(name: str, r_and_x: tuple) -> None:
    r, x = r_and_x
    assert equivariance_error(EQUIVARIANT[name], x, r) < 1e-12 * max(1.0, float(x.abs().max()))


@given(st.sampled_from(sorted(ELEMENTWISE)), st.integers(2, 12).flatmap(
    lambda d: st.tuples(arrays(st.just((d,))), st.permutations(range(d)))), st.sampled_from([0.5, 1.0, 2.0]))
def test_elementwise_activations_fail_along_the_witness_family(name: str, rest_and_perm: tuple, s: float) -> None:
    # The witness (R*, x*) in the first two coordinates, anything in the others, everything then
    # conjugated by a permutation (which element-wise activations commute with): the defect is the
    # witness's, permuted - never zero.
    rest, perm = rest_and_perm
    d = rest.shape[0]
    x, r = witness_tensors(d)
    x = x * s
    x[2:] = rest[2:]
    p = torch.eye(d, dtype=torch.float64)[list(perm)]
    act = ELEMENTWISE[name]
    rp, xp = p @ r @ p.T, p @ x
    defect = act(rp @ xp) - rp @ act(xp)
    base = act(r[:2, :2] @ x[:2]) - r[:2, :2] @ act(x[:2])
    assert float(defect.abs().max()) > 1e-3
    assert torch.allclose(defect.abs().sort().values[-2:], base.abs().sort().values, atol=1e-12)


# ---- the simulator's own models under the gauge ------------------------------------------------
_MLP = {name: toy_mlp(name, torch.Generator().manual_seed(0)) for name in MLP_EQUIVARIANT + MLP_ELEMENTWISE}
_INPUTS = torch.randn(1, 32, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _conjugated_output(name: str, r: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    model = _MLP[name]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(x)
        conjugate_mlp_(model, r)
        after = model(x)
    model.load_state_dict(state)
    return before, after


@given(st.sampled_from(MLP_EQUIVARIANT), orthogonal_matrices(st.just(8)), arrays(st.just((1, 6, 5)), ENTRIES))
def test_simulator_mlp_keeps_the_gauge_with_a_linear_or_radial_activation(name: str, r: torch.Tensor,
                                                                           x: torch.Tensor) -> None:
    before, after = _conjugated_output(name, r, x)
    assert float((after - before).abs().max()) <= 1e-10 * max(1.0, float(before.abs().max()))


@given(st.sampled_from(MLP_ELEMENTWISE), PLANES, ANGLES)
@examples(40)
def test_simulator_mlp_breaks_the_gauge_with_an_elementwise_activation(name: str, plane: tuple[int, int],
                                                                       angle: float) -> None:
    before, after = _conjugated_output(name, _plane_rotation(8, *plane, angle), _INPUTS)
    assert float((after - before).abs().max() / before.abs().max()) > 1e-4


def _llama_change(name: str, rotations: torch.Tensor) -> float:
    model = toy_llama(name, torch.Generator().manual_seed(0))
    ids = torch.arange(24).reshape(2, 12) % 40
    with torch.no_grad():
        before = model(ids)
        rotate_value_heads_(model, rotations)
        return float((model(ids) - before).abs().max() / before.abs().max())


# toy_llama: 2 layers, 2 key-value heads of size 4.
@given(st.sampled_from(V_EQUIVARIANT), st.lists(orthogonal_matrices(st.just(4)), min_size=4, max_size=4))
@examples(15)
def test_simulator_llama_keeps_the_value_head_gauge_with_a_linear_or_radial_v(name: str, rs: list) -> None:
    assert _llama_change(name, torch.stack(rs).reshape(2, 2, 4, 4)) < 1e-10


@given(st.sampled_from(V_ELEMENTWISE), st.tuples(st.integers(0, 3), st.integers(0, 3)).filter(lambda ij: ij[0] != ij[1]),
       ANGLES)
@examples(15)
def test_simulator_llama_breaks_the_value_head_gauge_with_an_elementwise_v(name: str, plane: tuple[int, int],
                                                                           angle: float) -> None:
    r = _plane_rotation(4, *plane, angle)
    assert _llama_change(name, r.expand(2, 2, 4, 4)) > 1e-4


# ---- the paper's mechanism at the WeightSet level ---------------------------------------------
def _shared_frame_layers(L: int = 8, d: int = 24) -> dict[tuple[str, int], torch.Tensor]:
    # L layers that share their top input and output directions, with a clear spectral gap.
    g = torch.Generator().manual_seed(0)
    u, v = torch.randn(d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)
    u, v = u / u.norm(), v / v.norm()
    return {("block", l): 6.0 * torch.outer(u, v) + 0.3 * torch.randn(d, d, generator=g, dtype=torch.float64)
            for l in range(L)}


_LAYERS = _shared_frame_layers()
_SPEC = MeasureSpec(k=1, null_draws=200, seed=0)
_BEFORE = measure(WeightSet.from_tensors(_LAYERS), _SPEC).roles[0]


@given(orthogonal_matrices(st.just(24)))
@examples(10)
def test_one_rotation_shared_by_every_layer_leaves_continuity_unchanged(r: torch.Tensor) -> None:
    rotated = {key: r @ w @ r.T for key, w in _LAYERS.items()}
    after = measure(WeightSet.from_tensors(rotated), _SPEC).roles[0]
    for space in ("v", "u"):
        a, b = _BEFORE.spaces[space].vectors[0], after.spaces[space].vectors[0]
        assert a.per_pair == pytest.approx(b.per_pair, abs=1e-5)


def test_independent_rotations_per_layer_drive_continuity_to_its_permutation_null() -> None:
    g = torch.Generator().manual_seed(1)
    drifted = {}
    for key, w in _LAYERS.items():
        r = orthogonal_qr(24, g)
        drifted[key] = r @ w @ r.T
    after = measure(WeightSet.from_tensors(drifted), _SPEC).roles[0]
    for space in ("v", "u"):
        before_vc, after_vc = _BEFORE.spaces[space].vectors[0], after.spaces[space].vectors[0]
        assert before_vc.mean > 0.9 and before_vc.z > 10
        assert abs(after_vc.z) < 3 and after_vc.mean < 0.5 * before_vc.mean


def test_orbit_momentum_is_zero_for_a_gradient_step_and_not_for_a_rotation_step() -> None:
    gen = torch.Generator().manual_seed(0)
    net = toy_mlp("radial", gen, d=4, layers=2, n_in=3, n_out=2)
    x = torch.randn(1, 8, 3, generator=gen, dtype=torch.float64)
    net(x).pow(2).sum().backward()
    params = [net.embed[0], *net.blocks[0].unbind(0), net.head[0]]
    grads = [-net.embed.grad[0], *(-net.blocks.grad[0]).unbind(0), -net.head.grad[0]]
    assert float(orbit_momentum([p.detach() for p in params], grads).abs().max()) < 1e-12
    a = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    a = a - a.T  # a step along the orbit: (A E, [A, W], -H A)
    e, *ws, h = [p.detach() for p in params]
    along = [a @ e, *[a @ w - w @ a for w in ws], -h @ a]
    assert float(orbit_momentum([e, *ws, h], along).abs().max()) > 1e-3


@pytest.mark.heavy  # two training runs
def test_gd_conserves_q_on_linear_residual_nets_and_adam_does_not() -> None:
    gd = train_trace("none", "gd", 2e-3, 100, seed=1)
    adam = train_trace("none", "adam", 2e-3, 100, seed=1)
    assert gd["momentum"] < 1e-12 < adam["momentum"]
    assert adam["q_drift"] > 10 * gd["q_drift"]
