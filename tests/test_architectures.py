"""The one table of architectures (geodrift.architectures): what reads it, every generator as an exact map on a
random model of every architecture, and the Jacobian measurement that finds a generator the table leaves out."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from geodrift.architectures import ARCHITECTURES, GENERATORS, derived_dimension, moved_by
from geodrift.gauge.generator_actions import ACTIONS
from geodrift.gauge.generators import Layout
from geodrift.prove import jacobian
from geodrift.prove.twins import has_transformers
from geodrift.scanner.names import LIBRARY_ARCH, MOE_ARCHITECTURES
from geodrift.scanner.role_state import role_state

PROBED = [a for a, row in ARCHITECTURES.items() if row.probe is not None]
needs_transformers = pytest.mark.skipif(not has_transformers(), reason="the probes are transformers models")


def test_the_scanner_and_the_views_read_the_table() -> None:
    from geodrift.pretrained import SUPPORTED_ARCHITECTURES
    from geodrift.scanner.aligned import ALIGNABLE_ARCHITECTURES

    assert LIBRARY_ARCH == {a: r.gguf_arch for a, r in ARCHITECTURES.items() if r.gguf_arch}
    assert MOE_ARCHITECTURES == {a for a, r in ARCHITECTURES.items() if r.moe}
    assert SUPPORTED_ARCHITECTURES == tuple(a for a, r in ARCHITECTURES.items() if r.forward == "geodrift")
    assert ALIGNABLE_ARCHITECTURES == ("llama", "mistral")
    for arch, row in ARCHITECTURES.items():
        assert row.view == ("canonical" if row.canonical else "folded"), arch


def test_moved_by_is_per_architecture() -> None:
    # the q/k-norm scale and the sandwich's signed permutations move Gemma 3's Q v in the folded view; Llama's are
    # moved by its rotation and its RoPE maps
    assert moved_by("gemma3", "folded", "attn_q", "v", True) == ("qk_head_scale", "signed_permute")
    assert moved_by("llama", "folded", "attn_q", "v", True) == ("rotate", "qk_rope")
    assert moved_by("llama", "raw", "attn_o", "u", True) == ("rotate", "vo")
    assert moved_by("gemma2", "raw", "attn_o", "u", True) == ("vo", "post_gain_sign", "signed_permute")
    assert moved_by("gpt2", "folded", "mlp_down", "u", True) == ("writer_ones", "rotate_fixing_ones")
    assert moved_by("mixtral", "folded", "router", "v", True) == ("rotate", "router_shift")


def test_qk_norm_rows_list_the_per_head_scale_and_count_it() -> None:
    sizes = {"L": 2, "d": 16, "H": 4, "Hkv": 2, "hd": 4, "f": 8, "V": 24}
    for arch in ("qwen3", "gemma3", "qwen3_moe"):
        assert "qk_head_scale" in ARCHITECTURES[arch].continuous() and "qk_rope" not in ARCHITECTURES[arch].group
    assert GENERATORS["qk_head_scale"].exact.startswith("up to the norms' epsilon")
    assert derived_dimension("qwen3", sizes) - derived_dimension("llama", sizes) == 2 * (4 + 2) + 2 * 2 - 2 * 2 * 4


@needs_transformers
@pytest.mark.parametrize("architecture", PROBED)
def test_every_generator_keeps_the_logits_and_moves_the_weights(architecture: str) -> None:
    generator = torch.Generator().manual_seed(1)
    sizes = jacobian.sizes_of(architecture, jacobian.SIZES)
    model = jacobian.probe_model(architecture, generator, sizes)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}  # load_state_dict writes into the model's
    rs = role_state(params, architecture, model.config.to_dict())
    layout = Layout(architecture, sizes)
    ids = torch.randint(0, sizes["V"], (2, jacobian.SEQ), generator=generator)
    with jacobian.float64_forward(model), torch.no_grad():
        before = model(ids).logits
        for name in ARCHITECTURES[architecture].generators():
            moved = ACTIONS[name].draw(rs.state, layout, generator)
            assert any(not torch.equal(moved[k], rs.state[k]) for k in rs.state), name
            model.load_state_dict(rs.to_hf(moved), strict=False)
            change = float((model(ids).logits - before).abs().max() / before.abs().max())
            model.load_state_dict(params, strict=False)
            assert change < jacobian.EXACT, (name, change)


@needs_transformers
def test_the_jacobian_finds_the_q_k_norm_scale_a_table_without_it_would_miss(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    full = jacobian.measure("qwen3")
    assert full.agrees and full.measured == full.derived == 297, full.to_dict()
    row = ARCHITECTURES["qwen3"]
    old = {k: v for k, v in row.group.items() if k != "qk_head_scale"}  # the table before issue 42
    monkeypatch.setitem(ARCHITECTURES, "qwen3", dataclasses.replace(row, group=old))
    short = jacobian.measure("qwen3")
    assert not short.agrees and short.measured - short.derived == 2 * (4 + 2), short.to_dict()
    assert short.remeasured  # measured again with twice the inputs: still missing, not a rank not yet reached


def test_docs_models_lists_every_architecture_as_the_table_has_it() -> None:
    from pathlib import Path

    from geodrift.architectures import docs_table

    page = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text(encoding="utf-8")
    assert docs_table() in page
