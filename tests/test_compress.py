"""geodrift.compress: pruning by layer index on one model, rankings, shared bases at equal parameters.

A tiny random Llama written as a real Hugging Face folder (safetensors + config.json, with the
embedded SmolLM2's tokenizer as tokenizer.json) stands in for a checkpoint; the scores' arithmetic
is checked on constructed inputs whose answer is known.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

from geodrift.compress import rank
from geodrift.compress.model import layer_states, load_setup, window_nll
from geodrift.compress.prune import PruneSpec, run_prune
from geodrift.compress.share import (
    POLICIES,
    Assignment,
    Bases,
    groups_of,
    parameters,
    rank_for,
    swapped_weights,
)
from geodrift.compress.share_run import ShareSpec, run_share
from geodrift.continuity import MeasureSpec, measure
from geodrift.errors import GeodriftError
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
    result = run_prune(setup, spec)
    assert [c.method for c in result.curves] == list(spec.methods)
    for c in result.curves:
        assert [len(s) for s in c.removed] == [1, 2]
    greedy = next(c for c in result.curves if c.method == "greedy")
    assert set(greedy.removed[0]) < set(greedy.removed[1])
    angular = next(c for c in result.curves if c.method == "angular")
    assert angular.removed[1][1] - angular.removed[1][0] == 1
    assert len(result.spearman) == 6 and all(-1 <= r["rho"] <= 1 for r in result.spearman)
    assert len(result.random_mean) == 2 and result.random_std[0] >= 0
    assert result.rows()[0]["baseline_ppl"] == result.baseline_ppl


@pytest.mark.parametrize("space", ["input", "output", "private"])
def test_full_rank_factorisation_reproduces_the_weights(space: str) -> None:
    g = torch.Generator().manual_seed(0)
    weights = {("attn_q", layer): torch.randn(6, 10, generator=g) for layer in range(2)}
    full = {"input": 10, "output": 6, "private": 6}[space]
    bases = Bases(weights, [[0, 1]], {("attn_q", space, 0): full})
    for layer, W in bases.approximation("attn_q", space, 0, full).items():
        assert torch.allclose(W, weights[("attn_q", layer)], atol=1e-4)


def test_a_shared_output_frame_is_exact_only_in_output_space() -> None:
    g = torch.Generator().manual_seed(0)
    frame = torch.linalg.qr(torch.randn(12, 3, generator=g))[0]  # (d_out, r): shared output space
    weights = {("attn_o", layer): frame @ torch.randn(3, 12, generator=g) for layer in range(3)}
    bases = Bases(weights, [[0, 1, 2]], {("attn_o", "output", 0): 3, ("attn_o", "input", 0): 3})
    out_err = sum(float((bases.approximation("attn_o", "output", 0, 3)[i] - weights[("attn_o", i)]).norm())
                  for i in range(3))
    in_err = sum(float((bases.approximation("attn_o", "input", 0, 3)[i] - weights[("attn_o", i)]).norm())
                 for i in range(3))
    assert out_err < 1e-4 < in_err


def test_policies_keep_equal_parameters_within_one_rank() -> None:
    shapes = {"q": (576, 576), "gate": (1536, 576), "down": (576, 1536), "k": (192, 576)}
    for shape in shapes.values():
        for ratio in (0.1, 0.4):
            budget = (1 - ratio) * 3 * shape[0] * shape[1]
            for space in ("input", "output", "private"):
                r = rank_for(space, shape, 3, ratio)
                kept = parameters(space, shape, 3, r)
                assert kept <= budget < kept + parameters(space, shape, 3, 1)
    with pytest.raises(GeodriftError, match="--ratios"):
        rank_for("private", (4, 4), 2, 0.99)


def test_swapped_weights_restores_the_originals(setup) -> None:
    before = setup.model.projection("attn_q", 1).weight.detach().clone()
    with swapped_weights(setup.model, {("attn_q", 1): torch.zeros_like(before)}):
        assert float(setup.model.projection("attn_q", 1).weight.detach().abs().sum()) == 0
    assert torch.equal(setup.model.projection("attn_q", 1).weight, before)


def test_share_run_compares_every_policy_and_judges_every_projection(setup) -> None:
    spec = ShareSpec(group_size=2, ratios=(0.2, 0.4), alone_ratio=0.3)
    before = {k: w.detach().clone() for k, w in setup.model.weight_tensors().items()}
    result, _ = run_share(setup, spec)
    assert [c.policy for c in result.curves] == list(POLICIES)
    for c in result.curves:
        assert all(k <= 0.8 * c.dense_params * 1.0001 for k in c.kept_params)
    assert len(result.alone) == 21 and len(result.verdicts) == 7
    q_input = next(a for a in result.alone if a.role == "attn_q" and a.space == "input")
    assert q_input.ranks == [rank_for("input", (32, 32), 2, 0.3)] * 2
    assert {v.verdict for v in result.verdicts} <= {"holds", "fails", "tie"}
    assert all(torch.equal(w, before[k]) for k, w in setup.model.weight_tensors().items())
    assert groups_of(5, 2) == [[0, 1], [2, 3], [4]]
    assert Assignment("x", {"attn_q": "input"}).needs({"attn_q": (32, 32)}, [[0, 1]], 0.5) == {
        ("attn_q", "input", 0): rank_for("input", (32, 32), 2, 0.5)}


def _curves(geom: list[float], randoms: list[list[float]]) -> tuple[list, list]:
    from geodrift.compress.prune import Curve

    n = len(geom)
    removed = [list(range(i + 1)) for i in range(n)]
    return ([Curve("geom-v1", removed, geom, [0.1] * n)],
            [Curve(f"random-{s}", removed, r, [0.1] * n) for s, r in enumerate(randoms)])


@pytest.mark.parametrize(("geom", "verdict"), [([20.0, 25.0], "holds"), ([200.0, 400.0], "fails"),
                                                ([41.0, 52.0], "tie")])
def test_the_pruning_verdict_compares_with_the_random_orders_spread(geom: list[float], verdict: str) -> None:
    from geodrift.compress.prune import prune_verdicts

    curves, randoms = _curves(geom, [[40.0, 50.0], [44.0, 56.0], [38.0, 47.0]])
    got = prune_verdicts(curves, randoms, [])
    assert [v.verdict for v in got] == [verdict] and "random" in got[0].measured


def test_the_agreement_verdict_needs_a_positive_significant_rank_correlation() -> None:
    from geodrift.compress.prune import prune_verdicts

    curves, randoms = _curves([40.0], [[40.0], [41.0]])
    rows = [{"data_free": "geom-v1", "reference": "block-influence", "rho": rho, "p_value": p, "layers": 30}
            for rho, p in ((0.6, 0.001), (0.3, 0.11), (-0.6, 0.001))]
    assert [prune_verdicts(curves, randoms, [r])[1].verdict for r in rows] == ["holds", "fails", "fails"]
    assert len(prune_verdicts(curves, randoms[:1], [])) == 0  # one random seed: no spread, no verdict
