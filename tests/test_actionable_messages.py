"""Messages name what the user can act on (issue 39, item 8): an unknown architecture lists the known ones, and a
command-line message names a command, never an internal function (``canonical_keys()``)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

import geodrift
from geodrift.cli.main import main
from geodrift.errors import GeodriftError
from geodrift.scanner.names import ARCHITECTURES


@pytest.mark.parametrize("model", ["state dict", "file"])
def test_an_unknown_architecture_is_named_with_the_known_ones(tmp_path: Path, model: str) -> None:
    # It was taken as given, and every tensor name then "not recognised for architecture 'foo'" (pass names=).
    state = llama_state(3, 32, 4, 2, 48)
    target = state if model == "state dict" else write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3))
    with pytest.raises(GeodriftError) as info:
        geodrift.scan(target, architecture="foo", k=1, null_draws=2)
    message = str(info.value)
    assert message.startswith("architecture='foo': unknown architecture") and "names=" in message, message
    assert all(arch in message for arch in ARCHITECTURES), message
    report = geodrift.scan(state, architecture="mistral", k=1, null_draws=2, roles="k")  # a known one still works
    assert report.role("attn_k") is not None


def test_a_missing_norm_under_scan_full_names_a_command_not_an_internal_function(tmp_path: Path) -> None:
    state = {k: v for k, v in llama_state(3, 32, 4, 2, 48).items() if "norm" not in k}
    folder = write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3), dtype=torch.float32)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
        main(["scan", str(folder), "--k", "1", "--null-draws", "2", "--view", "raw", "--full", "--quiet"])
    line = err.getvalue().strip()
    assert "norm_attn" in line and "canonical_keys()" not in line and "geodrift inspect" in line, line
