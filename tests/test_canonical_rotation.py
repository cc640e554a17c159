"""The canonical view needs no residual basis: every per-layer map commutes with a residual rotation.

The canonical point of a layer (balanced factors, signs against the token embedding's mean, sorted units and
heads) commutes with any residual rotation ``P`` when the sign reference is rotated with the rows, so a scan
canonicalises each layer in whatever basis it comes in and reads only basis-free numbers off the residual side
(adjacent ``|cos|`` and the rotation null). Checked on a toy state dict (float64), and on the embedded SmolLM2:
the scan never computes a residual basis, and an embedding that does not fit the projections, or signs nothing,
is refused in one line (issue 39, item 3).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

import geodrift
from geodrift.cli.main import main
from geodrift.errors import GeodriftError
from geodrift.gauge.canonical import PROJECTIONS, canonical_layer, residual_basis, to_basis
from geodrift.gauge.orbit import EMBED, GaugeShape, fold_gains, layer_key, toy_state_dict


def test_the_canonical_layer_commutes_with_a_residual_rotation():
    shape = GaugeShape(2, 4, 2, 8)
    sd = fold_gains(toy_state_dict(shape, d_model=32, d_ff=24, vocab=200,
                                   generator=torch.Generator().manual_seed(3)), shape)
    sd = {k: v.to(torch.float64) for k, v in sd.items()}
    basis = residual_basis(sd[EMBED])
    mean = sd[EMBED].mean(0)
    for layer in range(shape.n_layers):
        weights = {name: sd[layer_key(layer, name)] for name in PROJECTIONS}
        in_basis = canonical_layer(to_basis(weights, basis), shape, basis.T @ mean)
        rotated_after = to_basis(canonical_layer(weights, shape, mean), basis)
        for name in PROJECTIONS:
            assert torch.allclose(in_basis[name], rotated_after[name], atol=1e-10, rtol=0), (layer, name)


def test_the_canonical_scan_computes_no_residual_basis(monkeypatch: pytest.MonkeyPatch):
    import geodrift.gauge.canonical as canonical

    def refused(*_: object) -> torch.Tensor:
        raise AssertionError("the scan computed a residual basis")

    monkeypatch.setattr(canonical, "residual_basis", refused)
    report = geodrift.scan(layers="0-2", null_draws=4, roles="q,o")
    assert report.view == "canonical"
    assert {s.null for r in report.roles for s in r.spaces.values()} == {"rotation", "permutation"}


def _folder(tmp_path: Path, name: str, embedding: torch.Tensor) -> Path:
    state = llama_state(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=50, seed=1)
    state["model.embed_tokens.weight"] = embedding
    return write_hf_folder(tmp_path / name, state, hf_config(n_layers=3, d=32, n_heads=4, n_kv=2, d_ff=48, vocab=50),
                           dtype=torch.float32)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_an_embedding_narrower_than_the_stream_is_refused_in_one_line(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]):
    """A 50x33 embed_tokens with 32-wide projections ended in a RuntimeError in gauge/basis.py."""
    folder = _folder(tmp_path, "wide_embedding", torch.randn(50, 33, generator=torch.Generator().manual_seed(2)))
    err = _refused(["scan", str(folder), "--view", "canonical", "--quiet", "--null-draws", "4"], capsys)
    assert "50x33" in err and "32-wide" in err and str(folder) in err
    default = geodrift.scan(folder, null_draws=4, roles="q,k")  # the default view falls back to folded, saying why
    assert default.view == "folded" and any("50x33" in note for note in default.notes)


def test_a_zero_embedding_is_refused_by_the_canonical_view_and_aligned_in_a_series(tmp_path: Path,
                                                                                  capsys: pytest.CaptureFixture[str]):
    folder = _folder(tmp_path, "zero_embedding", torch.zeros(50, 32))
    err = _refused(["scan", str(folder), "--quiet", "--null-draws", "4"], capsys)
    assert "zero mean" in err and "--view folded" in err and str(folder) in err
    out = tmp_path / "c.json"
    with pytest.raises(SystemExit) as done:  # a series aligns its checkpoints by their layers instead
        main(["compare", str(folder), str(folder), "--quiet", "--null-draws", "4", "--k", "2", "--json-out", str(out)])
    assert done.value.code == 2 or json.loads(out.read_text())["alignment"]["one_orbit"]


def test_an_embedding_that_fixes_no_basis_is_refused_by_the_whole_model_canonical_form():
    with pytest.raises(GeodriftError, match="fewer tokens than its width"):
        residual_basis(torch.randn(10, 32))
    with pytest.raises(GeodriftError, match="zero or repeated eigenvalue"):
        residual_basis(torch.zeros(50, 8))
