"""The transformer simulator end to end: records, determinism, resume, the CLI, the qualitative pattern."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from geodrift.errors import GeodriftError
from geodrift.sim.record import load_record
from geodrift.sim.transformer_presets import ABLATIONS, PRESETS, TransformerConfig, make_config, paper_row
from geodrift.sim.transformer_run import load_scan, run_transformer
from geodrift.weights import TRANSFORMER_ROLES


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_tiny_run_writes_record_scan_and_tokenizer(tmp_path: Path) -> None:
    res = run_transformer(make_config("tiny", steps=12), seed=3, out=tmp_path)
    folder = tmp_path / "tiny" / "seed3"
    assert res.path == folder
    rec = load_record(folder)
    assert rec.status == "complete" and rec.seed == 3
    # Tracked at step 0 (first backward pass), every track_every steps, and after the last step.
    steps = sorted({s for s, _ in rec.select("W", "cont:attn_q", "v", 1)})
    assert steps == [0, 10, 12]
    assert {r.role for r in load_scan(folder / "scan.json").roles} == set(TRANSFORMER_ROLES)
    assert json.loads((folder / "tokenizer.json").read_text())["kind"] == "bytes"
    assert rec.value("eval", "ppl") == pytest.approx(rec.summary["ppl"])
    assert 1.0 < rec.summary["ppl"] < 256.0  # type: ignore[operator]


def test_same_seed_gives_bitwise_identical_runs_and_another_seed_does_not(tmp_path: Path) -> None:
    cfg = make_config("tiny", steps=8)
    a = run_transformer(cfg, seed=1, out=tmp_path / "a").record
    b = run_transformer(cfg, seed=1, out=tmp_path / "b").record
    c = run_transformer(cfg, seed=2, out=tmp_path / "c").record
    assert a.rows == b.rows and a.summary == b.summary
    assert a.rows != c.rows


def test_interrupted_run_resumes_to_the_same_numbers(tmp_path: Path) -> None:
    cfg = make_config("tiny", steps=20, eval_every=5)
    full = run_transformer(cfg, seed=4, out=tmp_path / "full").record
    part = run_transformer(cfg, seed=4, out=tmp_path / "part", stop_at=10).record
    assert part.status == "partial"
    resumed = run_transformer(cfg, seed=4, out=tmp_path / "part", resume=True).record
    assert resumed.status == "complete"
    assert resumed.rows == full.rows and resumed.summary == full.summary
    # A finished run is reloaded, not retrained.
    again = run_transformer(cfg, seed=4, out=tmp_path / "part", resume=True).record
    assert again.rows == full.rows


def test_resume_with_another_config_is_refused(tmp_path: Path) -> None:
    run_transformer(make_config("tiny", steps=10, eval_every=5), seed=1, out=tmp_path, stop_at=5)
    with pytest.raises(GeodriftError, match="another configuration"):
        run_transformer(make_config("tiny", steps=10, eval_every=5, lr=1e-2), seed=1, out=tmp_path, resume=True)


def test_gradient_continuity_is_high_at_the_first_backward_pass(tmp_path: Path) -> None:
    # Paper claim 2 (residual -> gradient coherence from step 0) in the transformer: the gradient's
    # output-space u1 of the writers (O, Down) is continuous before any update, the init's is not.
    rec = run_transformer(make_config("tiny", steps=2), seed=5, out=tmp_path).record
    for role in ("attn_o", "mlp_down"):
        assert rec.value("G", f"cont:{role}", "u", 1, step=0) > 0.5
        assert rec.value("W", f"cont:{role}", "u", 1, step=0) < 0.4


def test_presets_and_ablations() -> None:
    paper = PRESETS["paper"]
    assert (paper.d_model, paper.n_layers, paper.n_heads, paper.d_ff, paper.seq_len, paper.batch_size,
            paper.steps, paper.init_std) == (256, 8, 4, 1024, 128, 128, 10_000, 0.02)
    assert not paper.tie_embeddings
    cfg = make_config("cpu", ["none", "linear_attn", "v_silu"])
    assert (cfg.activation, cfg.attention, cfg.v_activation, cfg.name) == ("none", "linear", "silu",
                                                                           "cpu+none+linear_attn+v_silu")
    assert paper_row(make_config("cpu", ["none"])) == "Res+None+Norm"
    assert paper_row(make_config("cpu", ["linear_attn"])) is None
    assert set(ABLATIONS) >= {"silu", "relu", "gelu", "none", "radial", "nores", "nonorm", "linear_attn", "v_silu"}
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(GeodriftError, match="--ablation"):
        make_config("cpu", ["softmax_free"])
    with pytest.raises(GeodriftError, match="--preset"):
        make_config("huge")


def _cli():  # type: ignore[no-untyped-def]
    from geodrift.cli.main import _register, app

    _register()
    return app


def test_cli_prints_the_side_by_side_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["simulate", "transformer", "--preset", "tiny", "--steps", "6",
                                         "--out", str(tmp_path), "--no-smollm2", "--plot"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Res+SiLU+Norm" in result.output and "Gate" in result.output and "verdict" in result.output
    assert (tmp_path / "tiny" / "seed42" / "continuity_training.png").stat().st_size > 1000
    assert (tmp_path / "tiny" / "comparison.png").exists()


def test_cli_json_and_bad_option(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["simulate", "transformer", "--preset", "tiny", "--steps", "4",
                                         "--ablation", "linear_attn", "--out", str(tmp_path), "--no-smollm2",
                                         "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["config"]["attention"] == "linear" and payload["paper_row"] is None
    assert {r["role"] for r in payload["runs"][0]["scan"]["roles"]} == set(TRANSFORMER_ROLES)
    bad = CliRunner().invoke(_cli(), ["simulate", "transformer", "--preset", "tiny", "--ablation", "nope",
                                      "--out", str(tmp_path)])
    assert bad.exit_code != 0 and isinstance(bad.exception, GeodriftError)


@pytest.mark.slow
def test_cpu_preset_shows_the_per_projection_pattern(tmp_path: Path) -> None:
    # The paper's qualitative claim on the cpu preset: Q, K, Gate, Up continuous in input space,
    # O and Down in output space (each beats its permutation null and the other space).
    report = run_transformer(make_config("cpu"), seed=42, out=tmp_path).scan
    verdicts = {r.role: r.verdict for r in report.roles}
    for role in ("attn_q", "attn_k", "mlp_gate", "mlp_up", "attn_o", "mlp_down"):
        assert verdicts[role] == "holds", (role, verdicts)
