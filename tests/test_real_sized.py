"""Every face on real-sized models: a random ``transformers.LlamaForCausalLM`` with SmolLM2-135M's shapes
(d = 576, 30 layers, 9 heads, 3 KV heads, d_ff = 1536, vocab 49152: the embedding is past 2^24 elements)
and the embedded SmolLM2-135M GGUF loaded through transformers. The Python face (``geodrift.scan``, and the
drift and compare jobs, ``geodrift.jobs.series.run_drift`` / ``run_compare``) on the modules in memory gives
the numbers the CLI gives on the same weights written as safetensors folders (typer's CliRunner, ``--json-out``).

One model of each kind per module (fixtures); a few layers, few null draws: the shapes are real, the
work is small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

import geodrift
from geodrift.cli.main import app
from geodrift.continuity import Report
from geodrift.io.atomic import payload_of

transformers = pytest.importorskip("transformers")
# two 135M-parameter models in memory and on disk, each job run on both faces: 2 to 3.7 GiB on its own, past the
# default run's 3 GiB, so the module runs with the full-size checks (-m heavy, which .ci/run runs)
pytestmark = pytest.mark.heavy
runner = CliRunner()
SMOLLM2 = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True, "rope_theta": 100000.0,
           "rms_norm_eps": 1e-5, "max_position_embeddings": 2048}
LAYERS, NULL_DRAWS, K = "0,1,2,3", 6, 2
OPTIONS = ["--layers", LAYERS, "--null-draws", str(NULL_DRAWS), "--k", str(K), "--quiet"]


def _write(model: Any, folder: Path) -> Path:
    model.save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The two real-sized models in memory and as Hugging Face folders (fp32 safetensors, config.json)."""
    from geodrift.lm.hf import hf_config
    from geodrift.pretrained import llama_from_checkpoint, open_llama, smollm2_tokenizer

    root = tmp_path_factory.mktemp("real_sized")
    torch.manual_seed(0)
    random = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2)).eval()
    llama = llama_from_checkpoint(open_llama(None))
    embedded = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        **{k: v for k, v in hf_config(llama).items() if k != "geodrift_model"})).eval()
    embedded.load_state_dict(llama.state_dict())
    del llama
    folders = {f"{name}_dir": _write(model, root / name) for name, model in (("random", random), ("embedded", embedded))}
    backend = smollm2_tokenizer().backend  # compress reads tokenizer.json beside a folder's weights
    assert backend is not None
    for folder in folders.values():
        backend.save(str(folder / "tokenizer.json"))
    return {"random": random, "embedded": embedded, **folders}


def _cli(args: list[str], out: Path) -> dict[str, Any]:
    result = runner.invoke(app, [*args, *OPTIONS, "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    return payload_of(json.loads(out.read_text()))


def _same_report(a: Report, b: Report) -> None:
    assert [(r.role, r.layers, r.k, r.verdict, r.path_verdict) for r in a.roles] == [
        (r.role, r.layers, r.k, r.verdict, r.path_verdict) for r in b.roles]
    for ra, rb in zip(a.roles, b.roles, strict=True):
        for space in ("v", "u"):
            for va, vb in zip(ra.spaces[space].vectors, rb.spaces[space].vectors, strict=True):
                assert (va.mean, va.null_mean, va.null_std) == pytest.approx((vb.mean, vb.null_mean, vb.null_std),
                                                                             abs=1e-5), (ra.label, space, va.k)


def test_the_shapes_are_smollm2s_and_the_embedding_is_past_2_to_the_24(models: dict[str, Any]) -> None:
    for name in ("random", "embedded"):
        model = models[name]
        assert model.model.embed_tokens.weight.shape == (49152, 576)
        assert model.model.embed_tokens.weight.numel() > 2**24
        assert len(model.model.layers) == 30 and model.model.layers[0].mlp.gate_proj.weight.shape == (1536, 576)
        assert model.model.layers[0].self_attn.k_proj.weight.shape == (192, 576)  # 3 KV heads of 64


@pytest.mark.parametrize("name", ["random", "embedded"])
def test_the_scan_in_memory_is_the_cli_scan_of_the_same_weights(models: dict[str, Any], name: str,
                                                                  tmp_path: Path) -> None:
    from_python = geodrift.scan(models[name], layers=LAYERS, null_draws=NULL_DRAWS, k=K)
    from_shell = Report.from_dict(_cli(["scan", str(models[f"{name}_dir"])], tmp_path / "scan.json"))
    assert from_python.origin.endswith("(in memory)") and not from_shell.origin.endswith("(in memory)")
    assert {r.role for r in from_python.roles} >= {"attn_q", "attn_v", "mlp_down", "attn_ov"}  # OV: head counts read
    _same_report(from_python, from_shell)
    assert from_python.notes == from_shell.notes


def test_drift_in_memory_is_the_cli_drift_of_the_same_weights(models: dict[str, Any], tmp_path: Path) -> None:
    from geodrift.jobs.series import DriftRequest, run_drift

    from_python = run_drift(DriftRequest([models["embedded"], models["random"]], layers=[0, 1, 2, 3], k=K,
                                         null_draws=NULL_DRAWS))
    doc = _cli(["drift", str(models["embedded_dir"]), str(models["random_dir"])], tmp_path / "drift.json")
    assert len(from_python.rotation) == len(doc["rotation"]) > 0
    for row, other in zip(from_python.rotation, doc["rotation"], strict=True):
        assert (row.role, row.space, row.layer, row.checkpoint) == (other["role"], other["space"], other["layer"],
                                                                   other["checkpoint"])
        assert (row.abs_cos, row.null_mean) == pytest.approx((other["abs_cos"], other["null_mean"]), abs=1e-5)
    for a, b in zip(from_python.reports, doc["reports"], strict=True):
        _same_report(a, Report.from_dict(b))
    # a trained model against a random one of its shapes: their first vectors are unrelated
    last = [r for r in from_python.rotation if r.checkpoint == 1]
    assert sum(r.abs_cos for r in last) / len(last) < 0.3


def test_compare_in_memory_is_the_cli_compare_of_the_same_weights(models: dict[str, Any], tmp_path: Path) -> None:
    from geodrift.jobs.series import CompareRequest, run_compare

    from_python = run_compare(CompareRequest(models["embedded"], models["random"], layers=[0, 1, 2, 3], k=K,
                                             null_draws=NULL_DRAWS))
    doc = _cli(["compare", str(models["embedded_dir"]), str(models["random_dir"])], tmp_path / "compare.json")
    assert len(from_python.subspaces) == len(doc["subspaces"]) > 0
    for row, other in zip(from_python.subspaces, doc["subspaces"], strict=True):
        assert (row.role, row.space, row.layer) == (other["role"], other["space"], other["layer"])
        assert (row.overlap, row.overlap_null_mean) == pytest.approx(
            (other["overlap"], other["overlap_null_mean"]), abs=1e-5)
        assert row.principal_angles_deg == pytest.approx(other["principal_angles_deg"], abs=1e-3)


PRUNE = ["--max-remove", "1", "--methods", "geom-v1", "--random-seeds", "2", "--seq-len", "16", "--calib-windows", "1",
         "--eval-windows", "2", "--k", "1", "--null-draws", "4", "--quiet"]


def test_prune_from_python_on_the_transformers_copy_gives_the_cli_s_numbers_on_the_gguf(
        models: dict[str, Any], tmp_path: Path) -> None:
    from geodrift.compress.model import load_setup
    from geodrift.compress.prune import PruneSpec, evaluate_pruning

    shell = runner.invoke(app, ["compress", "prune", *PRUNE, "--json-out", str(tmp_path / "prune.json")])
    assert shell.exit_code == 0, shell.output
    from_gguf = payload_of(json.loads((tmp_path / "prune.json").read_text()))  # the embedded GGUF, from the shell
    setup = load_setup(models["embedded_dir"], seq_len=16, calib_windows=1, eval_windows_count=2)
    library = evaluate_pruning(setup, PruneSpec(max_remove=1, methods=("geom-v1",), random_seeds=2, k=1,
                                         null_draws=4)).to_dict()  # its copy loaded through transformers, in Python
    assert from_gguf["n_layers"] == library["n_layers"] == 30
    assert library["baseline_ppl"] == pytest.approx(from_gguf["baseline_ppl"], rel=1e-4)
    for curve, other in zip(library["curves"] + library["random_curves"],
                            from_gguf["curves"] + from_gguf["random_curves"], strict=True):
        assert (curve["method"], curve["removed"]) == (other["method"], other["removed"])
        assert curve["ppl"] == pytest.approx(other["ppl"], rel=1e-4)
