"""geodrift finetune: corpora, a run on a small Llama written as a Hugging Face folder, its checkpoints read back by
drift and transformers, the bad inputs of issue 41 (one line, exit 2), and the sweep's fine-tuning run kind."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

from geodrift.errors import GeodriftError
from geodrift.finetune.evaluate import paired
from geodrift.finetune.grid import grid_specs
from geodrift.finetune.run import run_finetune, run_folder
from geodrift.finetune.spec import FinetuneSpec
from geodrift.lm.corpora import CORPUS_NAMES, corpus_info, load_named
from geodrift.pretrained import keep_tokenizer

VOCAB = 49152  # the embedded SmolLM2's tokenizer, written beside the small model


@pytest.fixture(scope="module")
def small_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 2-layer Llama (width 32) with the embedded model's tokenizer: a real Hugging Face folder, small weights."""
    folder = tmp_path_factory.mktemp("small") / "llama"
    state = {name: (t if "norm" in name else 0.05 * t) for name, t in llama_state(n_layers=2, vocab=VOCAB).items()}
    write_hf_folder(folder, state, hf_config(n_layers=2, vocab=VOCAB), dtype=torch.float32)
    keep_tokenizer(None, folder)
    return str(folder)


def _spec(model: str, **changes: object) -> FinetuneSpec:
    values: dict[str, object] = {"corpus": "django-de", "lr": 1e-3, "steps": 2, "model": model, "seq_len": 16,
                                 "checkpoints": (1, 2), "probe_windows": 4, "domain_windows": 3, "taylor_windows": 2,
                                 "reverts": True, "revert_windows": 2}
    values.update(changes)
    return FinetuneSpec(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_each_named_corpus_loads_offline_with_a_held_out_split_and_a_licence(name: str):
    corpus = load_named(name)
    assert len(corpus.train) > 10_000 and len(corpus.valid) > 1_000
    assert corpus_info(name).licence in corpus.source or name == "stdlib-docs"
    assert load_named(name).sha256 == corpus.sha256  # deterministic


def test_the_shifted_corpora_are_what_they_say():
    assert "löschen" in load_named("django-de").train  # German
    assert any("\u3040" <= ch <= "\u30ff" for ch in load_named("django-ja").valid)  # kana
    code = load_named("sympy-code").train
    assert "def " in code and '"""' not in code  # code, docstrings removed


def test_an_unknown_corpus_is_refused_naming_the_corpora():
    with pytest.raises(GeodriftError, match="no such corpus; use one of stdlib-docs"):
        load_named("klingon-poetry")


def test_the_unbuilt_lora_arm_is_refused_not_run_as_full_fine_tuning():
    from geodrift.finetune.spec import FinetuneSpec

    with pytest.raises(GeodriftError, match="--arm 'lora': use full \\(the LoRA arm is not built yet\\)"):
        FinetuneSpec(corpus="django-de", lr=1e-4, steps=2, arm="lora").check()


def test_paired_difference_and_its_standard_error():
    before, after = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.5, 2.4, 3.6, 4.5])
    d = paired(before, after)
    diff = after - before
    assert d["mean"] == pytest.approx(float(diff.mean()))
    assert d["se"] == pytest.approx(float(diff.std()) / 2)


def test_a_run_writes_checkpoints_that_drift_and_transformers_read(small_llama: str, tmp_path: Path):
    spec = _spec(small_llama, keep="all")
    record = run_finetune(spec, tmp_path)
    assert record["status"] == "complete" and [c["step"] for c in record["checkpoints"]] == [1, 2]
    last = record["checkpoints"][-1]
    assert last["forgetting"]["n"] == 4 and math.isfinite(last["forgetting"]["se"])
    assert set(last["indicators"]["value"]) >= {"rel_dw", "rotation_topk", "rotation_topk_gauge", "intruders",
                                                "frame_share"}
    assert last["indicators"]["value"]["rel_dw"] > 0 and len(record["reverts"]) == 2
    assert last["taylor"]["per_layer"].keys() == {"0", "1"}
    # drift reads the series (the base and both checkpoints)
    from geodrift.jobs.series import DriftRequest, run_drift

    paths = [c["path"] for c in record["checkpoints"]]
    rep = run_drift(DriftRequest([small_llama, *paths], k=2, null_draws=4, view="raw"))
    assert len(rep.checkpoints) == 3 and all(r.angle_deg < 90 for r in rep.rotation)
    # transformers loads the last checkpoint and gives the NLL the run recorded on its first probe window
    from transformers import AutoModelForCausalLM

    from geodrift.finetune.model import load_trainable
    from geodrift.finetune.run import windows

    hf = AutoModelForCausalLM.from_pretrained(paths[-1], torch_dtype=torch.float32).eval()
    lm = load_trainable(paths[-1], torch.device("cpu"))
    window = windows(spec, lm)["probe_windows"][:1]
    with torch.no_grad():
        logits = hf(window[:, :-1]).logits
    nll = float(torch.nn.functional.cross_entropy(logits[0], window[0, 1:]))
    assert nll == pytest.approx(last["probe"][0], rel=1e-4)
    # a finished run is reused, not re-run
    assert run_finetune(spec, tmp_path)["seconds"] == record["seconds"]


def test_keep_final_deletes_the_measured_intermediate_checkpoints(small_llama: str, tmp_path: Path):
    record = run_finetune(_spec(small_llama, keep="final", reverts=False, indicators=False), tmp_path)
    folders = sorted(p.name for p in (run_folder(tmp_path, _spec(small_llama, keep="final", reverts=False,
                                                                 indicators=False)) / "hf").iterdir())
    assert folders == ["step-000002"] and record["checkpoints"][0]["path_deleted"]


def test_non_finite_weights_stop_the_run_and_keep_the_last_good_checkpoint(small_llama: str, tmp_path: Path):
    spec = _spec(small_llama, lr=1e30, steps=3, checkpoints=(1, 2, 3), reverts=False, indicators=False)
    with pytest.raises(GeodriftError, match=r"non-finite weights after step 2 .*; stopped - the last good checkpoint is .*step-000001 \(step 1\)") as caught:
        run_finetune(spec, tmp_path)
    record = json.loads((run_folder(tmp_path, spec) / "run.json").read_text())
    assert record["status"] == "stopped" and record["note"] == str(caught.value)
    for entry in record["checkpoints"]:  # every checkpoint written is finite
        from safetensors.torch import load_file

        assert all(torch.isfinite(t).all() for t in load_file(Path(entry["path"]) / "model.safetensors").values())


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "geodrift", "finetune", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def test_bad_inputs_get_one_line_and_exit_2(small_llama: str, tmp_path: Path):
    from safetensors.torch import save_file

    gpt2 = tmp_path / "gpt2.safetensors"
    save_file({"h.0.attn.c_attn.weight": torch.zeros(8, 24), "h.1.attn.c_attn.weight": torch.zeros(8, 24),
               "wte.weight": torch.zeros(50, 8)}, str(gpt2))
    foreign = tmp_path / "taken"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    cases = [(["--corpus", "no-such", "--lr", "1e-4", "--steps", "2"], "--corpus no-such: no such corpus"),
             ([str(gpt2), "--corpus", "django-de", "--lr", "1e-4", "--steps", "2"], "architecture"),
             ([small_llama, "--corpus", "django-de", "--lr", "1e-4", "--steps", "2", "--out", str(foreign)],
              "which geodrift did not write"),
             ([small_llama, "--corpus", "django-de", "--lr", "1e-4", "--steps", "2", "--device", "cuda"],
              "--device cuda: no CUDA device")]
    for args, expected in cases:
        result = _cli(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.stderr, (args, result.stderr)
    assert (foreign / "notes.txt").read_text() == "mine" and sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_the_cli_runs_and_prints_forgetting_and_learning(small_llama: str, tmp_path: Path):
    result = _cli(small_llama, "--corpus", "sympy-code", "--lr", "1e-3", "--steps", "2", "--seq-len", "16",
                  "--probe-windows", "3", "--domain-windows", "3", "--out", str(tmp_path / "run"), "--json", "-q",
                  cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["kind"] == "finetune_run" and len(doc["checkpoints"]) == 2
    assert (tmp_path / "run" / "sympy-code_lr0.001_full" / "seed0" / "run.json").is_file()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_the_cuda_path_gives_the_cpu_numbers(small_llama: str, tmp_path: Path):
    spec = _spec(small_llama, reverts=False, indicators=False)
    cpu = run_finetune(spec, None)
    gpu = run_finetune(spec, None, device="cuda")
    assert gpu["device"].startswith("cuda")
    assert gpu["checkpoints"][-1]["forgetting"]["mean"] == pytest.approx(cpu["checkpoints"][-1]["forgetting"]["mean"],
                                                                          abs=1e-3)


@pytest.mark.heavy  # the toy grid twice, once on a local Ray cluster
def test_the_sweep_runs_the_grid_locally_and_on_ray_with_the_same_numbers(small_llama: str, tmp_path: Path):
    from geodrift.sweep.grid import Job
    from geodrift.sweep.runner import run_sweep

    specs = grid_specs("tiny", small_llama)[1:2]
    jobs = [Job(spec, spec.seed, "tiny") for spec in specs]
    local = run_sweep(jobs, workers=2, out=str(tmp_path / "local"))
    ray = run_sweep(jobs, backend="ray", workers=1, out=str(tmp_path / "ray"))
    for a, b in zip(local, ray, strict=True):
        assert a.error is None and b.error is None, (a.error, b.error)
        assert isinstance(a.result, dict) and isinstance(b.result, dict)
        for ca, cb in zip(a.result["checkpoints"], b.result["checkpoints"], strict=True):
            assert ca["probe"] == cb["probe"] and ca["indicators"]["value"] == cb["indicators"]["value"]
    # resumed: a second local sweep reuses every finished run
    again = run_sweep(jobs, workers=1, out=str(tmp_path / "local"))
    assert [o.result["seconds"] for o in again if isinstance(o.result, dict)] == \
        [o.result["seconds"] for o in local if isinstance(o.result, dict)]


def _record(label: str, corpus: str, forgetting: list[float], values: list[float], noise: list[float],
            reverts: list[float] | None = None, per_layer: list[float] | None = None) -> dict[str, object]:
    checkpoints = []
    for step, (f, v, n) in enumerate(zip(forgetting, values, noise, strict=True), 1):
        ind = {name: v for name in ("rel_dw", "rotation_v1", "rotation_topk", "rotation_topk_gauge", "intruders",
                                     "frame_share", "frame_energy")}
        floor = {name: n for name in ind}
        checkpoints.append({"step": step, "forgetting": {"mean": f, "se": 0.01, "n": 4},
                            "learning": {"mean": -f, "se": 0.01, "n": 4}, "taylor": {"total": f / 2, "per_layer": {
                                str(i): x for i, x in enumerate(per_layer or [])}},
                            "indicators": {"value": ind, "noise": floor,
                                           "null": {"frame_share_random": 0.01, "rotation_topk_unrelated_deg": 80.0,
                                                    "rotation_v1_unrelated_deg": 85.0},
                                           "per_layer": {name: {str(i): x for i, x in enumerate(per_layer or [])}
                                                         for name in ind}}})
    return {"label": label, "spec": {"corpus": corpus, "probe": "stdlib-docs", "lr": 1e-4}, "checkpoints": checkpoints,
            "reverts": None if reverts is None else [{"layer": i, "recovery": r, "se": 0.001}
                                                      for i, r in enumerate(reverts)]}


def test_the_analysis_ranks_signs_and_compares_layers_as_documented():
    from geodrift.finetune.analysis import analyse

    records = [_record("c", "stdlib-docs", [-0.3, -0.2], [1.0, 2.0], [3.0, 3.0], reverts=[-1, -2, -3],
                       per_layer=[1, 2, 3]),
               _record("a", "django-de", [0.1, 0.2], [3.0, 4.0], [2.0, 2.0], reverts=[1, 2, 3], per_layer=[1, 2, 3]),
               _record("b", "sympy-code", [0.3, 0.4], [5.0, 6.0], [2.0, 2.0], reverts=[3, 2, 1], per_layer=[1, 2, 3])]
    by_name = {r.name: r for r in analyse(records)}
    rel = by_name["rotation_topk"]
    assert rel.pooled_rho == pytest.approx(1.0)  # the indicator orders the six points as forgetting does
    assert rel.pooled_ci[0] <= rel.pooled_rho <= rel.pooled_ci[1]
    assert (rel.control_right, rel.control_total) == (2, 2)  # below its random-update floor on the control: right
    assert rel.per_layer_runs == {"a": pytest.approx(1.0), "b": pytest.approx(-1.0)} and rel.per_layer_rho == 0.0
    assert rel.control_per_layer == {"c": pytest.approx(-1.0)}
    assert not rel.ships  # per-layer rho 0 < 0.5
    # a magnitude that equals its floor by construction predicts no sign at all
    same = [_record("c", "stdlib-docs", [-0.3, -0.2], [1.0, 2.0], [1.0, 2.0])]
    assert {r.name: r.control_right for r in analyse(same)}["rel_dw"] == 0


def test_forgetting_aware_merge_weights_against_the_midpoint(small_llama: str, tmp_path: Path):
    from geodrift.finetune.merge_eval import evaluate_merges, indicator_weights

    spec = _spec(small_llama, corpus="sympy-code", lr=3e-3, keep="final", indicators=False)
    record = run_finetune(spec, tmp_path)
    result = evaluate_merges(record, {"all base": dict.fromkeys(range(2), 0.0)}, tmp_path)
    assert result["methods"]["uniform"]["verdict"] == "—"
    base = result["methods"]["all base"]
    assert base["probe"] == pytest.approx(result["base"]["probe"], abs=1e-5)  # a = 0 everywhere is the base
    assert base["domain"] == pytest.approx(result["base"]["domain"], abs=1e-5)
    assert base["verdict"] in ("beats", "ties", "loses")
    assert evaluate_merges(record, {"all base": dict.fromkeys(range(2), 0.0)}, tmp_path) == result  # kept, reused
    assert indicator_weights([0.0, 0.0]) == {0: 0.5, 1: 0.5}


def test_the_vectorised_bootstrap_rho_is_spearmans():
    import numpy as np
    from scipy.stats import spearmanr

    from geodrift.finetune.analysis import _spearman_rows

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, size=(5, 9)).astype(float), rng.normal(size=(5, 9))  # ties in a
    expected = [spearmanr(x, y).statistic for x, y in zip(a, b, strict=True)]
    assert _spearman_rows(a, b) == pytest.approx(expected)
    assert np.isnan(_spearman_rows(np.ones((1, 4)), b[:1, :4])).all()
