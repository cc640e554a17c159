"""Mixture of experts: a random Mixtral (transformers) scans the same from a Hugging Face folder, a single
safetensors file, a GGUF with llama.cpp's stacked expert tensors and the module in memory; per-expert tables
and a figure; verdicts that hold on planted depth structure and not on random or layer-shuffled weights; the
experts of one layer compared with no prediction; and an unknown architecture mapped with --names in the
vocabulary of --roles."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from _checkpoints import llama_metadata, mixtral_gguf_tensors, mixtral_state, write_gguf, write_hf_folder
from _figure_text import overlapping_texts
from safetensors.torch import save_file
from typer.testing import CliRunner

import geodrift
from geodrift.cli.main import app
from geodrift.errors import GeodriftError
from geodrift.scanner.inventory import SCANNED, inventory
from geodrift.scanner.readers import load_canonical, open_checkpoint, weightset
from geodrift.weights import split_expert_role

runner = CliRunner()
LAYERS, D, HEADS, KV, FF, EXPERTS = 3, 32, 4, 2, 48, 4
FAST = {"k": 4, "null_draws": 12}


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory) -> dict:
    """A random transformers MixtralForCausalLM, written as a HF folder, a bare safetensors file and a GGUF."""
    import transformers

    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=64, hidden_size=D, intermediate_size=FF, num_hidden_layers=LAYERS,
                                        num_attention_heads=HEADS, num_key_value_heads=KV, num_local_experts=EXPERTS,
                                        num_experts_per_tok=2, max_position_embeddings=64)
    model = transformers.MixtralForCausalLM(config).eval()
    root = tmp_path_factory.mktemp("mixtral")
    model.save_pretrained(root / "hf", safe_serialization=True)
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    save_file(state, str(root / "bare.safetensors"))  # no config.json beside it: the names tell the architecture
    meta = {**llama_metadata(LAYERS, D, HEADS, KV, FF), "expert_count": EXPERTS, "expert_used_count": 2}
    write_gguf(root / "mixtral.gguf", "llama", mixtral_gguf_tensors(state, HEADS, KV), meta)
    return {"model": model, "state": state, "hf": root / "hf", "bare": root / "bare.safetensors",
            "gguf": root / "mixtral.gguf"}


@pytest.mark.parametrize("fmt", ["hf", "bare", "gguf"])
def test_every_format_reads_the_router_and_each_experts_matrices_exactly(mixtral, fmt) -> None:
    ckpt = open_checkpoint(mixtral[fmt])
    assert ckpt.architecture == ("llama" if fmt == "gguf" else "mixtral")  # llama.cpp writes Mixtral as llama
    ws = weightset(ckpt)
    experts = [r for r in ws.roles() if split_expert_role(r)]
    assert len(experts) == 3 * EXPERTS and "router" in ws.roles() and "mlp_gate" not in ws.roles()
    state = mixtral["state"]
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        assert torch.equal(ws[("router", layer)], state[p + "block_sparse_moe.gate.weight"])
        for e in range(EXPERTS):
            for family, w in (("expert_gate", "w1"), ("expert_up", "w3"), ("expert_down", "w2")):
                got = ws[(f"{family}.{e}", layer)]
                assert torch.equal(got, state[p + f"block_sparse_moe.experts.{e}.{w}.weight"]), (family, e, layer)
        assert torch.equal(ws[("attn_q", layer)], state[p + "self_attn.q_proj.weight"])  # GGUF: permutation undone


def test_every_format_gives_the_same_scan_with_per_expert_roles_and_experts_within_a_layer(mixtral) -> None:
    # one view for every format: a bare safetensors file (no config.json: no head counts) cannot be canonicalised
    reports = {fmt: geodrift.scan(mixtral[fmt], **FAST, view="folded") for fmt in ("hf", "bare", "gguf")}
    reports["module"] = geodrift.scan(mixtral["model"], **FAST, view="folded")
    reference = reports["hf"]
    assert [r.role for r in reference.roles][:5] == ["attn_q", "attn_k", "attn_v", "attn_o", "router"]
    assert {r.label for r in reference.roles} >= {"Router", "Gate e0", "Down e3"}
    assert [r.label for r in reference.across_experts] == [f"{f} L{layer}" for f in ("Gate", "Up", "Down")
                                                           for layer in range(LAYERS)]
    for fmt, report in reports.items():
        # a bare safetensors file has no config.json, so no head counts for the OV composite
        expected = [r for r in reference.roles if fmt != "bare" or r.role != "attn_ov"]
        assert [r.role for r in report.roles] == [r.role for r in expected], fmt
        for got, ref in zip(report.roles + report.across_experts, expected + reference.across_experts, strict=True):
            for space in ("v", "u"):
                a, b = got.spaces[space].vectors[0], ref.spaces[space].vectors[0]
                assert math.isclose(a.mean, b.mean, abs_tol=1e-5) and math.isclose(a.null_mean, b.null_mean, abs_tol=1e-5)
    for r in reference.across_experts:
        assert r.layers == list(range(EXPERTS)) and r.verdict == "no prediction"
        vc = r.spaces["v"].vectors[0]
        assert vc.baseline == pytest.approx(math.sqrt(2 / (math.pi * r.shape[1]))) and vc.null_std > 0  # both floors


def test_the_scan_command_prints_the_experts_tables_and_writes_their_figure(mixtral, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "out"
    out.mkdir()
    brief = runner.invoke(app, ["scan", str(mixtral["gguf"]), "--k", "4", "--null-draws", "12", "--quiet"])
    assert brief.exit_code == 0, brief.output
    assert "Experts across depth" in brief.stdout and "Each expert across depth" not in brief.stdout  # --full's
    assert "│ Router │" in brief.stdout and "--full:" in brief.stdout
    result = runner.invoke(app, ["scan", str(mixtral["gguf"]), "--k", "4", "--null-draws", "12", "--quiet", "--full",
                                 "--plot", str(out / "scan.png"), "--json-out", str(out / "scan.json"),
                                 "--csv", str(out / "scan.csv")])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "Router" in text and "Experts across depth" in text and "Each expert across depth" in text
    assert "Experts within a layer" in text and "no prediction" in text
    assert f"experts across depth: 0/{3 * EXPERTS} predictions hold" in text or "predictions hold (Gate" in text
    assert "Gate e0" not in text.split("Experts across depth")[0]  # the main table keeps one row per projection
    assert (out / "scan_experts.png").stat().st_size > 0 and (out / "scan.png").stat().st_size > 0
    doc = json.loads((out / "scan.json").read_text())
    assert len(doc["across_experts"]) == 3 * LAYERS
    csv = (out / "scan.csv").read_text()
    assert ",expert_gate.0,Gate e0," in csv and ",expert_down@2,Down L2," in csv


def test_inspect_lists_stacked_experts_grouped_by_role(mixtral) -> None:
    rows = inventory(open_checkpoint(mixtral["gguf"]))
    stacked = next(r for r in rows if r.name == "blk.1.ffn_gate_exps.weight")
    assert stacked.use == SCANNED and stacked.detail == f"Gate of {EXPERTS} experts (stacked), layer 1"
    assert stacked.shape == (EXPERTS, FF, D)
    names = [r.name for r in rows]
    routers = [i for i, n in enumerate(names) if "ffn_gate_inp" in n]
    assert routers == list(range(routers[0], routers[0] + LAYERS))  # one group, in layer order
    result = runner.invoke(app, ["inspect", str(mixtral["hf"]), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert "(experts: 3 families)" in doc["summary"]
    details = {t["name"]: t["detail"] for t in doc["tensors"]}
    assert details["model.layers.2.block_sparse_moe.gate.weight"] == "Router, layer 2"
    assert details["model.layers.2.block_sparse_moe.experts.1.w2.weight"] == "Down e1, layer 2"


def test_a_quantized_stacked_expert_tensor_reads_one_expert_from_its_own_bytes(tmp_path) -> None:
    state = mixtral_state(n_layers=2, d=D, n_heads=HEADS, n_kv=KV, d_ff=FF, n_experts=EXPERTS)
    tensors = mixtral_gguf_tensors(state, HEADS, KV)
    path = write_gguf(tmp_path / "q.gguf", "llama", tensors, llama_metadata(2, D, HEADS, KV, FF),
                      qtypes={"blk.1.ffn_up_exps.weight": gguf.GGMLQuantizationType.Q8_0})
    ckpt = open_checkpoint(path)
    whole = ckpt.load("blk.1.ffn_up_exps.weight")
    for e in range(EXPERTS):
        one = ckpt.load_expert("blk.1.ffn_up_exps.weight", e)
        assert torch.equal(one, whole[e])
        exact = state[f"model.layers.1.block_sparse_moe.experts.{e}.w3.weight"]
        assert torch.allclose(one, exact, atol=0.05)  # Q8_0's rounding, not another expert's values
    assert torch.equal(load_canonical(ckpt, ("expert_up.3", 1)), whole[3])
    with pytest.raises(GeodriftError, match="expert 4"):
        ckpt.load_expert("blk.1.ffn_up_exps.weight", EXPERTS)


# ---- verdicts: planted depth structure holds, random and layer-shuffled weights do not ----

def _planted(seed: int, shuffle: bool = False) -> dict[str, torch.Tensor]:
    # Every expert's Gate/Up reads along one direction of the stream, every Down writes along another, the
    # router reads along a third (rank-1 signal 30 over N(0, 1) noise, top noise singular value ~13).
    # shuffle: each layer's stream coordinates relabelled by its own permutation (readers' columns, writers'
    # rows), which keeps every matrix's spectrum and removes only the agreement between layers.
    g = torch.Generator().manual_seed(seed)
    state = mixtral_state(n_layers=5, d=D, n_heads=HEADS, n_kv=KV, d_ff=FF, n_experts=EXPERTS, seed=seed)

    def unit(n: int) -> torch.Tensor:
        x = torch.randn(n, generator=g)
        return x / x.norm()

    read, write, route = unit(D), unit(D), unit(D)
    for layer in range(5):
        p = f"model.layers.{layer}.block_sparse_moe."
        perm = torch.randperm(D, generator=g) if shuffle else torch.arange(D)
        state[p + "gate.weight"] = (30 * torch.outer(unit(EXPERTS), route) + torch.randn(EXPERTS, D, generator=g))[:, perm]
        for e in range(EXPERTS):
            for w in ("w1", "w3"):
                state[p + f"experts.{e}.{w}.weight"] = (30 * torch.outer(unit(FF), read)
                                                        + torch.randn(FF, D, generator=g))[:, perm]
            state[p + f"experts.{e}.w2.weight"] = (30 * torch.outer(write, unit(FF))
                                                   + torch.randn(D, FF, generator=g))[perm, :]
    return state


def _moe_verdicts(report) -> list[str]:
    return [r.verdict for r in report.roles if r.role == "router" or split_expert_role(r.role)]


def test_planted_depth_structure_holds_for_every_expert_and_the_router(tmp_path) -> None:
    folder = write_hf_folder(tmp_path / "m", _planted(1), None, dtype=torch.float32)
    report = geodrift.scan(folder, **FAST)
    assert _moe_verdicts(report) == ["holds"] * (1 + 3 * EXPERTS)
    gate = next(r for r in report.across_experts if r.role == "expert_gate@2")
    assert gate.spaces["v"].vectors[0].z > 3 and gate.verdict == "no prediction"  # measured, never judged


@pytest.mark.parametrize("seed", [2, 3])
def test_random_and_layer_shuffled_weights_do_not_pass_as_continuous(mixtral, seed) -> None:
    shuffled = geodrift.scan(_planted(seed, shuffle=True), seed=seed, **FAST)
    random = geodrift.scan(mixtral_state(n_layers=5, d=D, n_experts=EXPERTS, seed=seed), seed=seed, **FAST)
    for report in (shuffled, random):
        verdicts = _moe_verdicts(report)
        assert len(verdicts) == 1 + 3 * EXPERTS and verdicts.count("holds") <= 1, verdicts


def test_roles_select_the_router_a_family_one_expert_or_every_expert(mixtral) -> None:
    path = mixtral["hf"]
    assert [r.role for r in geodrift.scan(path, roles="router,expert_gate", **FAST).roles] == \
        ["router"] + [f"expert_gate.{e}" for e in range(EXPERTS)]
    assert [r.role for r in geodrift.scan(path, roles="expert_up.2", **FAST).roles] == ["expert_up.2"]
    assert len(geodrift.scan(path, roles="experts", **FAST).roles) == 3 * EXPERTS
    with pytest.raises(GeodriftError, match=r"^roles='expert_up\.9': expert_up\.9 not in .*expert_up\.0-3"):
        geodrift.scan(path, roles="expert_up.9", **FAST)


@pytest.mark.parametrize("family", ["qwen2_moe", "olmoe"])
def test_other_transformers_moe_families_scan_with_their_shared_expert(tmp_path, family) -> None:
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=64, hidden_size=D, intermediate_size=FF, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV, num_experts=EXPERTS, num_experts_per_tok=2)
    if family == "qwen2_moe":
        model = transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
            **common, moe_intermediate_size=24, shared_expert_intermediate_size=40))
    else:
        model = transformers.OlmoeForCausalLM(transformers.OlmoeConfig(**common))
    model.save_pretrained(tmp_path / family, safe_serialization=True)
    ckpt = open_checkpoint(tmp_path / family)
    assert ckpt.architecture == family
    roles = weightset(ckpt).roles()
    assert "router" in roles and len([r for r in roles if split_expert_role(r)]) == 3 * EXPERTS
    assert ({"shared_gate", "shared_up", "shared_down"} <= set(roles)) == (family == "qwen2_moe")
    if family == "qwen2_moe":
        row = next(r for r in inventory(ckpt) if r.name.endswith("layers.0.mlp.shared_expert_gate.weight"))
        assert row.use == "not scanned" and "one-row gate" in row.detail
    report = geodrift.scan(tmp_path / family, **FAST)
    assert len(report.across_experts) == 3 * LAYERS


def test_an_unknown_architecture_maps_with_names_in_the_vocabulary_of_roles(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(4)
    state = {}
    for layer in range(3):
        state[f"blocks.{layer}.attn.wq"] = torch.randn(D, D, generator=g)
        state[f"blocks.{layer}.attn.wk"] = torch.randn(16, D, generator=g)
        state[f"blocks.{layer}.moe.router"] = torch.randn(EXPERTS, D, generator=g)
        state[f"blocks.{layer}.moe.up_all"] = torch.randn(EXPERTS, FF, D, generator=g)  # every expert, stacked
        for e in range(EXPERTS):
            state[f"blocks.{layer}.moe.experts.{e}.fc_in"] = torch.randn(FF, D, generator=g)
    folder = tmp_path / "mystery"
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "mystery-moe"}))
    names = tmp_path / "names.json"
    names.write_text(json.dumps({r"blocks\.(\d+)\.attn\.wq": "q", r"blocks\.(\d+)\.attn\.wk": "k",
                                 r"blocks\.(\d+)\.moe\.router": "router",
                                 r"blocks\.(\d+)\.moe\.experts\.(\d+)\.fc_in": "expert_gate",
                                 r"blocks\.(\d+)\.moe\.up_all": "expert_up"}))
    result = runner.invoke(app, ["scan", str(folder), "--names", str(names), "--roles", "q,k,router,expert_gate,expert_up",
                                 "--k", "4", "--null-draws", "12", "--quiet", "--brief"])
    assert result.exit_code == 0, result.output
    assert "Router" in result.stdout and "Experts across depth" in result.stdout
    ws = weightset(open_checkpoint(folder, names=names))
    assert torch.equal(ws[("expert_up.3", 2)], state["blocks.2.moe.up_all"][3])  # read from the stack's own rows
    assert torch.equal(ws[("expert_gate.1", 0)], state["blocks.0.moe.experts.1.fc_in"])
    np.testing.assert_array_equal(ws[("attn_k", 1)].numpy(), state["blocks.1.attn.wk"].numpy())


def test_compress_refuses_a_mixture_of_experts_that_calls_itself_llama(mixtral) -> None:
    from geodrift.pretrained import open_llama

    with pytest.raises(GeodriftError, match=r"cannot run architecture 'llama' \(a mixture of experts\): it is a mixture of experts .*llama, mistral"):
        open_llama(mixtral["gguf"])


def test_both_faces_at_their_default_k_give_the_same_report_on_a_4_expert_router(mixtral, tmp_path) -> None:
    # k = 8 (both faces' default) is above the router's rank (4 experts): one rule, k clipped for that
    # projection with a note, from the shell as from Python.

    shell = runner.invoke(app, ["scan", str(mixtral["hf"]), "--null-draws", "12", "--quiet",
                                "--json-out", str(tmp_path / "scan.json")])
    assert shell.exit_code == 0, shell.output
    from_shell = geodrift.read(tmp_path / "scan.json").report  # NaN (an undefined vector) read back as NaN
    from_python = geodrift.scan(mixtral["hf"], null_draws=12)
    assert from_shell.k == from_python.k == 8
    assert from_shell.role("router").k == from_python.role("router").k == EXPERTS
    assert any(n.endswith(f"k clipped from 8 to {EXPERTS} (the rank of its matrices)") for n in from_python.notes)
    assert from_shell.notes == from_python.notes and "k clipped from 8" in shell.stdout
    for a, b in zip(from_shell.roles + from_shell.across_experts, from_python.roles + from_python.across_experts,
                    strict=True):
        assert (a.role, a.k, a.verdict, a.path_verdict) == (b.role, b.k, b.verdict, b.path_verdict)
        for space in ("v", "u"):
            assert [vc.mean for vc in a.spaces[space].vectors] == pytest.approx(
                [vc.mean for vc in b.spaces[space].vectors], abs=1e-6, nan_ok=True)
            assert [vc.null_mean for vc in a.spaces[space].vectors] == pytest.approx(
                [vc.null_mean for vc in b.spaces[space].vectors], abs=1e-6, nan_ok=True)


def test_the_python_face_draws_the_experts_figure_the_cli_writes(mixtral, tmp_path) -> None:
    report = geodrift.scan(mixtral["gguf"], **FAST)
    figure = report.plot(tmp_path / "experts.png", kind="experts", dpi=60)
    assert (tmp_path / "experts.png").read_bytes()[:4] == b"\x89PNG"
    titles = [ax.get_title() for ax in figure.axes]
    assert sum("across depth" in t for t in titles) == sum("within a layer" in t for t in titles) == 3
    assert overlapping_texts(figure) == []  # the bottom row's titles once ran into each other
    legend = {t.get_text() for t in figure.legends[0].get_texts()}
    assert {"null of v1 (mean to +3 sd)", "null of u1 (mean to +3 sd)"} <= legend
    dense = geodrift.scan(mixtral["gguf"], roles="q,k", **FAST)
    with pytest.raises(GeodriftError, match=r"plot\(kind='experts'\): this report has no experts"):
        dense.plot(kind="experts")


def test_a_k_no_projection_can_use_is_refused_by_both_faces_alike(mixtral) -> None:
    with pytest.raises(GeodriftError, match=r"^k=100: larger than the rank of every selected projection in .*hf "
                                            r"\(the largest: attn_q, rank 32 = min of 32 x 32\); use k=32 or less$"):
        geodrift.scan(mixtral["hf"], k=100, null_draws=4)
    shell = runner.invoke(app, ["scan", str(mixtral["hf"]), "--k", "100", "--null-draws", "4"])
    assert shell.exit_code != 0 and "--k 100: larger than the rank of every selected projection" in str(shell.exception)
