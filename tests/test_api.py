"""The Python API: geodrift.scan on paths, nn.Modules and (wrapped) state dicts; Report.to_frame; the README example."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import geodrift
from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from tests._checkpoints import hf_config, write_hf_folder
from tests._figure_text import overlapping_texts

README = Path(__file__).resolve().parent.parent / "README.md"


def _model(seed: int = 0) -> LlamaLM:
    return LlamaLM(vocab_size=40, d_model=32, n_layers=4, n_heads=4, d_ff=48, generator=torch.Generator().manual_seed(seed))


def _numbers(report: geodrift.ScanReport) -> list[tuple[str, str, float, float, float]]:
    return [(r.role, s.space, s.vectors[0].mean, s.vectors[0].null_mean, s.vectors[0].z)
            for r in report.roles for s in r.spaces.values()]


def test_an_nn_module_scans_like_the_same_weights_written_as_a_safetensors_folder(tmp_path: Path):
    model = _model()
    folder = write_hf_folder(tmp_path / "hf", {k: v.detach() for k, v in model.state_dict().items()},
                             hf_config(n_layers=4, d=32, n_heads=4, n_kv=4, d_ff=48, vocab=40), dtype=torch.float32)
    in_memory = geodrift.scan(model, null_draws=10, k=2, ov=False)
    # geodrift's LlamaLM has no Hugging Face config: no head counts, so the default view is folded, with a note why
    assert in_memory.view == "folded" and len(in_memory.notes) == 1 and "head counts are unknown" in in_memory.notes[0]
    assert geodrift.scan(folder, null_draws=2, k=1, ov=False, roles="q,k").view == "canonical"  # config.json: heads
    on_disk = geodrift.scan(folder, view="folded", null_draws=10, k=2, ov=False)
    assert in_memory.origin == "LlamaLM (in memory)"
    for a, b in zip(_numbers(in_memory), _numbers(on_disk), strict=True):
        assert a[:2] == b[:2] and a[2:] == pytest.approx(b[2:], abs=1e-5)
    assert len(in_memory.trajectory) == 2 * len(in_memory.roles)


@pytest.mark.parametrize("wrap", [
    lambda sd: {"model": sd, "optimizer": {"state": {}, "param_groups": []}, "epoch": 3},
    lambda sd: {"state_dict": sd, "global_step": 10},
    lambda sd: {"module." + k: v for k, v in sd.items()},
], ids=["model-key", "state_dict-key", "ddp-prefix"])
def test_wrapped_training_checkpoints_are_unwrapped_in_memory_and_from_a_pickle(tmp_path: Path, wrap):
    sd = {k: v.detach().clone() for k, v in _model(1).state_dict().items()}
    bare = _numbers(geodrift.scan(sd, null_draws=8, k=1))
    path = tmp_path / "ckpt.pt"
    torch.save(wrap(sd), path)
    for source in (wrap(sd), path):
        got = _numbers(geodrift.scan(source, null_draws=8, k=1))
        for a, b in zip(got, bare, strict=True):
            assert a[:2] == b[:2] and a[2:] == pytest.approx(b[2:], abs=1e-6)


def test_a_state_dict_without_tensors_and_a_wrong_object_are_one_line_errors(tmp_path: Path):
    with pytest.raises(GeodriftError, match="holds no tensors .*top-level keys: epoch, optimizer"):
        geodrift.scan({"epoch": 3, "optimizer": {"lr": 1.0, "momentum": 0.9}})
    with pytest.raises(GeodriftError, match="cannot scan a int"):
        geodrift.scan(3)
    with pytest.raises(GeodriftError, match="^k=0: must be at least 1"):
        geodrift.scan(_model(), k=0)
    with pytest.raises(GeodriftError, match="unknown projection 'qq'"):
        geodrift.scan(_model(), roles=["q", "qq"])
    report = geodrift.scan(_model(), roles=["q", "attn_k"], layers=[0, 1, 2], null_draws=4, k=1)
    assert [r.role for r in report.roles] == ["attn_q", "attn_k"] and report.roles[0].layers == [0, 1, 2]


def test_a_hugging_face_module_brings_its_config_so_the_ov_composite_is_scanned():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    report = geodrift.scan(transformers.LlamaForCausalLM(config), null_draws=8, k=2)
    assert report.role("attn_ov") is not None and report.role("attn_k").shape == (16, 32)


def test_to_frame_is_one_tidy_row_per_projection_space_k_and_pair():
    report = geodrift.scan(_model(), null_draws=8, k=2, ov=False)
    frame = report.to_frame()
    assert len(frame) == 7 * 2 * 2 * 3  # roles x spaces x k x adjacent pairs
    assert {"abs_cos", "null_mean", "null_std", "z", "random_floor", "projection", "space", "k", "layer"} <= set(frame)
    q_v1 = frame[(frame.role == "attn_q") & (frame.space == "v") & (frame.k == 1)]
    assert q_v1.abs_cos.mean() == pytest.approx(report.role("attn_q").spaces["v"].vectors[0].mean, abs=1e-6)


def test_import_geodrift_stays_light_and_summary_and_to_frame_without_pandas_are_one_line_errors():
    code = ("import sys, geodrift; light = 'torch' not in sys.modules; sys.modules['pandas'] = None\n"
            "from geodrift.continuity import Report\n"
            "for call in ('summary', 'to_frame'):\n"
            "    try:\n        getattr(Report('x', 'raw', 1, 2, 0, []), call)()\n    except Exception as e:\n"
            "        print(light, type(e).__name__, e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("True GeodriftError") for line in lines), out
    assert "Report.summary() needs pandas" in lines[0] and "Report.to_frame() needs pandas" in lines[1]
    # an install command that works from a checkout too (the extra alone needs the package on an index)
    assert all(".venv/bin/pip install -e '.[frame]'" in line for line in lines), out


def test_the_readmes_first_command_installs_what_the_python_example_needs():
    # summary() is a DataFrame, always: the venv of `bash scripts/setup.sh` (no --test) must have pandas.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    setup = (README.parent / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert "bash scripts/setup.sh &&" in README.read_text(encoding="utf-8")
    plain = re.search(r"^else\n\s*(?:#.*\n\s*)*(?:\w+=\S+ )?\"\$VPY\" -m pip install --quiet -e \"\.\[([\w,]+)\]\"", setup,
                      re.M)
    assert plain is not None, "scripts/setup.sh: the default install is not -e \".[EXTRA]\""
    extras = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("pandas") for extra in plain.group(1).split(",") for dep in extras[extra])


def test_the_readme_notebook_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- api-example -->\n```python\n(.*?)```", text, re.S)
    assert block is not None, "README: the Python API example (after <!-- api-example -->) is missing"
    assert "report.plot(" in block.group(1) and "report.summary()" in block.group(1)
    assert '"gauge"' in block.group(1) and "report.view" in block.group(1)  # what a reader needs to read a row
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    summary, report = namespace["summary"], namespace["report"]
    assert len(summary) == 2 * len(report.roles)  # type: ignore[arg-type, attr-defined]
    assert {"mean", "null_mean", "z", "verdict", "criterion", "path_verdict", "path_criterion"} <= set(summary)  # type: ignore[arg-type]
    assert (tmp_path / "scan.png").read_bytes()[:4] == b"\x89PNG"
    assert type(namespace["figure"]).__name__ == "Figure"


def test_summary_has_the_summary_csv_columns_and_its_k1_rows(tmp_path: Path):
    from geodrift.render.files import write_csv

    report = geodrift.scan(_model(), null_draws=8, k=2, ov=False)
    summary = report.summary()
    assert summary.equals(report.to_frame(kind="summary"))
    csv_path = write_csv(report, tmp_path / "scan.csv")[0]
    pd = pytest.importorskip("pandas")
    from_csv = pd.read_csv(csv_path)
    assert list(summary.columns) == list(from_csv.columns)
    k1 = from_csv[from_csv.k == 1].reset_index(drop=True)
    assert len(summary) == len(report.roles) * 2 == len(k1)
    # each verdict on the row of the space it judged (the predicted one; both of V's in this raw view), not on the
    # other; V's as every face says it (none/found), the others' as judged
    judged = [row.space == row.predicted_space or row.predicted_space == "none" for row in k1.itertuples()]
    assert sum(judged) == len(report.roles) + (report.role("v") is not None)
    for column in ("verdict", "criterion", "path_verdict", "path_criterion"):
        said = {"verdict": 0, "path_verdict": 1}
        assert [v for v, j in zip(summary[column], judged, strict=True) if j] == [
            report.role(role).said()[said[column]] if column in said else getattr(report.role(role), column)
            for role, j in zip(k1.role, judged, strict=True) if j]
        assert summary[column][[not j for j in judged]].isna().all()
    assert set(summary[summary.role == "attn_v"].verdict) <= {"none", "found"}
    assert summary["mean"].tolist() == pytest.approx(k1["mean"].tolist(), abs=1e-12)
    q = report.role("q")
    row = summary[(summary.role == "attn_q") & (summary.space == "v")].iloc[0]
    assert (row["mean"], row["null_mean"], row["z"]) == pytest.approx(
        (q.spaces["v"].vectors[0].mean, q.spaces["v"].vectors[0].null_mean, q.spaces["v"].vectors[0].z))
    assert row["path_criterion"] == q.path_criterion
    assert set(summary.columns) - {"model", "label", "layers"} <= set(report.to_dict()["roles"][0]) | {
        "space", "dim", "k", "mean", "median", "baseline", "null_mean", "null_std", "z", "sigma2_wa", "view",
        "sigma2_wa_upper", "sigma2_null_mean", "subspace_overlap", "subspace_baseline", "gauge", "moved_by"}
    assert len(report.to_frame()) == 7 * 2 * 2 * 3  # the default is still the per-pair table
    with pytest.raises(GeodriftError, match=r"to_frame\(kind='rows'\): unknown kind"):
        report.to_frame(kind="rows")


def test_role_accepts_the_roles_names_and_the_repr_is_a_few_lines():
    report = geodrift.scan(_model(), null_draws=8, k=1)
    assert report.role("q") is report.role("attn_q") is report.role("Q") is report.roles[0]
    assert report.role("gate").role == "mlp_gate" and report.role("mlp_gate") is report.role("gate")
    assert report.role("router") is None and report.role("attn_ov") is None  # no head counts in memory: no OV
    text = repr(report)
    assert len(text.splitlines()) <= 6 and len(text) < 600
    assert text.startswith("ScanReport(LlamaLM (in memory), folded view, k=1, 8 null draws, seed 0)")
    assert "7 projections (Q K V O Gate Up Down) over 4 layers 0..3" in text
    assert "shared frame: " in text and "depth path: " in text and "geodrift.scan(<LlamaLM>, k=1, null_draws=8)" in text


def test_python_errors_name_the_keyword_argument_and_elide_long_lists():
    model = _model()
    cases = [({"layers": list(range(94))}, r"^layers=\[0, 1, 2, \.\.\. \(94 in all\)\]: 4, 5, 6, 7, 8 \.\.\. \(90 in all\)"),
             ({"layers": "0-2,x"}, r"^layers='0-2,x': cannot read"),
             ({"layers": [0, -1]}, r"^layers=\[0, -1\]: \[-1\] are not layer indices"),
             ({"roles": "q,zz"}, r"^roles='q,zz': unknown projection 'zz'"),
             ({"null_draws": 1}, r"^null_draws=1: must be in \[2, "),
             ({"seed": -1}, r"^seed=-1: must be an integer"),
             ({"view": "cooked"}, r"^view='cooked': 'cooked' is not a view")]
    for options, message in cases:
        with pytest.raises(GeodriftError, match=message) as caught:
            geodrift.scan(model, **options)
        assert "--" not in str(caught.value) and len(str(caught.value)) < 300, str(caught.value)


def test_the_cli_still_names_its_options(tmp_path: Path):
    from typer.testing import CliRunner

    from geodrift.cli.main import app

    result = CliRunner().invoke(app, ["scan", "--layers", "0-2,x"])
    assert result.exit_code != 0 and str(result.exception).startswith("--layers: cannot read")


def test_every_scan_report_carries_its_provenance(tmp_path: Path):
    import json

    from typer.testing import CliRunner

    from geodrift.cli.main import app
    from geodrift.scanner.embedded import embedded_model_path
    from geodrift.scanner.fingerprint import file_fingerprint

    report = geodrift.scan(layers=[0, 1, 2], roles="q", null_draws=4, k=1)
    p = report.provenance
    assert p["call"] == "geodrift.scan(roles='q', layers=[0, 1, 2], k=1, null_draws=4)"
    assert p["geodrift"] == geodrift.__version__ and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", p["written"])
    assert p["model"] == file_fingerprint(embedded_model_path()) and p["model"]["files"] == 1
    out = tmp_path / "scan.json"
    result = CliRunner().invoke(app, ["scan", "--roles", "q", "--layers", "0-2", "--k", "1", "--null-draws", "4",
                                      "--json-out", str(out), "--quiet", "--brief"])
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())["provenance"]
    assert written["model"] == p["model"] and written["call"].startswith("geodrift ")
    # different weights, different fingerprints; the same weights in memory, the same one
    a, b = geodrift.scan(_model(0), null_draws=4, k=1), geodrift.scan(_model(1), null_draws=4, k=1)
    assert a.provenance["model"]["sha256"] != b.provenance["model"]["sha256"]
    assert geodrift.scan(_model(0), null_draws=4, k=1).provenance["model"] == a.provenance["model"]
    assert geodrift.ScanReport.of(geodrift.continuity.Report.from_dict(a.to_dict())).provenance == a.provenance


def test_plot_returns_the_scan_figure_and_saves_it_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from geodrift.render.scan_plot import write_plot

    monkeypatch.chdir(tmp_path)
    report = geodrift.scan(_model(), null_draws=4, k=1, ov=False)
    figure = report.plot()
    assert list(tmp_path.iterdir()) == []
    titles = [ax.get_title() for ax in figure.axes]
    assert len(titles) == 7 and titles[0].startswith("Q")
    trajectory = report.plot(tmp_path / "t.svg", kind="trajectory")
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml") and len(trajectory.axes) == 7
    write_plot(report, tmp_path / "cli.png", dpi=72)  # what --plot writes: the same figure, pixel for pixel
    report.plot(tmp_path / "api.png", dpi=72)
    assert (tmp_path / "api.png").read_bytes() == (tmp_path / "cli.png").read_bytes()
    with pytest.raises(GeodriftError, match=r"plot\(kind='bars'\): unknown kind"):
        report.plot(kind="bars")


def test_fingerprint_samples_stay_in_range_past_two_to_the_24_elements():
    from geodrift.scanner.fingerprint import sample_indices, tensors_fingerprint

    n = 2**24 + 3  # a float32 linspace rounds its last sample to 2**24 + 4, one past the end
    picks = sample_indices(n, 4096)
    assert picks[0] == 0 and picks[-1] == n - 1 and len(picks) == 4096 and bool((picks[1:] > picks[:-1]).all())
    big = torch.zeros(n, dtype=torch.uint8)
    assert tensors_fingerprint({"w": big}) != tensors_fingerprint({"w": big.clone().index_fill_(0, picks[-1:], 1)})


@pytest.mark.heavy  # the default run has this face on real-sized models in tests/test_real_sized.py
def test_the_embedded_model_loaded_through_transformers_scans_in_memory_like_its_gguf():
    """A real-sized model in memory (the embedding has 28.3 M elements, past float32's 2^24 integers)."""
    transformers = pytest.importorskip("transformers")
    from geodrift.lm.hf import hf_config as model_config
    from geodrift.pretrained import llama_from_checkpoint, open_llama

    llama = llama_from_checkpoint(open_llama(None))
    config = {k: v for k, v in model_config(llama).items() if k != "geodrift_model"}
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    model.load_state_dict(llama.state_dict())
    del llama
    assert model.model.embed_tokens.weight.numel() > 2**24
    in_memory = geodrift.scan(model, layers="0-5", null_draws=10, k=1)
    from_file = geodrift.scan(layers="0-5", null_draws=10, k=1)
    assert in_memory.origin.endswith("(in memory)")
    for a, b in zip(_numbers(in_memory), _numbers(from_file), strict=True):
        assert a[:2] == b[:2] and a[2:] == pytest.approx(b[2:], abs=1e-4)
    assert [r.verdict for r in in_memory.roles] == [r.verdict for r in from_file.roles]


def test_the_figure_has_no_overlapping_text_and_a_legend_for_every_band(tmp_path: Path):
    from dataclasses import replace

    report = geodrift.scan(_model(), null_draws=8, k=1)
    # the longest titles there are: V with a frame and a path the theory did not predict
    v = report.roles.index(report.role("v"))
    report.roles[v] = replace(report.roles[v], verdict="fails", path_verdict="fails")
    figure = report.plot(tmp_path / "scan.png", dpi=100)
    assert overlapping_texts(figure) == []
    titles = [ax.get_title() for ax in figure.axes]
    assert "V · predicted neither\na frame (not predicted)\na path (not predicted)" in titles
    assert "Q · predicted v1\nframe " in titles[0]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert {"v1 (input space)", "u1 (output space)", "null of v1 (mean to +3 sd)", "null of u1 (mean to +3 sd)",
            "random floor √(2/πd)", "thick: predicted space"} == set(legend)
    _assert_every_line_style_is_in_the_legend(figure)
    assert figure._suptitle.get_text().startswith("frame ") and " · folded view\n" in figure._suptitle.get_text()
    # every title lies within the figure (none cut at its edge)
    width = figure.get_window_extent().width
    assert all(0 <= ax.title.get_window_extent().x0 and ax.title.get_window_extent().x1 <= width for ax in figure.axes)


def _assert_every_line_style_is_in_the_legend(figure) -> None:
    # each (colour, line style) drawn in a panel has a legend entry drawn the same way (a null band's entry holds
    # its dashed mean too); a predicted space's thicker line has the "thick" entry
    from matplotlib.colors import to_hex

    def styles(lines):
        return {(to_hex(line.get_color()), line.get_linestyle()) for line in lines}

    from matplotlib.lines import Line2D

    drawn = styles(line for ax in figure.axes for line in ax.get_lines())
    legend = styles(figure.legends[0].findobj(Line2D))
    assert drawn <= legend, drawn - legend


def test_the_canonical_figure_names_its_verdict_and_view_and_greys_the_aligned_spaces():
    from matplotlib.colors import to_hex

    from geodrift.render.figures import ALIGNED_COLOR, PREDICTED_WIDTH

    report = geodrift.scan(layers="0-3", null_draws=8, k=1)
    assert report.view == "canonical"
    figure = report.plot()
    judged = [r for r in report.roles if r.verdict in ("holds", "fails")]
    frame = sum(r.verdict == "holds" for r in judged)
    assert figure._suptitle.get_text().startswith(f"frame {frame}/{len(judged)}, path ")
    assert "canonical view" in figure._suptitle.get_text()
    assert overlapping_texts(figure) == []
    _assert_every_line_style_is_in_the_legend(figure)
    for ax, role in zip(figure.axes, report.roles, strict=True):
        grey = [line for line in ax.get_lines() if to_hex(line.get_color()) == to_hex(ALIGNED_COLOR)]
        aligned = [x for x, space in role.spaces.items() if space.gauge == "aligned"]
        assert len(grey) == len(aligned)  # each aligned space one grey line, no null band
        assert len(ax.collections) == 2 - len(aligned)  # the null bands of the measured spaces only
        thick = [line for line in ax.get_lines() if line.get_linewidth() == PREDICTED_WIDTH]
        assert len(thick) == (role.predicted_space is not None)
