"""``compress share`` end to end on a tiny random Llama (a real HF folder): every method at equal parameters,
the model left as it was, the sharing evidence on planted structure, and compressed models that
``transformers`` loads back with the same perplexity from smaller files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from test_compress import tiny_llama_folder

from geodrift.compress.calibrate import collect_moments
from geodrift.compress.evaluate import heldout_nll
from geodrift.compress.factorized import applied, load_factored, save_dense, save_factored
from geodrift.compress.methods import METHODS, Compressor
from geodrift.compress.penalty import sharing_evidence
from geodrift.compress.share_run import ShareSpec, run_share
from geodrift.compress.sources import load_compress_setup
from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama_folder(tmp_path_factory.mktemp("share") / "llama", n_layers=4)


@pytest.fixture(scope="module")
def loaded(tiny: Path):
    return load_compress_setup(tiny, seq_len=32, calib_windows=3, eval_count=4, draws=2)


def test_calibration_and_evaluation_come_from_different_sources(loaded) -> None:
    setup, texts = loaded
    assert texts.corpus["split"] == "sources" and "docstrings" in texts.corpus["calibration"]
    assert "topics" in texts.corpus["evaluation"]
    seen = {tuple(w.tolist()) for d in texts.draws for w in d}
    assert not seen & {tuple(w.tolist()) for w in texts.evaluation}
    assert not {tuple(w.tolist()) for w in texts.draws[0]} & {tuple(w.tolist()) for w in texts.draws[1]}
    assert setup.weights == "F32 projections, F32 embedding, read as float32"


def test_every_method_keeps_the_parameter_budget_and_leaves_the_model_as_it_was(loaded) -> None:
    setup, texts = loaded
    before = {k: v.clone() for k, v in setup.model.state_dict().items()}
    spec = ShareSpec(ratios=(0.4,), calib_draws=1, select_windows=2, verdict_ratio=0.3)
    result, kept = run_share(setup, spec, texts.draws, keep=("geodrift", 0.4))
    assert [r.method for r in result.runs] == list(METHODS)
    for r in result.runs:
        assert r.kept_params <= 0.6 * r.dense_params * 1.0001, r.method
        assert len(r.window_nll) == 4 and math.isfinite(r.nll)
    assert all(torch.equal(v, before[k]) for k, v in setup.model.state_dict().items())
    assert result.weights and {v.verdict for v in result.verdicts} <= {"holds", "fails", "tie"}
    assert len(result.sharing) == 7 and len(result.choices) == 7
    assert kept is not None and kept.method == "geodrift"
    # laco differs from prune-greedy only by the merge: the same layers go
    laco, greedy = result.run("laco", 0.4, 0), result.run("prune-greedy", 0.4, 0)
    assert laco is not None and greedy is not None and laco.removed == greedy.removed


def test_the_factored_forward_equals_the_multiplied_out_weights(loaded) -> None:
    setup, texts = loaded
    comp = Compressor(setup.model, collect_moments(setup.model, texts.draws[0]))
    compressed = comp.build("basis-sharing", 0.3)
    with applied(setup.model, compressed):
        factored = heldout_nll(setup.model, setup.evaluation)
    dense = {}
    for (role, layer), (second, first) in compressed.factors.items():
        p = setup.model.projection(role, layer)
        dense[p] = p.weight.data
        p.weight.data = second @ first
    try:
        multiplied = heldout_nll(setup.model, setup.evaluation)
    finally:
        for p, w in dense.items():
            p.weight.data = w
    assert torch.allclose(factored, multiplied, atol=1e-4)


def _hf_nll(model, windows: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.float()
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none").mean(1)


@pytest.mark.parametrize("method", ["geodrift", "laco", "theory"])
def test_saved_models_load_in_transformers_with_the_same_perplexity_and_smaller_files(loaded, method: str,
                                                                                      tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    setup, texts = loaded
    comp = Compressor(setup.model, collect_moments(setup.model, texts.draws[0]), orders={"prune-greedy": [1, 2]})
    compressed = comp.build(method, 0.4)
    with applied(setup.model, compressed):
        ours = heldout_nll(setup.model, setup.evaluation, compressed.removed)
    small, dense = save_factored(setup, compressed, tmp_path / "small"), save_dense(setup, compressed, tmp_path / "dense")
    assert torch.allclose(_hf_nll(load_factored(small), setup.evaluation), ours, atol=1e-4)
    plain = AutoModelForCausalLM.from_pretrained(dense, torch_dtype=torch.float32).eval()
    assert torch.allclose(_hf_nll(plain, setup.evaluation), ours, atol=1e-4)
    # transformers refuses the factored folder (it would draw the compressed projections at random), naming the loader
    with pytest.raises(ValueError, match=r"geodrift-factored: load it with geodrift\.compress\.factorized\.load_factored"):
        AutoModelForCausalLM.from_pretrained(small)
    if compressed.factors:
        assert (small / "model.safetensors").stat().st_size < (dense / "model.safetensors").stat().st_size
    with pytest.raises(GeodriftError, match="already holds geodrift's earlier output"):
        save_factored(setup, compressed, tmp_path / "small")  # never writes over a folder it did not just create
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dense", "small"]  # no temporary folder left behind


def test_sharing_evidence_finds_a_planted_shared_output_space() -> None:
    # Layers share O's column space in adjacent pairs: sharing O in output space is free.
    g = torch.Generator().manual_seed(0)
    model = LlamaLM(vocab_size=40, d_model=16, n_layers=8, n_heads=2, d_ff=24, generator=g)
    with torch.no_grad():
        for pair in ((0, 1), (2, 3), (4, 5), (6, 7)):
            frame = torch.linalg.qr(torch.randn(16, 4, generator=g))[0]
            for layer in pair:
                shared = frame @ torch.randn(4, 16, generator=g)
                model.projection("attn_o", layer).weight.copy_(shared + 0.2 * torch.randn(16, 16, generator=g))
    moments = collect_moments(model, torch.randint(0, 40, (6, 17), generator=g))
    evidence = {p.role: p for p in sharing_evidence(Compressor(model, moments), 0.3)}
    o = evidence["attn_o"]
    assert o.rank >= 4 and sum(o.spaces["output"].alignment) / 4 > 0.4
    assert sum(o.spaces["input"].alignment) / 4 < 0.2
    assert o.verdicts[0].verdict == "holds", o.verdicts[0].measured
    # Q was drawn at random: its weights share nothing beyond what their common inputs give
    q = evidence["attn_q"]
    assert all(abs(sum(s.alignment) / len(s.alignment)) < 0.3 for s in q.spaces.values())


@pytest.mark.slow
def test_the_equal_rank_verdict_is_calibrated_on_random_models() -> None:
    # False-positive rate on random-init models: 8/140 = 5.7 % measured (expected 5 %).
    torch.set_num_threads(1)
    wrong = total = 0
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        model = LlamaLM(vocab_size=40, d_model=16, n_layers=8, n_heads=2, d_ff=24, generator=g)
        moments = collect_moments(model, torch.randint(0, 40, (6, 17), generator=g))
        for p in sharing_evidence(Compressor(model, moments), 0.3, seed=seed):
            wrong += p.verdicts[0].verdict != ("holds" if p.predicted == "neither" else "tie")
            total += 1
    assert wrong / total < 0.12  # 140 verdicts at a 5 % rate: SD 1.8 points


def test_geodrift_selection_runs_one_forward_per_candidate_and_refits_each_layer_once(loaded, monkeypatch) -> None:
    # The design: one calibration evaluation of the starting spaces, then each of the 7 projections tries its
    # two other spaces (1 + 2 x 7 = 15 forwards of the selection windows, one batch each); every input-space
    # layer is refit once at the ratio's rank, and building geodrift afterwards reuses those refits.
    from geodrift.compress import lowrank

    setup, texts = loaded
    refits = []
    formula = lowrank.refit_coefficients

    def counted(W: torch.Tensor, Bt: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        refits.append(Bt.shape[0])
        return formula(W, Bt, C)

    monkeypatch.setattr(lowrank, "refit_coefficients", counted)
    heads = []
    hook = setup.model.lm_head.register_forward_hook(lambda *_: heads.append(1))
    try:
        comp = Compressor(setup.model, collect_moments(setup.model, texts.draws[0]), select=texts.draws[0][:2])
        choices = comp.choices(0.4)
        assert len(heads) == 15
        assert all(len(c.selection_nll) == 3 for c in choices.values())
        assert len(refits) == 7 * setup.n_layers  # every projection's input-space units, each layer once
        comp.build("geodrift", 0.4)
        assert len(refits) == 7 * setup.n_layers and len(heads) == 15
    finally:
        hook.remove()


@pytest.mark.parametrize(("field", "value", "option"), [("greedy_windows", 0, "--greedy-windows"),
                                                        ("select_windows", -1, "--select-windows")])
def test_share_spec_names_the_window_option_it_refuses(field, value, option):
    # These two checks once sat after a `return` and never ran.
    with pytest.raises(GeodriftError, match=option):
        ShareSpec(**{field: value}).check()


def test_the_default_output_fits_60_lines_at_80_columns_and_the_progress_ends_at_n_of_n(loaded, monkeypatch,
                                                                                       capsys) -> None:
    from geodrift.compress.share_run import BEATS
    from geodrift.render.compress_share import render_share

    setup, texts = loaded
    seen: list[tuple[int, int]] = []
    spec = ShareSpec(select_windows=1)  # every method at 20, 30 and 40 %, the sharing evidence: the default run
    result, _ = run_share(setup, spec, texts.draws, progress=lambda stage, done, total: seen.append((done, total)))
    steps = len(METHODS) * len(spec.ratios) + 1
    assert seen[-1] == (steps, steps) and {total for _, total in seen} == {steps}
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    monkeypatch.setenv("COLUMNS", "80")
    render_share(result)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= 60 and max(map(len, lines)) <= 80, "\n".join(lines)  # every line wrapped, the summary too
    assert all(m in "\n".join(lines) for m in METHODS) and "--full: " in "\n".join(lines)
    criterion = "control's by more than 2 paired standard errors"
    assert criterion in BEATS and criterion not in " ".join(" ".join(lines).split())  # criteria: only with --full
    render_share(result, full=True)
    full = capsys.readouterr().out
    assert len(full.splitlines()) > 3 * len(lines) and "control's" in full and "Cost (wall seconds)" in full
