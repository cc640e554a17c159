"""The exact gauges of geodrift.gauge.orbit leave the function unchanged, one generator at a time and all at once.

Real models: a small random LlamaLM (GQA, random norm gains) and the embedded SmolLM2-135M (tied
embeddings, 3 KV heads of 3 query heads; its first 4 layers by default, the whole model under ``-m heavy``)
loaded into geodrift's LlamaLM, both run in float64. The
RMSNorm computes in float32 (as Hugging Face's does), so the stated tolerance is float32's:
``max |dlogit| <= 1e-5 * max |logit|`` (SmolLM2 measured 7e-7 relative under every generator at once).
"""

from __future__ import annotations

import pytest
import torch
from _gauge import rebuild, smollm2_layers

from geodrift.errors import GeodriftError
from geodrift.gauge.orbit import (
    EMBED,
    GENERATORS,
    LM_HEAD,
    GaugeShape,
    fold_gains,
    gains_folded,
    layer_key,
    permute_mlp,
    random_gauge,
    rotate_residual,
    scale_mlp,
    transform_qk,
    transform_vo,
)
from geodrift.lm.llama import LlamaLM

RELATIVE = 1e-5


class Case:
    def __init__(self, model: LlamaLM, tokens: int, seed: int) -> None:
        self.model = model
        self.shape = GaugeShape.from_model(model)
        self.sd = {k: v.to(torch.float64) for k, v in model.state_dict().items()}
        vocab = model.model.embed_tokens.num_embeddings
        self.ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            self.logits = rebuild(self.sd, model)(self.ids)

    def error(self, sd: dict[str, torch.Tensor]) -> float:
        with torch.no_grad():
            moved = rebuild(sd, self.model)(self.ids)
        return float((moved - self.logits).abs().max() / self.logits.abs().max())


@pytest.fixture(scope="module")
def small() -> Case:
    model = LlamaLM(vocab_size=37, d_model=24, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=20, init_std=0.3,
                    generator=torch.Generator().manual_seed(3))
    with torch.no_grad():  # gains far from 1, so that folding them matters
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(len(name))) * 2 + 0.2)
    return Case(model, tokens=9, seed=0)


@pytest.fixture(scope="module", params=[pytest.param(4, id="smollm2-4-layers"),
                                        pytest.param(None, id="smollm2", marks=pytest.mark.heavy)])
def smollm2(request: pytest.FixtureRequest) -> Case:
    """SmolLM2's real weights: its first 4 layers (the default run: 8 took the README test command's peak to 2.95 of
    its 3 GiB) or the whole model (``heavy``: float64 copies of 1.1 GB each)."""
    return Case(smollm2_layers(request.param), tokens=12, seed=1)


@pytest.mark.parametrize("generator", GENERATORS)
def test_each_generator_preserves_the_small_models_logits_and_changes_its_weights(small: Case, generator: str):
    moved = random_gauge(small.sd, small.shape, torch.Generator().manual_seed(7), condition=100.0, sigma=1.0,
                         generators=(generator,))
    assert small.error(moved) <= RELATIVE
    changed = [k for k in small.sd if k in moved and not torch.allclose(small.sd[k], moved[k])]
    assert changed, generator  # the map is not the identity


def test_all_generators_at_once_preserve_the_small_models_logits(small: Case):
    moved = random_gauge(small.sd, small.shape, torch.Generator().manual_seed(8), condition=100.0, sigma=1.0)
    assert gains_folded(moved, small.shape)
    assert small.error(moved) <= RELATIVE


def test_all_generators_at_once_preserve_smollm2s_logits(smollm2: Case):
    # tied embeddings: folding the final norm unties lm_head
    assert LM_HEAD not in smollm2.sd or torch.equal(smollm2.sd[LM_HEAD], smollm2.sd[EMBED])
    moved = random_gauge(smollm2.sd, smollm2.shape, torch.Generator().manual_seed(9), condition=100.0, sigma=1.0)
    assert not torch.equal(moved[LM_HEAD], moved[EMBED])
    assert smollm2.error(moved) <= RELATIVE


@pytest.mark.parametrize("generator", ["rotate", "vo", "qk", "mlp_scale", "head_permute"])
def test_each_generator_preserves_smollm2s_logits(smollm2: Case, generator: str):
    moved = random_gauge(smollm2.sd, smollm2.shape, torch.Generator().manual_seed(10), generators=(generator,))
    assert smollm2.error(moved) <= RELATIVE


def test_the_single_generators_match_their_definitions(small: Case):
    sd, shape = fold_gains(small.sd, small.shape), small.shape
    assert small.error(transform_qk(sd, shape, layer=1, kv=1, pair=2, r=3.0, phi=0.7)) <= RELATIVE
    moved = transform_qk(sd, shape, layer=1, kv=1, pair=2, r=3.0, phi=0.0)
    k = layer_key(1, "k_proj")
    rows = shape.head_rows(1, pair=2)
    assert torch.allclose(moved[k][rows], sd[k][rows] / 3.0)
    b = torch.eye(shape.head_dim, dtype=torch.float64) * 2
    assert small.error(transform_vo(sd, shape, 0, 0, b)) <= RELATIVE
    s = torch.linspace(0.1, 5.0, 20, dtype=torch.float64)
    assert small.error(scale_mlp(sd, 2, s)) <= RELATIVE
    assert small.error(permute_mlp(sd, 2, torch.arange(19, -1, -1))) <= RELATIVE


def test_wrong_uses_are_refused(small: Case):
    with pytest.raises(GeodriftError, match="fold_gains"):
        rotate_residual(small.sd, small.shape, torch.eye(24, dtype=torch.float64))
    with pytest.raises(GeodriftError, match="unknown gauge generator"):
        random_gauge(small.sd, small.shape, torch.Generator(), generators=("shear",))
    # breaking a gauge's pairing changes the function: the check has teeth
    sd = fold_gains(small.sd, small.shape)
    broken = dict(sd)
    broken[layer_key(0, "up_proj")] = sd[layer_key(0, "up_proj")] * 3.0
    assert small.error(broken) > 1e-3
