"""Property tests of the torch side of the symmetry claims (random d, x, orthogonal R)."""

from __future__ import annotations

import hypothesis.strategies as st
import torch
from hypothesis import given
from strategies import DIMS, SEEDS, low_rank_matrices, matrices, orthogonal_matrices

from geodrift.gauge_numeric import ResidualMLP, orbit_momentum, train_trace
from geodrift.symmetry_numeric import (
    ELEMENTWISE,
    EQUIVARIANT,
    equivariance_error,
    orthogonal_qr,
    rotation_expm,
    witness_tensors,
)


@given(orthogonal_matrices())
def test_orthogonal_strategies_are_orthogonal(r: torch.Tensor) -> None:
    assert torch.allclose(r.T @ r, torch.eye(r.shape[0], dtype=r.dtype), atol=1e-10)


@given(low_rank_matrices(rank=st.integers(1, 3)))
def test_low_rank_matrices_have_the_requested_rank(m: torch.Tensor) -> None:
    assert torch.linalg.matrix_rank(m) <= 3


@given(st.sampled_from(sorted(EQUIVARIANT)), orthogonal_matrices(), SEEDS)
def test_linear_and_radial_activations_are_equivariant(name: str, r: torch.Tensor, seed: int) -> None:
    x = torch.randn(8, r.shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
    assert equivariance_error(EQUIVARIANT[name], x, r) < 1e-10


@given(st.sampled_from(sorted(ELEMENTWISE)), DIMS, SEEDS, st.sampled_from([1.0, 0.5, 2.0]))
def test_elementwise_activations_fail_along_the_witness_family(name: str, d: int, seed: int, s: float) -> None:
    # The witness (R*, x*) in the first two coordinates, anything in the others, everything then
    # conjugated by a random permutation (which element-wise activations commute with): the defect
    # is the witness's, permuted - never zero.
    gen = torch.Generator().manual_seed(seed)
    x, r = witness_tensors(d)
    x[2:] = torch.randn(d - 2, generator=gen, dtype=torch.float64)
    p = torch.eye(d, dtype=torch.float64)[torch.randperm(d, generator=gen)]
    act = ELEMENTWISE[name]
    rp, xp = p @ r @ p.T, p @ x
    defect = act(rp @ xp) - rp @ act(xp)
    base = act(r[:2, :2] @ x[:2]) - r[:2, :2] @ act(x[:2])
    assert float(defect.abs().max()) > 1e-2
    assert torch.allclose(defect.abs().sort().values[-2:], base.abs().sort().values, atol=1e-12)


@given(matrices(rows=st.just(6), cols=st.just(6)), orthogonal_matrices(n=6))
def test_orthogonal_matrices_preserve_the_radial_norm(m: torch.Tensor, r: torch.Tensor) -> None:
    assert torch.allclose(torch.linalg.vector_norm(m @ r.T, dim=1), torch.linalg.vector_norm(m, dim=1))


def test_expm_of_skew_matrix_is_a_rotation() -> None:
    r = rotation_expm(7, torch.Generator().manual_seed(3))
    assert abs(float(torch.linalg.det(r)) - 1.0) < 1e-10


@given(st.sampled_from(["linear", "radial_tanh", "relu", "tanh", "gelu"]), st.sampled_from(["A", "B"]), SEEDS)
def test_gauge_keeps_the_output_iff_activation_is_equivariant(name: str, block: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    net = ResidualMLP(3, 5, 2, 3, name, block, gen, scale=0.6)
    x = torch.randn(16, 3, generator=gen, dtype=torch.float64)
    y = net(x).detach()
    net.gauge_(orthogonal_qr(5, gen))
    change = float((net(x).detach() - y).abs().max() / y.abs().max())
    assert (change < 1e-10) == (name in EQUIVARIANT)


def test_orbit_momentum_is_zero_for_a_gradient_step_and_not_for_a_rotation_step() -> None:
    gen = torch.Generator().manual_seed(0)
    net = ResidualMLP(3, 4, 2, 2, "radial_tanh", "A", gen)
    x = torch.randn(8, 3, generator=gen, dtype=torch.float64)
    net(x).pow(2).sum().backward()
    params = [net.E, *net.W, net.H]
    grads = [-p.grad for p in params]
    assert float(orbit_momentum([p.detach() for p in params], grads).abs().max()) < 1e-12
    a = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    a = a - a.T  # a step along the orbit: (A E, [A, W], -H A)
    along = [a @ net.E.detach(), *[a @ w.detach() - w.detach() @ a for w in net.W], -net.H.detach() @ a]
    assert float(orbit_momentum([p.detach() for p in params], along).abs().max()) > 1e-3


def test_gd_conserves_q_on_linear_residual_nets_and_adam_does_not() -> None:
    gd = train_trace("linear", "gd", 2e-3, 100, seed=1)
    adam = train_trace("linear", "adam", 2e-3, 100, seed=1)
    assert gd["momentum"] < 1e-12 < adam["momentum"]
    assert adam["q_drift"] > 10 * gd["q_drift"]
