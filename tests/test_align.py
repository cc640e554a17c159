"""Orbit alignment (issue 31 item 5): a randomly gauged copy is brought back, and ``--align`` compares in
the aligned frame; bad pairs are one-line errors naming both models and the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

from geodrift.cli.main import main
from geodrift.continuity import MeasureSpec
from geodrift.errors import GeodriftError
from geodrift.gauge.align import align, shape_of, weight_error
from geodrift.gauge.orbit import (
    EMBED,
    LM_HEAD,
    GaugeShape,
    fold_gains,
    layer_key,
    random_gauge,
    scale_mlp,
    toy_state_dict,
)
from geodrift.scanner.aligned import checkpoint_state_dict
from geodrift.scanner.readers import open_checkpoint
from geodrift.scanner.series import compare, drift

SHAPE = GaugeShape(n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8)


def test_a_gauged_toy_copy_is_recovered_exactly_and_the_permutations_found():
    sd = toy_state_dict(SHAPE, d_model=32, d_ff=48, vocab=100, generator=torch.Generator().manual_seed(0))
    gauged = random_gauge(sd, SHAPE, torch.Generator().manual_seed(1), condition=100.0, sigma=1.0)
    assert weight_error(fold_gains(sd, SHAPE), gauged, SHAPE) > 0.5  # the gauge moved the weights
    folded, aligned, rep = align(sd, gauged, SHAPE)
    assert rep.aligned_weight_error < 1e-10 and rep.rotation_residual < 1e-10
    assert all(x.mutual_best_share == 1.0 and x.vo_residual < 1e-10 and x.qk_residual < 1e-10 for x in rep.layers)
    assert all(x.identity_share < 0.5 for x in rep.layers)  # the permutations were real, and undone
    assert any(x.heads_kept < 1.0 for x in rep.layers)  # heads were permuted too, and matched back
    torch.testing.assert_close(aligned["model.layers.1.mlp.up_proj.weight"], folded["model.layers.1.mlp.up_proj.weight"])
    assert "rotation fit residual" in rep.summary()


def test_without_the_general_head_maps_only_attention_stays_apart():
    sd = toy_state_dict(SHAPE, d_model=32, d_ff=48, vocab=100, generator=torch.Generator().manual_seed(2))
    gauged = random_gauge(sd, SHAPE, torch.Generator().manual_seed(3), condition=10.0, sigma=0.5)
    folded, aligned, rep = align(sd, gauged, SHAPE, head_maps="none")
    assert rep.aligned_weight_error > 1e-3  # V/O and Q/K maps not undone
    assert align(sd, gauged, SHAPE, head_maps="orthogonal")[2].aligned_weight_error > 1e-3  # nor by rotations alone
    rotated_only = random_gauge(sd, SHAPE, torch.Generator().manual_seed(3), condition=1.0, sigma=0.0)
    assert align(sd, rotated_only, SHAPE, head_maps="orthogonal")[2].aligned_weight_error < 1e-10
    for name in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        torch.testing.assert_close(aligned[f"model.layers.0.{name}.weight"], folded[f"model.layers.0.{name}.weight"])


def _signed(sd: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    # every hidden unit's Up row and Down column negated with probability 1/2 (exact: Up enters linearly), then
    # every other generator at once (V/O of condition 100, RoPE pair maps, head and unit permutations, a rotation)
    g = torch.Generator().manual_seed(seed)
    for layer in range(SHAPE.n_layers):
        d_ff = sd[layer_key(layer, "up_proj")].shape[0]
        sd = scale_mlp(sd, layer, torch.randint(0, 2, (d_ff,), generator=g).double() * 2 - 1)
    return random_gauge(sd, SHAPE, g, condition=100.0, sigma=1.0)


def test_signed_up_down_scales_are_recovered_with_every_unit_matched():
    """Issue 38's Done-when: signed scales, head permutations, V/O maps of condition 100 and RoPE pair maps, every
    unit matched (alignment matched units by signed cosine before and recovered only |s|: 57 % of units matched)."""
    sd = toy_state_dict(SHAPE, d_model=32, d_ff=48, vocab=100, generator=torch.Generator().manual_seed(6))
    _, _, rep = align(sd, _signed(sd, 7), SHAPE)
    assert rep.aligned_weight_error < 1e-10 and rep.one_orbit and "one orbit apart" in rep.summary()
    assert all(x.mutual_best_share == 1.0 for x in rep.layers)
    assert all(0.2 < x.sign_flip_share < 0.8 for x in rep.layers)  # the signs were real, and undone


@pytest.mark.parametrize("case", ["vocabulary smaller than the width", "zero embedding", "zero V head",
                                  "singular V head", "pruned head"])
def test_degenerate_weights_align_exactly_and_say_how(case: str):
    """Issue 39 item 3: alignment never raises on degenerate weights; each case is recovered exactly, and a note
    names what the weights could not fix (the embedding's rank, the layer and head)."""
    sd = toy_state_dict(SHAPE, d_model=32, d_ff=48, vocab=10 if case.startswith("vocabulary") else 100,
                        generator=torch.Generator().manual_seed(8))
    v, o = layer_key(1, "v_proj"), layer_key(1, "o_proj")
    sd[v], sd[o] = sd[v].clone(), sd[o].clone()
    if case == "zero embedding":
        sd[EMBED], sd[LM_HEAD] = torch.zeros_like(sd[EMBED]), torch.zeros_like(sd[LM_HEAD])
    if case in ("zero V head", "pruned head"):
        sd[v][8:16] = 0
    if case == "pruned head":
        sd[o][:, 16:32] = 0
    if case == "singular V head":
        sd[v][8] = sd[v][9]
    _, _, rep = align(sd, random_gauge(sd, SHAPE, torch.Generator().manual_seed(9), condition=100.0, sigma=1.0),
                      SHAPE, head_maps="general")
    assert rep.aligned_weight_error < 1e-10 and all(x.mutual_best_share == 1.0 for x in rep.layers), case
    expected = {"vocabulary smaller than the width": "fix the residual rotation in 20 of 32 dimensions",
                "zero embedding": "fix the residual rotation in 0 of 32", "zero V head": "layer 1 KV head 1: V rows",
                "singular V head": "layer 1 KV head 1: V rows", "pruned head": "layer 1 KV head 1: V rows and O"}
    assert any(expected[case] in note for note in rep.notes), rep.notes


@pytest.mark.slow  # about 20 s on one core; benchmarks/bench_barriers.py measures it too
def test_the_embedded_smollm2_under_a_random_gauge_is_recovered_to_1e_5():
    sd = checkpoint_state_dict(open_checkpoint(None))
    shape = shape_of(sd, 9, 3)
    gauged = random_gauge(sd, shape, torch.Generator().manual_seed(0), condition=100.0, sigma=1.0)
    _, _, rep = align(sd, gauged, shape)
    assert rep.naive_weight_error > 1.0 and rep.aligned_weight_error < 1e-5
    assert all(x.mutual_best_share == 1.0 for x in rep.layers)  # every hidden unit of every layer matched


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    # A model and an exactly gauged copy of it, both as Hugging Face folders (float32 on disk).
    root = tmp_path_factory.mktemp("align")
    state = llama_state(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60, seed=4)
    gauged = random_gauge(state, SHAPE, torch.Generator().manual_seed(5), condition=10.0, sigma=0.5)
    config = hf_config(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60)
    a = write_hf_folder(root / "a", state, config, dtype=torch.float32)
    b = write_hf_folder(root / "b", gauged, {**config, "tie_word_embeddings": False}, dtype=torch.float32)
    return a, b


def test_compare_align_finds_a_gauged_copy_identical_where_plain_compare_does_not(pair: tuple[Path, Path]):
    spec = MeasureSpec(k=2, null_draws=8)
    plain = compare(str(pair[0]), str(pair[1]), spec, roles=["mlp_up", "attn_v"], view="folded")
    assert min(r.overlap for r in plain.subspaces) < 0.9 and plain.gauge_fixing.startswith("folded: norm gains folded")
    aligned = compare(str(pair[0]), str(pair[1]), spec, roles=["mlp_up", "attn_v", "attn_k"], align=True,
                      head_maps="general", view="folded")
    assert all(r.overlap == pytest.approx(1.0, abs=1e-5) for r in aligned.subspaces)
    assert aligned.alignment is not None and aligned.alignment.aligned_weight_error < 1e-5
    assert "aligned to" in aligned.b and any("rotation fit residual" in n for n in aligned.notes)
    assert aligned.gauge_fixing.startswith("folded, aligned to A")
    # in the folded view the orthogonal head maps (--align's default) cannot undo this copy's V/O maps of condition
    # number 10, but the MLP (permutations, scalings) and the residual rotation are undone all the same
    default = compare(str(pair[0]), str(pair[1]), spec, roles=["mlp_up", "attn_v"], align=True, view="folded")
    assert default.alignment is not None and max(x.vo_residual for x in default.alignment.layers) > 1e-3
    assert all(r.overlap == pytest.approx(1.0, abs=1e-5) for r in default.subspaces if r.role == "mlp_up")
    with pytest.raises(GeodriftError, match="--head-maps general: chooses the maps of --align"):
        compare(str(pair[0]), str(pair[1]), spec, roles=["mlp_up"], head_maps="general", view="folded")
    # the default view balances both (every non-orthogonal gauge fixed), so its orthogonal maps recover the copy
    canonical = compare(str(pair[0]), str(pair[1]), spec, roles=["mlp_up", "attn_v", "attn_o", "attn_k"])
    assert canonical.alignment is not None and canonical.alignment.one_orbit
    assert canonical.gauge_fixing.startswith("canonical, aligned to A")
    assert all(r.overlap == pytest.approx(1.0, abs=1e-5) for r in canonical.subspaces)


def test_compare_and_drift_align_commands_report_what_was_recovered(pair: tuple[Path, Path], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "c.json"
    with pytest.raises(SystemExit) as done:
        main(["compare", str(pair[0]), str(pair[1]), "--align", "--head-maps", "general", "--k", "2", "--null-draws",
              "4", "--quiet", "--roles", "up,down", "--json-out", str(out), "--view", "folded"])
    assert done.value.code == 0 and "rotation fit residual" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["kind"] == "compare_report" and doc["alignment"]["aligned_weight_error"] < 1e-5
    assert len(doc["alignment"]["layers"]) == 3 and doc["alignment"]["layers"][0]["mutual_best_share"] == 1.0
    assert "V/O map per key-value head (general)" in doc["alignment"]["steps"]
    with pytest.raises(SystemExit) as done:
        main(["drift", str(pair[0]), str(pair[1]), "--align", "--k", "1", "--null-draws", "4", "--quiet",
              "--roles", "gate"])
    assert done.value.code == 0
    assert "checkpoint 1: aligned B to A" in capsys.readouterr().out


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_align_on_models_of_different_shapes_or_families_is_a_one_line_error(pair: tuple[Path, Path], tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]):
    wide = write_hf_folder(tmp_path / "wide", llama_state(n_layers=3, d=48, n_heads=4, n_kv=2, d_ff=48, vocab=60),
                           hf_config(n_layers=3, d=48, n_heads=4, n_kv=2, d_ff=48, vocab=60), dtype=torch.float32)
    err = _refused(["compare", str(pair[0]), str(wide), "--align", "--quiet", "--view", "folded"], capsys)
    assert "--align" in err and str(pair[0]) in err and str(wide) in err
    err = _refused(["compare", str(pair[0]), str(wide), "--quiet"], capsys)  # the default view: what differs
    assert "compare:" in err and str(pair[0]) in err and str(wide) in err and "16x32" in err and "24x48" in err
    mistral = write_hf_folder(tmp_path / "mistral", llama_state(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60),
                              hf_config("mistral", n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60),
                              dtype=torch.float32)
    err = _refused(["drift", str(pair[0]), str(mistral), "--align", "--quiet", "--view", "folded"], capsys)
    assert "--align" in err and "llama" in err and "mistral" in err and str(mistral) in err
    err = _refused(["drift", str(pair[0]), str(mistral), "--quiet"], capsys)
    assert "drift:" in err and "llama" in err and "mistral" in err and str(mistral) in err
    gemma = write_hf_folder(tmp_path / "gemma2", llama_state(gemma2=True), hf_config("gemma2"), dtype=torch.float32)
    err = _refused(["compare", str(gemma), str(pair[0]), "--align", "--quiet", "--view", "folded"], capsys)
    assert "--align" in err and str(gemma) in err and "gemma2" in err


def test_align_past_max_memory_is_refused_before_reading(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]):
    err = _refused(["compare", str(pair[0]), str(pair[1]), "--align", "--max-memory", "100K", "--quiet", "--view",
                    "folded"], capsys)
    assert "--align" in err and "--max-memory" in err and str(pair[0]) in err
    err = _refused(["compare", str(pair[0]), str(pair[1]), "--max-memory", "100K", "--quiet"], capsys)
    assert "--max-memory" in err


def test_head_maps_without_align_is_a_one_line_error(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]):
    err = _refused(["drift", str(pair[0]), str(pair[1]), "--head-maps", "none", "--quiet", "--view", "folded"], capsys)
    assert "--head-maps none" in err and "--align" in err
    # the default (canonical) view aligns every checkpoint: --head-maps chooses its per-head maps
    assert drift([str(pair[0]), str(pair[1])], MeasureSpec(k=1, null_draws=4), head_maps="general",
                 roles=["attn_v"]).gauge_fixing.startswith("canonical, aligned to checkpoint 0")


def test_align_refuses_state_dicts_of_different_shapes_naming_the_tensor():
    sd = toy_state_dict(SHAPE, d_model=32, d_ff=48, vocab=40, generator=torch.Generator().manual_seed(0))
    other = toy_state_dict(SHAPE, d_model=32, d_ff=64, vocab=40, generator=torch.Generator().manual_seed(0))
    with pytest.raises(GeodriftError, match="mlp.gate_proj.weight is 48x32 in A but 64x32 in B; --align"):
        align(sd, other, SHAPE)


def test_compare_align_of_a_head_pruned_copy_with_general_maps_ends_well(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]):
    """Issue 39 item 3: a copy whose V head is all zeros (head pruning) ended in LinAlgError in _fit_vo."""
    state = llama_state(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60, seed=11)
    v = "model.layers.1.self_attn.v_proj.weight"
    state[v] = state[v].clone()
    state[v][8:16] = 0
    gauged = random_gauge(state, SHAPE, torch.Generator().manual_seed(12), condition=10.0, sigma=0.5)
    config = hf_config(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=60)
    a = write_hf_folder(tmp_path / "a", state, config, dtype=torch.float32)
    b = write_hf_folder(tmp_path / "b", gauged, {**config, "tie_word_embeddings": False}, dtype=torch.float32)
    out = tmp_path / "c.json"
    with pytest.raises(SystemExit) as done:
        main(["compare", str(a), str(b), "--align", "--head-maps", "general", "--view", "folded", "--k", "2",
              "--null-draws", "4", "--quiet", "--roles", "v,o", "--json-out", str(out)])
    assert done.value.code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["alignment"]["aligned_weight_error"] < 1e-5
    assert any("layer 1 KV head 1: V rows rank-deficient" in n for n in doc["alignment"]["notes"])
