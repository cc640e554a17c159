"""``--skip-nonfinite`` skips what its help promises: NaN, +Inf, -Inf and an overflowing outlier, in safetensors
and GGUF, from the command line and from Python, with each skipped matrix listed in the report's notes naming its
tensor (issue 39, item 6). Before, only the overflow case was skipped: NaN/Inf raised from ``load_canonical``,
an error the skip did not catch, and the option did nothing.

Real files: a random Llama written by safetensors' writer and by gguf's GGUFWriter, one value of layer 1's Up
projection replaced.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch
from _checkpoints import (
    hf_config,
    hf_to_gguf_tensors,
    llama_metadata,
    llama_state,
    write_gguf,
    write_hf_folder,
)

import geodrift
from geodrift.cli.main import main
from geodrift.errors import GeodriftError

VALUES = {"NaN": float("nan"), "+Inf": float("inf"), "-Inf": float("-inf"), "overflow": 2e21}
TENSOR = {"safetensors": "model.layers.1.mlp.up_proj.weight", "gguf": "blk.1.ffn_up.weight"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("nonfinite")
    made = {}
    for name, value in VALUES.items():
        state = llama_state(3, 32, 4, 2, 64, seed=2)
        state[TENSOR["safetensors"]][3, 5] = value
        folder = write_hf_folder(root / f"hf-{name}", state, hf_config(n_layers=3, d_ff=64), dtype=torch.float32)
        made[(name, "safetensors")] = folder / "model.safetensors"
        made[(name, "gguf")] = write_gguf(root / f"{name}.gguf", "llama", hf_to_gguf_tensors(state, "llama", 4, 2),
                                          llama_metadata(3, 32, 4, 2, 64))
    return made


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as done:
            code = done.code or 0
    return int(code), out.getvalue(), err.getvalue()  # type: ignore[call-overload]


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
@pytest.mark.parametrize("value", list(VALUES))
def test_skip_nonfinite_skips_the_matrix_and_lists_it_from_both_faces(models: dict[tuple[str, str], Path],
                                                                       value: str, fmt: str) -> None:
    path = models[(value, fmt)]
    base = ["scan", str(path), "--k", "2", "--null-draws", "4", "--view", "raw", "--quiet"]
    code, _, err = _cli(*base)  # without the option: refused naming the tensor and the option
    assert code == 2 and TENSOR[fmt] in err and "--skip-nonfinite" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = _cli(*base, "--json", "--skip-nonfinite")
    assert code == 0, err
    doc = json.loads(out)
    skipped = [note for note in doc["notes"] if note.startswith("skipped")]
    assert len(skipped) == 1 and "mlp_up[1]" in skipped[0] and TENSOR[fmt] in skipped[0], doc["notes"]
    assert "nonfinite" not in doc  # the report holds only finite numbers
    up = next(r for r in doc["roles"] if r["role"] == "mlp_up")
    assert up["layers"] == [0, 2]  # compared across the gap
    report = geodrift.scan(path, k=2, null_draws=4, view="raw", skip_nonfinite=True)
    assert [n for n in report.notes if n.startswith("skipped")] == skipped
    with pytest.raises(GeodriftError, match="skip_nonfinite=True"):
        geodrift.scan(path, k=2, null_draws=4, view="raw")


@pytest.mark.parametrize("view", ["folded", "canonical"])
def test_the_other_views_skip_what_the_bad_value_reaches_and_name_the_tensor(models: dict[tuple[str, str], Path],
                                                                             view: str) -> None:
    report = geodrift.scan(models[("NaN", "safetensors")], k=2, null_draws=4, view=view, skip_nonfinite=True)
    skipped = [n for n in report.notes if n.startswith("skipped")]
    # folded: only Up[1] reads the bad tensor; canonical: the MLP block's gauge point does (Gate, Up, Down of layer
    # 1); the attention block's canonical form reads no MLP tensor, so its projections stay
    assert skipped and all(TENSOR["safetensors"] in n and "[1]" in n for n in skipped), skipped
    expected = ["mlp_up"] if view == "folded" else ["mlp_down", "mlp_gate", "mlp_up"]
    assert sorted(n.split()[1].split("[")[0] for n in skipped) == expected, skipped
