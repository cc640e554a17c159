"""The toy residual MLP: architecture variants, activations, init, ensemble independence."""

from __future__ import annotations

import pytest
import torch

from geodrift.errors import GeodriftError
from geodrift.lm.activations import get_activation, radial, radial_rms
from geodrift.sim.config import MLPConfig, ablate
from geodrift.sim.mlp import ResidualMLP, build_mlp


def test_radial_rms_bends_where_the_papers_radial_is_the_identity():
    # The simulator's MLP at initialisation on the embedded MNIST subset: every layer's pre-activation
    # norm is so large at D = 256 that tanh(||x||) is 1 to within 1e-4, while tanh(||x|| / sqrt(D)) is not.
    from geodrift.sim.data import load_dataset

    x = load_dataset("mnist5k").x_train[:64][None]
    model = ResidualMLP(x.shape[-1], 10, d_model=256, n_layers=16, activation="none", seeds=[42])
    h = torch.bmm(x, model.embed.mT)
    for w in model.blocks.detach().mT.unbind(1):
        pre = torch.bmm(h, w)
        assert (radial(pre) - pre).norm() < 1e-4 * pre.norm()
        assert (radial_rms(pre) - pre).norm() > 3e-3 * pre.norm()
        h = h + pre
    first = torch.bmm(torch.bmm(x, model.embed.mT), model.blocks.detach().mT[:, 0])
    assert (radial_rms(first) - first).norm() > 0.3 * first.norm()


def test_radial_activation_is_rotation_equivariant():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 16, generator=gen)
    q, _ = torch.linalg.qr(torch.randn(16, 16, generator=gen))
    assert torch.allclose(radial(x @ q.T), radial(x) @ q.T, atol=1e-6)


def test_relu_is_not_rotation_equivariant():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 16, generator=gen)
    q, _ = torch.linalg.qr(torch.randn(16, 16, generator=gen))
    relu = get_activation("relu")
    assert not torch.allclose(relu(x @ q.T), relu(x) @ q.T, atol=1e-3)


def test_any_elementwise_torch_activation_is_accepted_and_softmax_is_refused():
    assert torch.equal(get_activation("elu")(torch.tensor([-1.0, 1.0])), torch.nn.functional.elu(torch.tensor([-1.0, 1.0])))
    with pytest.raises(GeodriftError, match="not element-wise"):
        get_activation("softmax")
    with pytest.raises(GeodriftError, match="not found"):
        get_activation("no_such_fn")


def test_default_init_is_pytorch_linear_uniform_and_init_std_overrides_blocks_only():
    m = ResidualMLP(784, 10, d_model=256, n_layers=16, seeds=[0]).requires_grad_(False)
    bound = 1 / 256**0.5
    assert float(m.blocks.abs().max()) <= bound
    assert float(m.blocks.std()) == pytest.approx(bound / 3**0.5, rel=0.02)  # std of U(-b, b)
    small = build_mlp(MLPConfig(init_std=1e-4), 784, 10, [0]).requires_grad_(False)
    assert float(small.blocks.std()) == pytest.approx(1e-4, rel=0.02)
    assert torch.equal(small.embed, m.embed)


def test_forward_matches_the_written_recurrence():
    cfg = MLPConfig(d_model=8, n_layers=3, activation="tanh")
    m = build_mlp(cfg, 5, 4, [3])
    x = torch.randn(1, 2, 5, generator=torch.Generator().manual_seed(0))
    h = x[0] @ m.embed[0].T
    for layer in range(3):
        h = h + torch.tanh(h @ m.blocks[0, layer].T)
    assert torch.allclose(m(x)[0], h @ m.head[0].T, atol=1e-6)
    nores = build_mlp(ablate(cfg, ["nores"]), 5, 4, [3])
    h = x[0] @ nores.embed[0].T
    for layer in range(3):
        h = torch.tanh(h @ nores.blocks[0, layer].T)
    assert torch.allclose(nores(x)[0], h @ nores.head[0].T, atol=1e-6)


@pytest.mark.parametrize("placement", ["pre", "post", "branch"])
def test_layernorm_placements_build_and_differ(placement):
    x = torch.randn(1, 3, 6, generator=torch.Generator().manual_seed(0))
    plain = build_mlp(MLPConfig(d_model=8, n_layers=2), 6, 2, [1])
    normed = build_mlp(MLPConfig(d_model=8, n_layers=2, norm=placement), 6, 2, [1])
    assert normed(x).shape == (1, 3, 2)
    assert not torch.allclose(plain(x), normed(x))


def test_ensemble_member_equals_the_single_model_of_its_seed():
    cfg = MLPConfig(d_model=16, n_layers=3)
    ens = build_mlp(cfg, 10, 3, [5, 9])
    single = build_mlp(cfg, 10, 3, [9])
    x = torch.randn(2, 4, 10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(ens.blocks[1], single.blocks[0])
    assert torch.allclose(ens(x)[1], single(x[1:])[0], atol=1e-6)


def test_bad_configurations_are_clear_errors():
    with pytest.raises(GeodriftError, match="norm"):
        MLPConfig(norm="middle")
    with pytest.raises(GeodriftError, match="n_layers"):
        MLPConfig(n_layers=1)
    with pytest.raises(GeodriftError, match="--ablation"):
        ablate(MLPConfig(), ["dropout"])
    assert ablate(MLPConfig(), ["init_std=0.001", "n_layers=4", "activation=elu", "nores", "ln"]) == MLPConfig(
        init_std=0.001, n_layers=4, activation="elu", residual=False, norm="pre")
    with pytest.raises(GeodriftError, match="expected int"):
        ablate(MLPConfig(), ["d_model=wide"])
    with pytest.raises(GeodriftError, match="expected bool"):
        ablate(MLPConfig(), ["residual=maybe"])


def test_labels_follow_the_paper():
    assert MLPConfig().name() == "Res+ReLU"
    assert ablate(MLPConfig(), ["none", "ln"]).name() == "Res+None+LN"  # type: ignore[union-attr]
    assert ablate(MLPConfig(), ["nores", "gelu"]).name() == "NoRes+GELU"  # type: ignore[union-attr]
    assert ablate(MLPConfig(), ["ln_post"]).name() == "Res+ReLU+LN(post)"  # type: ignore[union-attr]


def test_weightset_and_gradset_expose_a_members_blocks():
    m = build_mlp(MLPConfig(d_model=8, n_layers=3), 5, 2, [1, 2])
    ws = m.weightset(1)
    assert ws.roles() == ["block"] and ws.shape("block") == (8, 8)
    assert torch.equal(ws[("block", 2)], m.blocks.detach()[1, 2])
    with pytest.raises(GeodriftError, match="backward"):
        m.gradset(0)
    m(torch.randn(2, 4, 5)).sum().backward()
    assert torch.equal(m.gradset(0)[("block", 0)], m.blocks.grad[0, 0])  # type: ignore[index]
