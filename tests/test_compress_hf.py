"""`compress prune` on any transformers causal LM: small random Qwen2 and GPT-2 written with save_pretrained
(plus SmolLM2's tokenizer.json) run through transformers' own modules with transformers' own perplexity;
geodrift's Llama and the transformers path agree on the embedded SmolLM2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from geodrift.cli.main import main
from geodrift.compress.model import load_setup, window_nll
from geodrift.compress.prune import PruneSpec, evaluate_pruning

transformers = pytest.importorskip("transformers")
VOCAB = 49152  # the embedded SmolLM2 tokenizer's ids
FAST = ["--seq-len", "32", "--eval-windows", "4", "--calib-windows", "2", "--quiet"]


def _with_tokenizer(folder: Path) -> Path:
    from geodrift.pretrained import smollm2_tokenizer

    backend = smollm2_tokenizer().backend
    assert backend is not None
    backend.save(str(folder / "tokenizer.json"))
    return folder


def _save(model: torch.nn.Module, folder: Path) -> Path:
    torch.manual_seed(0)
    model.save_pretrained(str(folder), safe_serialization=True)
    return _with_tokenizer(folder)


def qwen2_folder(folder: Path, n_layers: int = 4) -> Path:
    """A random Qwen2ForCausalLM (q/k/v biases, GQA, untied head) as a Hugging Face folder."""
    torch.manual_seed(1)
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                      num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
                                      tie_word_embeddings=False, max_position_embeddings=256,
                                      initializer_range=0.3)
    return _save(transformers.Qwen2ForCausalLM(config), folder)


def gpt2_folder(folder: Path, n_layers: int = 4) -> Path:
    """A random GPT2LMHeadModel (learned positions, LayerNorm, Conv1D, tied head) as a Hugging Face folder."""
    torch.manual_seed(2)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=n_layers, n_head=4, n_positions=256,
                                     initializer_range=0.3)
    return _save(transformers.GPT2LMHeadModel(config), folder)


def gemma_folder(folder: Path, version: int = 1, n_layers: int = 4) -> Path:
    """A random Gemma (1: scaled embedding, (1 + w) RMSNorm, GeLU; 2: plus soft-capping and sandwich norms;
    3: plus q/k norms, sliding-window layers with their own rotary base) as a Hugging Face folder."""
    torch.manual_seed(3)
    shape = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": n_layers,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 256,
             "initializer_range": 0.3}
    if version == 1:
        model = transformers.GemmaForCausalLM(transformers.GemmaConfig(**shape))
    elif version == 2:
        model = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**shape, sliding_window=16))
    else:
        model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**shape, sliding_window=16))
    return _save(model, folder)


def hf_perplexity(folder: Path, windows: torch.Tensor) -> float:
    """transformers' own perplexity of ``windows (W, T + 1)``: its forward on the whole window."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none").mean(1)
    return math.exp(float(nll.mean()))


@pytest.fixture(scope="module", params=["qwen2", "gpt2"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    make = qwen2_folder if request.param == "qwen2" else gpt2_folder
    return make(tmp_path_factory.mktemp(request.param) / request.param)


def test_unpruned_perplexity_equals_transformers_own(folder: Path) -> None:
    setup = load_setup(folder, seq_len=32, calib_windows=2, eval_windows_count=4)
    assert type(setup.model).__name__ == "HFCausalLM" and setup.n_layers == 4
    ours = math.exp(float(window_nll(setup.model, setup.evaluation).mean()))
    assert ours == pytest.approx(hf_perplexity(folder, setup.evaluation), rel=1e-5)
    assert not 0.5 * VOCAB < ours < 2 * VOCAB  # weights large enough that the perplexity says something
    # Skipping a layer changes the perplexity (the indices are honoured), and the prefix route agrees.
    from geodrift.compress.model import layer_states

    skipped = window_nll(setup.model, setup.evaluation, [2])
    assert not torch.allclose(skipped, window_nll(setup.model, setup.evaluation))
    prefix = layer_states(setup.model, setup.evaluation)
    assert torch.allclose(window_nll(setup.model, setup.evaluation, [2], prefix=prefix), skipped, atol=1e-5)


def test_library_prune_runs_every_method(folder: Path) -> None:
    setup = load_setup(folder, seq_len=32, calib_windows=2, eval_windows_count=4)
    result = evaluate_pruning(setup, PruneSpec(max_remove=2, random_seeds=2, k=2, null_draws=10))
    assert [c.method for c in result.curves] == ["geom-v1", "geom-s2wa", "block-influence", "angular", "greedy"]
    assert all(len(c.ppl) == 2 and all(math.isfinite(p) for p in c.ppl) for c in result.curves)
    assert result.baseline_ppl == pytest.approx(hf_perplexity(folder, setup.evaluation), rel=1e-5)


def test_cli_prune_saves_a_pruned_folder_transformers_loads_with_the_same_perplexity(folder: Path,
                                                                                      tmp_path: Path) -> None:
    out, saved = tmp_path / "prune.json", tmp_path / "pruned"
    with pytest.raises(SystemExit) as exit_info:
        main(["compress", "prune", str(folder), "--max-remove", "2", "--methods", "geom-v1,block-influence",
              "--random-seeds", "2", "--null-draws", "10", "--k", "2", "--save", str(saved),
              "--save-method", "block-influence", "--json-out", str(out), *FAST])
    assert exit_info.value.code == 0
    result = json.loads(out.read_text())
    windows = load_setup(folder, seq_len=32, calib_windows=1, eval_windows_count=4).evaluation
    assert result["baseline_ppl"] == pytest.approx(hf_perplexity(folder, windows), rel=1e-5)
    curve = next(c for c in result["curves"] if c["method"] == "block-influence")
    assert transformers.AutoConfig.from_pretrained(str(saved)).num_hidden_layers == 2
    assert hf_perplexity(saved, windows) == pytest.approx(curve["ppl"][1], rel=1e-5)
    assert transformers.AutoConfig.from_pretrained(str(folder)).num_hidden_layers == 4  # the input is untouched
    assert result["saved"]["tokenizer"] == ["tokenizer.json"] and (saved / "tokenizer.json").is_file()
    with pytest.raises(SystemExit) as exit_info:  # transformers' files are listed as geodrift's: --force replaces them
        main(["compress", "prune", str(folder), "--max-remove", "1", "--methods", "block-influence", "--random-seeds",
              "2", "--save", str(saved), "--save-method", "block-influence", "--force", *FAST])
    assert exit_info.value.code == 0
    assert transformers.AutoConfig.from_pretrained(str(saved)).num_hidden_layers == 3


@pytest.mark.parametrize("version", [1, 2, 3])
def test_prune_runs_gemma_with_transformers_own_perplexity(version: int, tmp_path: Path) -> None:
    # Gemma's embedding scale and Gemma 2's logit soft-cap are applied as their forwards do; Gemma 3's layers get
    # both rotary tables. The adapter's check (layer by layer = the model's own forward) passes, and the numbers match.
    folder = gemma_folder(tmp_path / f"gemma{version}", version, n_layers=3)
    setup = load_setup(folder, seq_len=32, calib_windows=2, eval_windows_count=2)
    ours = math.exp(float(window_nll(setup.model, setup.evaluation).mean()))
    assert ours == pytest.approx(hf_perplexity(folder, setup.evaluation), rel=1e-5)
    result = evaluate_pruning(setup, PruneSpec(max_remove=1, methods=("block-influence",), random_seeds=2))
    assert all(math.isfinite(p) for p in result.curves[0].ppl)


@pytest.mark.parametrize(("make", "reason"), [
    (qwen2_folder, "'qwen2': its Q, K and V projections carry biases"),
    (lambda f, n_layers: gemma_folder(f, 1, n_layers), "'gemma': it scales the embeddings by sqrt(hidden size)"),
    (lambda f, n_layers: gemma_folder(f, 3, n_layers), "'gemma3': it normalises each head's queries and keys"),
    (gpt2_folder, "'gpt2': Q, K and V are one fused Conv1D (c_attn)"),
])
def test_share_refuses_each_non_llama_architecture_in_one_line_with_its_reason(make, reason: str, tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    folder = make(tmp_path / "model", n_layers=2)
    with pytest.raises(SystemExit) as exit_info:
        main(["compress", "share", str(folder), *FAST])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"compress share cannot run architecture {reason}" in lines[0], lines
    assert "geodrift's own Llama (llama, mistral" in lines[0] and "compress prune runs" in lines[0]


def test_missing_weights_are_refused_not_drawn_at_random(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from safetensors.torch import load_file, save_file

    qwen = qwen2_folder(tmp_path / "qwen", n_layers=2)
    state = load_file(str(qwen / "model.safetensors"))
    save_file({k: v for k, v in state.items() if "q_proj.bias" not in k}, str(qwen / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(SystemExit) as exit_info:
        main(["compress", "prune", str(qwen), "--max-remove", "1", *FAST])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "q_proj.bias" in lines[0] and "qwen2" in lines[0], lines


def test_geodrift_llama_and_transformers_agree_on_the_embedded_model(tmp_path: Path) -> None:
    """Parity of the two paths: the embedded SmolLM2 (GGUF) written as an HF folder, run by geodrift's Llama
    (the fast path) and by transformers through the adapter."""
    from geodrift.lm.hf import save_hf
    from geodrift.lm.hf_causal import HFCausalLM
    from geodrift.pretrained import model_from_checkpoint, open_model

    fast = load_setup(None, seq_len=32, calib_windows=1, eval_windows_count=4)
    folder = _with_tokenizer(save_hf(fast.model, tmp_path / "smollm2"))
    slow = model_from_checkpoint(open_model(folder), via_transformers=True)
    assert isinstance(slow, HFCausalLM)
    a = window_nll(fast.model, fast.evaluation, [3, 7])
    b = window_nll(slow, fast.evaluation, [3, 7])
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), (a, b)
    assert torch.allclose(window_nll(fast.model, fast.evaluation), window_nll(slow, fast.evaluation), atol=1e-5)


def test_without_transformers_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    qwen = qwen2_folder(tmp_path / "qwen", n_layers=2)
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)  # as if not installed
    with pytest.raises(SystemExit) as exit_info:
        main(["compress", "prune", str(qwen), "--max-remove", "1", *FAST])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "pip install 'geodrift[hf]'" in lines[0], lines
