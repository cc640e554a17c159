"""The canonical view: the same numbers and verdicts for any two checkpoints that differ by an exact gauge.

Real parts: a simulator-size LlamaLM (GQA, 8 layers: enough for the depth-path verdict) and the
embedded SmolLM2-135M (its first 4 layers by default; the whole model under ``-m heavy``), gauged by :func:`geodrift.gauge.orbit.random_gauge` (every generator: folded
gains, a residual rotation, V/O with condition numbers up to 100, Q/K and Up/Down log-scales with
sigma up to 1, hidden and head permutations), scanned through ``geodrift.scan`` and the CLI (a
safetensors folder written by ``save_hf``, against the embedded GGUF).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _gauge import differences, rebuild, smollm2_layers, write_copy
from hypothesis import HealthCheck, given
from strategies import examples, gauge_draws

import geodrift
from geodrift.continuity import Report
from geodrift.errors import GeodriftError
from geodrift.gauge.canonical import canonicalise, column_norms
from geodrift.gauge.orbit import GaugeShape, random_gauge
from geodrift.lm.hf import hf_config, save_hf
from geodrift.lm.llama import LlamaLM

SAME = 1e-5  # every number of two canonical reports (relative beyond 1)
FUNCTION = 1e-5  # max |dlogit| / max |logit| (the RMSNorm runs in float32)


class Model:
    def __init__(self, model: LlamaLM, tokens: int) -> None:
        self.model, self.shape, self.config = model, GaugeShape.from_model(model), hf_config(model)
        self.sd = {k: v.to(torch.float64) for k, v in model.state_dict().items()}
        vocab = model.model.embed_tokens.num_embeddings
        self.ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            self.logits = rebuild(self.sd, model)(self.ids)

    def gauged(self, draw: dict) -> dict[str, torch.Tensor]:
        """The state dict under the random gauge a :func:`strategies.gauge_draws` draw describes."""
        return random_gauge(self.sd, self.shape, torch.Generator().manual_seed(draw["seed"]),
                            condition=draw["condition"], sigma=draw["sigma"], generators=draw["generators"])

    def function_error(self, sd: dict[str, torch.Tensor]) -> float:
        with torch.no_grad():
            return float((rebuild(sd, self.model)(self.ids) - self.logits).abs().max() / self.logits.abs().max())

    def scan(self, sd: dict[str, torch.Tensor], view: str | None = None, **options: object) -> geodrift.ScanReport:
        # view None: geodrift.scan's default, the canonical view for these (llama, config given) models
        return geodrift.scan({k: v.to(torch.float32) for k, v in sd.items()}, view=view, config=self.config,
                             **options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def small() -> Model:
    model = LlamaLM(vocab_size=120, d_model=48, n_layers=8, n_heads=4, n_kv_heads=2, d_ff=80, init_std=0.15,
                    generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(len(name))) + 0.5)
    return Model(model, tokens=10)


@pytest.fixture(scope="module")
def small_report(small: Model) -> geodrift.ScanReport:
    return small.scan(small.sd, null_draws=40)


@pytest.fixture(scope="module", params=[pytest.param(4, id="smollm2-4-layers"),
                                        pytest.param(None, id="smollm2", marks=pytest.mark.heavy)])
def smollm2(request: pytest.FixtureRequest) -> Model:
    """The embedded SmolLM2's real weights in float64: its first 4 layers (the default run, within its 3 GiB; the
    scans read layers 0-3 either way) or the whole model (``heavy``: a float64 copy is 1.1 GB and a gauge check
    holds three)."""
    return Model(smollm2_layers(request.param), tokens=8)


SMOLLM2_SCAN = {"layers": "0-3", "null_draws": 20}


@pytest.fixture(scope="module")
def smollm2_report(smollm2: Model) -> geodrift.ScanReport:
    return smollm2.scan(smollm2.sd, **SMOLLM2_SCAN)


@examples(6, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(draw=gauge_draws())
def test_a_random_exact_gauge_keeps_the_function_the_canonical_weights_and_the_canonical_report(
        small: Model, small_report: geodrift.ScanReport, draw: dict) -> None:
    moved = small.gauged(draw)
    assert small.function_error(moved) <= FUNCTION
    assert small.function_error(canonicalise(moved, small.shape)) <= FUNCTION
    a, b = canonicalise(small.sd, small.shape), canonicalise(moved, small.shape)
    assert max(float((a[k] - b[k]).abs().max() / a[k].abs().max()) for k in a) < 1e-7
    assert differences(small_report, small.scan(moved, null_draws=40), SAME) == []


@examples(1, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(draw=gauge_draws())
def test_a_random_exact_gauge_of_smollm2_leaves_its_canonical_report_unchanged(
        smollm2: Model, smollm2_report: geodrift.ScanReport, draw: dict) -> None:
    moved = smollm2.gauged(draw)
    assert smollm2.function_error(moved) <= FUNCTION
    assert differences(smollm2_report, smollm2.scan(moved, **SMOLLM2_SCAN), SAME) == []


def test_the_report_labels_every_space_with_its_gauge_status(smollm2_report: geodrift.ScanReport) -> None:
    assert smollm2_report.view == "canonical" and smollm2_report.notes == []  # the default view
    status = {(r.label, s): space.gauge for r in smollm2_report.roles for s, space in r.spaces.items()}
    assert {status[(label, "v")] for label in ("Q", "K", "V", "Gate", "Up")} == {"invariant"}
    assert {status[(label, "u")] for label in ("Q", "K", "V", "Gate", "Up")} == {"aligned"}
    assert status[("O", "u")] == status[("Down", "u")] == status[("OV", "v")] == status[("OV", "u")] == "invariant"
    assert status[("O", "v")] == status[("Down", "v")] == "aligned"
    v = smollm2_report.role("v")
    assert v is not None and "u1 aligned by the canonical ordering: left out" in v.criterion
    q = smollm2_report.role("q")
    assert q is not None and "aligned by the canonical ordering and not compared" in q.criterion
    row = next(r for r in smollm2_report.summary_rows() if r["label"] == "Up" and r["space"] == "u")
    assert row["gauge"] == "aligned"


def test_raw_and_folded_reports_say_which_gauges_move_each_number(small: Model) -> None:
    raw = small.scan(small.sd, "raw", null_draws=10, roles="q,o,gate")
    q, o, gate = raw.role("q"), raw.role("o"), raw.role("gate")
    assert q is not None and o is not None and gate is not None
    assert q.spaces["v"].gauge == "varies" and q.spaces["v"].moved_by == ["fold", "rotate", "qk_rope"]
    assert o.spaces["u"].moved_by == ["rotate", "vo"]
    assert gate.spaces["u"].moved_by == ["fold", "mlp_permute"]
    payload = json.loads(json.dumps(raw.to_dict()))
    assert payload["roles"][0]["spaces"]["v"]["gauge"] == "varies"


def test_canonical_view_refuses_a_checkpoint_outside_its_rows_group_and_the_default_falls_back_to_folded(
        small: Model, tmp_path: Path) -> None:
    # a "llama" checkpoint with per-head q/k norms: not the llama row's group (geodrift.architectures), so no
    # canonical form; the default is folded (strictly more invariant than raw) with a note naming what still moves
    folder = save_hf(small.model, tmp_path / "llama_qk_norm")
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    for layer in range(small.model.n_layers):
        for name in ("q_norm", "k_norm"):
            tensors[f"model.layers.{layer}.self_attn.{name}.weight"] = torch.ones(small.model.head_dim)
    save_file(tensors, folder / "model.safetensors")
    proc = _geodrift("scan", str(folder), "--view", "canonical")
    assert proc.returncode == 2, proc.stderr
    assert "q/k norm" in proc.stderr and "llama" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3
    with pytest.raises(GeodriftError, match="no canonical form"):
        geodrift.scan(folder, view="canonical")
    default = geodrift.scan(folder, null_draws=4, roles="q,k")
    assert default.view == "folded" and len(default.notes) == 1
    assert "q/k norm" in default.notes[0] and "rotate, vo, qk_rope, mlp_scale" in default.notes[0]
    q = default.role("q")
    assert q is not None and q.spaces["v"].moved_by == ["rotate", "qk_rope"]
    proc = _geodrift("scan", str(folder), "--null-draws", "4", "--quiet")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # wrapped at 80 columns
    assert "note: view: folded, the default where geodrift has no canonical form of the gauge group" in text
    assert "folded view" in text and "(gauge-invariant)" not in text


def _geodrift(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "geodrift", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _scan_json(model: str | None, view: str | None, out: Path, *options: str) -> tuple[dict, str]:
    # view None: the default view (no --view option)
    proc = _geodrift("scan", *([model] if model else []), *(["--view", view] if view else []), "--layers", "0-3",
                     "--null-draws", "20", "--json-out", str(out), *options)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout


def test_done_when_the_cli_prints_the_same_canonical_numbers_for_an_exactly_reparametrised_copy(
        smollm2: Model, tmp_path: Path) -> None:
    """Issue 31's first Done-when: the embedded GGUF against an exactly reparametrised safetensors copy (all
    generators at once, folded gains, a residual rotation). Item 3: the *default* scan (no --view) is the
    canonical view here, so its numbers and verdicts are the same for both; an explicit --view canonical reads
    the same weights (the library route: test_the_default_view_is_canonical_for_a_derived_model)."""
    moved = random_gauge(smollm2.sd, smollm2.shape, torch.Generator().manual_seed(2026), condition=100.0, sigma=1.0)
    copy = str(write_copy(moved, smollm2.model, tmp_path / "gauged"))
    base, base_text = _scan_json(None, None, tmp_path / "a.json")
    other, other_text = _scan_json(copy, None, tmp_path / "b.json")
    assert base["view"] == other["view"] == "canonical" and base["notes"] == other["notes"] == []
    report_a, report_b = Report.from_dict(base), Report.from_dict(other)
    assert differences(report_a, report_b, SAME) == []
    verdicts = [(r.label, r.verdict, r.path_verdict) for r in report_a.roles]
    assert verdicts == [(r.label, r.verdict, r.path_verdict) for r in report_b.roles]
    table = [line for line in base_text.splitlines() if "│" in line or "|" in line]
    assert table == [line for line in other_text.splitlines() if "│" in line or "|" in line]
    (counts_a, _, verdicts_a), (counts_b, _, verdicts_b) = _summary(base_text), _summary(other_text)
    assert (counts_a, verdicts_a) == (counts_b, verdicts_b)  # the summary line but its model's name
    assert "canonical view (gauge-invariant)" in verdicts_a
    text = " ".join(base_text.split())  # the view line (wrapped): what aligned means, the paper's metric
    assert "canonical view" in text and "aligned: ordered by the view itself, not measured" in text
    assert "paper's numbers: --view raw" in text
    raw_a, _ = _scan_json(None, "raw", tmp_path / "c.json", "--roles", "o,up")
    raw_b, _ = _scan_json(copy, "raw", tmp_path / "d.json", "--roles", "o,up")
    moved_numbers = differences(Report.from_dict(raw_a), Report.from_dict(raw_b), 0.01)
    assert any("'attn_o', 'u', 'mean1'" in d for d in moved_numbers), moved_numbers  # O u1: V/O gauge
    assert any("'mlp_up', 'v', 'mean1'" in d for d in moved_numbers), moved_numbers  # Up v1: Up/Down scaling


def _summary(text: str) -> tuple[str, str, str]:
    # The summary line of a canonical scan (wrapped at 80 columns) as (counts, model, the rest from its view on).
    lines = text.strip().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("frame ") and "predictions hold" in line)
    line = " ".join(" ".join(lines[start:]).split())
    counts, rest = line.split(" predictions hold on ", 1)
    model, after = rest.split(", canonical view", 1)
    return counts, model, "canonical view" + after


def test_compare_in_the_canonical_view_finds_a_gauged_copy_identical_and_the_raw_view_does_not(
        small: Model, tmp_path: Path) -> None:
    from geodrift.continuity import MeasureSpec
    from geodrift.scanner.series import compare

    moved = random_gauge(small.sd, small.shape, torch.Generator().manual_seed(5), condition=100.0, sigma=1.0)
    a, b = save_hf(small.model, tmp_path / "a"), write_copy(moved, small.model, tmp_path / "b")
    spec = MeasureSpec(k=2, null_draws=10)
    canonical = compare(a, b, spec, view="canonical", roles=["attn_o", "mlp_up"])
    assert canonical.view == "canonical"
    assert min(row.overlap for row in canonical.subspaces) > 1 - 1e-5
    assert {s.gauge for rep in canonical.reports for r in rep.roles for s in r.spaces.values()} == {"invariant", "aligned"}
    raw = compare(a, b, spec, view="raw", roles=["attn_o", "mlp_up"])
    assert max(row.overlap for row in raw.subspaces) < 0.9


def test_the_canonical_view_of_the_gguf_equals_that_of_the_same_weights_as_safetensors(smollm2: Model, tmp_path):
    """GGUF stores llama's Q/K rows in llama.cpp's interleaved rotary order; the reader undoes it, so the RoPE
    pairs (j, j + head_dim/2) the canonical view balances and rotates are the same as in a safetensors copy.
    (That the undone order is Hugging Face's is what the Q/K gauge's logit test in test_gauge_orbit.py shows:
    a rotation-scaling of wrongly paired rows would change the logits.)"""
    from geodrift.scanner.readers import open_checkpoint, weightset

    copy = write_copy(smollm2.sd, smollm2.model, tmp_path / "same")
    gguf, safetensors = weightset(open_checkpoint(None), "canonical"), weightset(open_checkpoint(copy), "canonical")
    for role in ("attn_q", "attn_k", "attn_v", "attn_o"):
        a, b = gguf[(role, 3)], safetensors[(role, 3)]
        assert float((a - b).abs().max() / a.abs().max()) < 1e-5, role


@pytest.mark.parametrize("columns", [1536, 1024 + 37, 5])
def test_column_norms_sum_each_column_as_one_vecdot_does(columns: int):
    # column_norms sums the squares 512 columns at a time (no full-size temporary): bitwise one vecdot's norms where
    # the width is a multiple of the block (SmolLM2's 1536, an 8B's 14336), to rounding elsewhere; float64 on overflow
    x = torch.randn(300, columns, generator=torch.Generator().manual_seed(columns))
    whole = torch.linalg.vecdot(x, x, dim=0).sqrt()
    if columns % 512 == 0:
        assert torch.equal(column_norms(x), whole)
    assert torch.allclose(column_norms(x), whole, rtol=1e-6, atol=0.0)
    huge = column_norms(torch.full((2, 3), 3e38))
    assert torch.allclose(huge, torch.full((3,), 3e38 * 2 ** 0.5, dtype=torch.float64))
