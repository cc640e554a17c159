"""geodrift.compress: pruning by layer index on one model, rankings, and the rank-test verdict.

A tiny random Llama written as a real Hugging Face folder (safetensors + config.json, with the
embedded SmolLM2's tokenizer as tokenizer.json) stands in for a checkpoint; the scores' arithmetic
is checked on constructed inputs whose answer is known.
"""

from __future__ import annotations

import copy
import math
import statistics
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

from geodrift.compress import rank
from geodrift.compress.model import layer_states, load_setup, window_nll
from geodrift.compress.prune import PruneSpec, evaluate_pruning
from geodrift.continuity import MeasureSpec, measure
from geodrift.weights import PREDICTED_SPACE, TRANSFORMER_ROLES, WeightSet

VOCAB = 49152  # the embedded SmolLM2 tokenizer's ids


def tiny_llama_folder(folder: Path, n_layers: int = 4, model_type: str = "llama") -> Path:
    """A random Llama (d 32, 4 heads, GQA 2) as an HF folder with SmolLM2's tokenizer.json beside it."""
    from geodrift.pretrained import smollm2_tokenizer

    state = {k: 0.3 * v if "layernorm" not in k and "norm" not in k else v
             for k, v in llama_state(n_layers=n_layers, vocab=VOCAB, seed=1).items()}
    write_hf_folder(folder, state, hf_config(model_type, n_layers=n_layers, vocab=VOCAB), dtype=torch.float32)
    backend = smollm2_tokenizer().backend
    assert backend is not None
    backend.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama_folder(tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def setup(tiny: Path):
    return load_setup(tiny, seq_len=32, calib_windows=3, eval_windows_count=4)


def test_calibration_and_evaluation_windows_come_from_disjoint_splits(setup) -> None:
    from geodrift.lm.text import load_corpus

    corpus = load_corpus()
    assert setup.corpus["sha256"] == corpus.sha256
    calib = {tuple(w.tolist()) for w in setup.calib}
    assert not calib & {tuple(w.tolist()) for w in setup.evaluation}


def test_skipping_layers_by_index_equals_a_model_without_them(setup) -> None:
    model = setup.model
    pruned = copy.deepcopy(model)
    del pruned.model.layers[2]
    del pruned.model.layers[0]
    expected = window_nll(pruned, setup.evaluation)
    assert torch.allclose(window_nll(model, setup.evaluation, [0, 2]), expected, atol=1e-5)
    prefix = layer_states(model, setup.evaluation)
    assert torch.allclose(window_nll(model, setup.evaluation, [2, 3], prefix=prefix),
                          window_nll(model, setup.evaluation, [2, 3]), atol=1e-5)
    # and the full model equals the simulator's own perplexity path
    from geodrift.lm.text import perplexity

    full = window_nll(model, setup.evaluation)
    assert abs(float(full.mean()) - perplexity(model, setup.evaluation)["nll"]) < 1e-5


def test_greedy_removes_the_layer_with_the_lowest_calibration_nll(setup) -> None:
    order, history = rank.greedy_order(setup.model, setup.calib, 2)
    brute = {c: float(window_nll(setup.model, setup.calib, [c]).mean()) for c in range(setup.n_layers)}
    assert order[0] == min(brute, key=brute.__getitem__)
    assert history[0] == pytest.approx(brute[order[0]], abs=1e-5)
    second = {c: float(window_nll(setup.model, setup.calib, [order[0], c]).mean())
              for c in range(setup.n_layers) if c != order[0]}
    assert order[1] == min(second, key=second.__getitem__)


def test_block_influence_and_angular_distance_find_an_identity_block() -> None:
    g = torch.Generator().manual_seed(0)
    x = [torch.randn(2, 5, 8, generator=g)]
    for layer in range(5):  # layers 2 and 3 leave the stream unchanged
        x.append(x[-1] if layer in (2, 3) else torch.randn(2, 5, 8, generator=g))
    states = torch.stack(x)
    bi = rank.block_influence(states)
    assert bi[2] == pytest.approx(0, abs=1e-9) and bi[3] == pytest.approx(0, abs=1e-9)
    assert min(bi[i] for i in (0, 1, 4)) > 0.2
    assert rank.angular_block(states, 2) == [2, 3]


def test_geometry_scores_rank_layers_that_continue_their_neighbours_frame_first() -> None:
    # Layers 0-2 share one direction in each projection's predicted space; layers 3-5 are unrelated.
    g = torch.Generator().manual_seed(0)
    d = 24
    shared = torch.randn(d, generator=g)
    tensors = {}
    for role in TRANSFORMER_ROLES:
        for layer in range(6):
            W = 0.1 * torch.randn(d, d, generator=g)
            if layer < 3:
                other = torch.randn(d, generator=g)
                W = W + 3 * (torch.outer(shared, other) if PREDICTED_SPACE[role] == "u" else torch.outer(other, shared))
            tensors[(role, layer)] = W
    report = measure(WeightSet.from_tensors(tensors), MeasureSpec(k=2, null_draws=20))
    scores = rank.geometry_scores(report, 6)
    order = rank.order_from_scores(scores["geom-v1"])
    assert set(order[:3]) == {0, 1, 2}
    v1 = scores["geom-v1"]
    assert min(v1[:2]) > v1[2] > max(v1[4:])  # layer 2 continues layer 1 only


def test_random_rankings_are_seeded_permutations() -> None:
    assert rank.random_ranking(10, 3) == rank.random_ranking(10, 3)
    assert sorted(rank.random_ranking(10, 4)) == list(range(10))
    assert rank.random_ranking(10, 3) != rank.random_ranking(10, 4)


def test_prune_run_is_complete_and_consistent(setup) -> None:
    spec = PruneSpec(max_remove=2, random_seeds=2, greedy_windows=1, k=2, null_draws=10)
    result = evaluate_pruning(setup, spec)
    assert [c.method for c in result.curves] == list(spec.methods)
    for c in result.curves:
        assert [len(s) for s in c.removed] == [1, 2]
    greedy = next(c for c in result.curves if c.method == "greedy")
    assert set(greedy.removed[0]) < set(greedy.removed[1])
    angular = next(c for c in result.curves if c.method == "angular")
    assert angular.removed[1][1] - angular.removed[1][0] == 1
    assert len(result.spearman) == 6 and all(-1 <= r["rho"] <= 1 for r in result.spearman)
    assert len(result.random_mean) == 2 and result.random_std[0] >= 0 and len(result.random_median) == 2
    assert all(0 <= f <= 1 for f in result.beats_random["geom-v1"])
    assert result.rows()[0]["baseline_ppl"] == result.baseline_ppl


def _curves(geom: list[float], randoms: list[list[float]]) -> tuple[list, list]:
    from geodrift.compress.prune import Curve

    n = len(geom)
    removed = [list(range(i + 1)) for i in range(n)]
    return ([Curve("geom-v1", removed, geom, [0.1] * n)],
            [Curve(f"random-{s}", removed, r, [0.1] * n) for s, r in enumerate(randoms)])


def _orders(geom: list[float], randoms: list[list[float]]) -> list[str]:
    from geodrift.compress.prune import prune_verdicts

    curves, rand = _curves(geom, randoms)
    return [v.verdict for v in prune_verdicts(curves, rand, [])]


def test_the_pruning_verdict_is_a_rank_test_against_twenty_random_orders() -> None:
    randoms = [[40.0 + s, 50.0 + 2 * s] for s in range(20)]
    assert _orders([20.0, 25.0], randoms) == ["holds"]  # beats all 20: p = 1/21
    assert _orders([40.5, 51.0], randoms) == ["holds"]  # beats 19 of 20: p = 2/21 <= 0.10
    assert _orders([41.5, 53.0], randoms) == ["tie"]  # beats 18 of 20: p = 3/21
    assert _orders([200.0, 400.0], randoms) == ["fails"]
    assert _orders([45.0, 60.0], randoms) == ["tie"]
    assert _orders([20.0, 25.0], randoms[:19]) == ["n/a"]  # fewer than 20 orders: no verdict


def test_one_random_order_that_hits_a_critical_layer_cannot_flip_the_verdict() -> None:
    # The case of issue 20: the method loses to every order but one, which explodes (5,582 at n = 4).
    randoms = [[42.0 + 0.1 * s, 50.0 + 0.3 * s] for s in range(19)] + [[60.0, 5582.0]]
    geom = [46.0, 180.4]
    from geodrift.compress.prune import Curve, prune_verdicts

    curves, rand = _curves(geom, randoms)
    logs = [sum(map(math.log, r)) / 2 for r in randoms]
    mine, mu, sd = sum(map(math.log, geom)) / 2, statistics.fmean(logs), statistics.stdev(logs)
    assert mu - 2 * sd < mine < mu + 2 * sd  # the old mean ± 2 std rule: "tie", the one order inflates the spread
    assert [v.verdict for v in prune_verdicts(curves, rand, [])] == ["fails"]
    assert isinstance(curves[0], Curve)


def test_a_random_order_judged_as_a_method_holds_at_most_ten_percent_of_the_time() -> None:
    # Exchangeable draws: the rank test's false-positive rate is 2/21 by construction.
    from geodrift.compress.prune import rank_test

    g = torch.Generator().manual_seed(0)
    draws = torch.randn(2000, 21, generator=g).tolist()
    holds = sum(rank_test(row[0], row[1:])[0] <= 0.10 for row in draws) / len(draws)
    fails = sum(rank_test(row[0], row[1:])[1] <= 0.10 for row in draws) / len(draws)
    assert holds < 0.12 and fails < 0.12  # expected 2/21 = 0.095; 2000 draws: SE 0.0066


def test_the_agreement_verdict_needs_a_positive_significant_rank_correlation() -> None:
    from geodrift.compress.prune import prune_verdicts

    curves, randoms = _curves([40.0], [[40.0], [41.0]])
    rows = [{"data_free": "geom-v1", "reference": "block-influence", "rho": rho, "p_value": p, "layers": 30}
            for rho, p in ((0.6, 0.001), (0.3, 0.11), (-0.6, 0.001))]
    assert [prune_verdicts(curves, randoms, [r])[1].verdict for r in rows] == ["holds", "fails", "fails"]
    assert prune_verdicts(curves, randoms[:1], [])[0].verdict == "n/a"


def test_the_window_nll_is_the_float64_cross_entropy_of_the_embedded_models_logits() -> None:
    # The real SmolLM2-135M on 8 held-out windows of the embedded corpus. The log-softmax over the contiguous
    # vocabulary axis is within 2e-5 nats of float64 (over a strided (B, vocab, T) axis it was 1.5e-4 off).
    from geodrift.compress.model import nll_from_hidden
    from geodrift.compress.sources import load_compress_setup

    setup, _ = load_compress_setup(None, calib_windows=1, eval_count=8)
    model, windows = setup.model, setup.evaluation
    with torch.no_grad():
        h = model.run_layers(model.embed(windows[:, :-1]), range(model.n_layers))
        logits = model.logits(h).double()
    exact = -torch.log_softmax(logits, -1).gather(-1, windows[:, 1:, None])[..., 0].mean(1)
    ours = nll_from_hidden(model, h, windows[:, 1:])
    assert ours.shape == (8,) and ours.dtype == torch.float32
    assert float((ours.double() - exact).abs().max()) < 2e-5
    assert 1.0 < float(exact.mean()) < 6.0  # a real model on real text, far below chance (log 49152 = 10.8)
