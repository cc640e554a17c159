"""geodrift merge on real small Llamas (a trained base, two fine-tunes, gauged copies): the three acceptance checks of
issue 41 item 3, the folder transformers loads, and the refusals.

The models (tests/_merge_models.py) are geodrift's Llama trained on the offline corpus; the held-out NLL is
measured on its held-out split. Each check would fail on a merge that ignores the gauge: the same merge
with ``--align off`` is shown far off in the same test.
"""

from __future__ import annotations

import json
from pathlib import Path

import _merge_models as fam
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from geodrift.cli.main import main
from geodrift.compress.awq_fold import activation_scales, fold_awq
from geodrift.errors import GeodriftError
from geodrift.gauge.hadamard import random_hadamard_rotation
from geodrift.gauge.orbit import fold_gains, random_gauge, rotate_residual
from geodrift.jobs.merge import MergeRequest, run_merge
from geodrift.merging.evaluate import geodrift_nll, transformers_nll
from geodrift.merging.methods import MergeSettings, merge_tensors
from geodrift.merging.rebasin import permutation_match, rotation_match

TOLERANCE = 0.005  # nats of held-out NLL (issue 41)


def _gauged(kind: str, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    wide = {k: v.double() for k, v in sd.items()}
    if kind == "random":
        return random_gauge(wide, fam.SHAPE, torch.Generator().manual_seed(5), condition=100.0, sigma=1.0)
    if kind == "awq":
        model = fam.new_model()
        model.load_state_dict(sd)
        return fold_awq(wide, fam.SHAPE, activation_scales(model, fam.heldout(8)))
    rotation = random_hadamard_rotation(32, torch.Generator().manual_seed(6))
    return rotate_residual(fold_gains(wide, fam.SHAPE), fam.SHAPE, rotation)


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("family")
    ft1, ft2 = fam.fine_tunes()
    folders = {"base": fam.write(fam.trained_state(0), root / "base"), "ft1": fam.write(ft1, root / "ft1"),
               "ft2": fam.write(ft2, root / "ft2")}
    for kind in ("random", "awq", "hadamard"):
        folders[kind] = fam.write(_gauged(kind, ft2), root / kind)
    return folders


def _merged_nll(tmp: Path, name: str, models: list[Path], **options: object) -> float:
    out = tmp / name
    run_merge(MergeRequest(models=tuple(models), out=out, **options))  # type: ignore[arg-type]
    return geodrift_nll(out, fam.heldout())


def test_the_gauged_copies_compute_the_fine_tunes_function(family: dict[str, Path]):
    reference = geodrift_nll(family["ft2"], fam.heldout())
    for kind in ("random", "awq", "hadamard"):
        assert abs(geodrift_nll(family[kind], fam.heldout()) - reference) < 1e-4, kind


@pytest.mark.parametrize("kind", ["random", "awq", "hadamard"])
@pytest.mark.parametrize(("method", "with_base"), [("linear", False), ("ties", True)])
def test_gauge_robustness_merge_of_a_gauged_copy_equals_the_plain_merge(family: dict[str, Path], tmp_path: Path,
                                                                        kind: str, method: str, with_base: bool):
    base = {"base": family["base"]} if with_base else {}
    plain = _merged_nll(tmp_path, "plain", [family["ft1"], family["ft2"]], method=method, **base)
    gauged = _merged_nll(tmp_path, "gauged", [family["ft1"], family[kind]], method=method, **base)
    assert abs(gauged - plain) < TOLERANCE
    # the same merge, blind to the gauge, is far off (the check has teeth); at this size an AWQ fold's scales
    # (mean|x|^0.5 of activations that vary little) damage a blind merge by less than the tolerance, so for it
    # the test only shows that the fold moved the weights
    if kind == "awq":
        up = "model.layers.0.mlp.up_proj.weight"
        moved, own = (load_file(str(family[k] / "model.safetensors"))[up] for k in ("awq", "ft2"))
        assert float((moved - own).norm() / own.norm()) > 0.1
    else:
        blind = _merged_nll(tmp_path, "blind", [family["ft1"], family[kind]], method=method, align="off", **base)
        assert blind - plain > 10 * TOLERANCE


def test_do_no_harm_auto_leaves_a_merge_of_two_fine_tunes_as_it_was(family: dict[str, Path], tmp_path: Path):
    pair = [family["ft1"], family["ft2"]]
    result = run_merge(MergeRequest(models=tuple(pair), out=tmp_path / "auto", base=family["base"], method="ties"))
    assert [c.one_gauge for c in result.checks] == [True, True] and result.frame == "as read"
    run_merge(MergeRequest(models=tuple(pair), out=tmp_path / "off", base=family["base"], method="ties", align="off"))
    auto, off = (load_file(str(tmp_path / n / "model.safetensors")) for n in ("auto", "off"))
    assert all(torch.equal(auto[k], off[k]) for k in off)
    forced = _merged_nll(tmp_path, "on", pair, base=family["base"], method="ties", align="on")
    assert abs(forced - geodrift_nll(tmp_path / "off", fam.heldout())) < TOLERANCE


def test_the_merged_folder_loads_in_transformers_with_geodrifts_nll(family: dict[str, Path], tmp_path: Path):
    out = tmp_path / "m"
    run_merge(MergeRequest(models=(family["ft1"], family["random"]), out=out, method="slerp"))
    windows = fam.heldout(8)
    assert abs(transformers_nll(out, windows) - geodrift_nll(out, windows)) < 1e-4
    record = json.loads((out / "geodrift_merge.json").read_text())
    assert record["kind"] == "merge_report" and record["checks"][0]["applied"] is True


def _barrier(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    losses = []
    for t in (0.0, 0.5, 1.0):
        model = fam.new_model()
        model.load_state_dict({k: ((1 - t) * a[k].double() + t * b[k].double()).float() for k in a})
        losses.append(geodrift_nll_of(model))
    return losses[1] - (losses[0] + losses[2]) / 2


def geodrift_nll_of(model: torch.nn.Module) -> float:
    from geodrift.lm.text import perplexity

    return perplexity(model, fam.heldout(16))["nll"]


@pytest.mark.heavy  # trains three seed pairs of the simulator
def test_different_seeds_alignment_lowers_the_barrier_and_the_control_has_none():
    from geodrift.merging.frame import check_pair, fold_reference

    a, b = fam.trained_state(1), fam.trained_state(2)
    fa, fb = fold_gains(a, fam.SHAPE), fold_gains(b, fam.SHAPE)
    wide_a, wide_b = ({k: v.double() for k, v in x.items()} for x in (fa, fb))
    aligned, check = check_pair(fold_reference(a, fam.SHAPE), b, fam.SHAPE, "B", "A")
    naive = _barrier(a, b)
    assert not check.related  # two seeds share no lineage
    assert _barrier(fa, aligned) < naive
    assert _barrier(fa, permutation_match(wide_a, wide_b, fam.SHAPE)) < naive
    assert _barrier(fa, rotation_match(wide_a, wide_b, fam.SHAPE)) < naive
    # control: a model against an exact gauge of itself - a barrier naively, none once aligned
    twin = random_gauge({k: v.double() for k, v in a.items()}, fam.SHAPE, torch.Generator().manual_seed(9))
    moved, _ = check_pair(fold_reference(a, fam.SHAPE), twin, fam.SHAPE, "twin", "A")
    assert _barrier(fa, moved) == pytest.approx(0.0, abs=1e-4) and _barrier(fa, twin) > 0.05


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.05, 1.0), st.integers(0, 3))
def test_each_rule_is_a_merge_of_identical_models_to_that_model(t: float, density: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    sd = {"w": torch.randn(5, 3, generator=g), "g": torch.rand(3, generator=g)}
    for method in ("linear", "slerp", "task-arithmetic", "ties", "dare"):
        base = sd if method != "linear" else None
        out = merge_tensors(method, [sd] if method == "slerp" else [sd, sd], base,
                            MergeSettings(t=t, density=density, seed=seed))
        assert all(torch.allclose(out[k], sd[k].double(), atol=1e-12) for k in sd), method


def test_ties_and_dare_follow_their_papers_on_a_worked_example():
    base = {"w": torch.zeros(4)}
    a, b = {"w": torch.tensor([1.0, -2.0, 0.1, 3.0])}, {"w": torch.tensor([2.0, 1.0, -0.2, -1.0])}
    ties = merge_tensors("ties", [a, b], base, MergeSettings(density=0.5))["w"].tolist()
    # trim to the 2 largest per model: a -> [0, -2, 0, 3], b -> [2, 1, 0, 0]; signs: +, -, 0, + ; disjoint means
    assert ties == [2.0, -2.0, 0.0, 3.0]
    dare = merge_tensors("dare", [a], base, MergeSettings(density=0.5, seed=1))["w"]
    assert set(torch.unique(dare / a["w"].double()).tolist()) <= {0.0, 2.0}


# ---- refusals: one line, exit 2, nothing written -------------------------------------------------------------
def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as end:
        main(["merge", *map(str, args), "-q"])
    err = capsys.readouterr().err.strip()
    assert end.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_bad_input_is_one_line_and_exit_2(family: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from _checkpoints import hf_config, llama_state, write_hf_folder

    out = tmp_path / "out"
    ft1 = family["ft1"]
    qwen = write_hf_folder(tmp_path / "qwen", llama_state(n_layers=2), hf_config("qwen2", n_layers=2))
    assert "qwen2" in _cli([ft1, qwen, "--out", out], capsys)
    wider = tmp_path / "wider"
    fam_state = fam.trained_state(0)
    write_hf_folder(wider, {**fam_state, "model.layers.1.mlp.up_proj.weight": torch.zeros(80, 32),
                            "model.layers.1.mlp.gate_proj.weight": torch.zeros(80, 32),
                            "model.layers.1.mlp.down_proj.weight": torch.zeros(32, 80)},
                    json.loads((ft1 / "config.json").read_text()))
    assert "shapes differ" in _cli([ft1, wider, "--out", out], capsys)
    nan = tmp_path / "nan"
    nan.mkdir()
    bad = load_file(str(ft1 / "model.safetensors"))
    bad["model.layers.0.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(bad, str(nan / "model.safetensors"))
    (nan / "config.json").write_text((ft1 / "config.json").read_text())
    assert "NaN" in _cli([ft1, nan, "--out", out], capsys)
    assert "--base" in _cli([ft1, family["ft2"], "--out", out, "--method", "ties"], capsys)
    assert "--method" in _cli([ft1, family["ft2"], "--out", out, "--method", "average"], capsys)
    unrelated = fam.write(fam.trained_state(1), tmp_path / "seed1")
    assert "lineage differs" in _cli(["--base", unrelated, ft1, "--out", out, "--method", "ties"], capsys)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert "did not write" in _cli([ft1, family["ft2"], "--out", out], capsys)
    assert (out / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_tokenizer_mismatch_is_refused(family: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    import shutil

    from tokenizers import Tokenizer, models

    folders = []
    for name, vocab in (("x", {"a": 0, "b": 1}), ("y", {"a": 0, "c": 1})):
        folder = tmp_path / name
        shutil.copytree(family["ft1"] if name == "x" else family["ft2"], folder)
        Tokenizer(models.WordLevel(vocab, unk_token="a")).save(str(folder / "tokenizer.json"))
        folders.append(folder)
    assert "tokenizer differs" in _cli([*folders, "--out", tmp_path / "out"], capsys)


def test_the_python_face_checks_its_options_before_reading(tmp_path: Path):
    with pytest.raises(GeodriftError, match="--weights"):
        run_merge(MergeRequest(models=("a", "b"), out=tmp_path / "o", weights=(1.0,)))
    with pytest.raises(GeodriftError, match="--density"):
        run_merge(MergeRequest(models=("a",), base="b", out=tmp_path / "o", method="dare", density=0.0))
    assert not (tmp_path / "o").exists()


def test_the_python_face_is_the_command(family: dict[str, Path], tmp_path: Path):
    import geodrift

    result = geodrift.merge(family["ft1"], family["random"], out=tmp_path / "py", method="slerp", t=0.3)
    assert result.checks[0].applied and result.frame == "folded"
    with pytest.raises(SystemExit) as end:
        main(["merge", str(family["ft1"]), str(family["random"]), "--out", str(tmp_path / "cli"), "--method", "slerp",
              "--t", "0.3", "-q"])
    assert end.value.code == 0
    py, cli = (load_file(str(tmp_path / n / "model.safetensors")) for n in ("py", "cli"))
    assert all(torch.equal(py[k], cli[k]) for k in cli)
    with pytest.raises(GeodriftError, match=r"^base=None: method=ties .* pass base=BASE$"):
        geodrift.merge(family["ft1"], family["ft2"], out=tmp_path / "o", method="ties")


@pytest.mark.heavy  # the whole embedded model read, aligned and merged: minutes
def test_the_embedded_gguf_merged_with_itself_is_itself_in_transformers(tmp_path: Path):
    # real size: the embedded SmolLM2-135M (its embedding is past 2^24 elements), read from the GGUF, written as
    # a folder transformers loads, tokenizer included
    from geodrift.merging.evaluate import heldout_windows
    from geodrift.pretrained import embedded_model_path

    gguf, out = embedded_model_path(), tmp_path / "smollm2"
    with pytest.raises(SystemExit) as end:
        main(["merge", str(gguf), str(gguf), "--out", str(out), "-q"])
    assert end.value.code == 0
    assert {"config.json", "model.safetensors", "tokenizer.json", "geodrift_merge.json"} <= {p.name for p in out.iterdir()}
    record = json.loads((out / "geodrift_merge.json").read_text())
    assert record["frame"] == "as read" and record["checks"][0]["one_gauge"] is True
    windows = heldout_windows(out, count=1)
    assert abs(transformers_nll(out, windows) - geodrift_nll(None, windows)) < 1e-4
