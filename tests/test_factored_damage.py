"""A damaged factored save (``compress share --save``) is one GeodriftError naming the file and the entry (issue 33).

Every case is a real folder: one written by ``save_factored`` from a tiny random Llama, copied, then damaged on
disk (bytes cut off, config.json edited, model.safetensors rewritten without a tensor). Before issue 33,
``load_factored`` raised KeyError, AttributeError, SafetensorError, TypeError or RuntimeError on 8 of these. The
commands that read checkpoints say what such a folder is instead of asking for ``--names``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_compress import tiny_llama_folder

from geodrift.cli.main import main
from geodrift.compress.factorized import Compressed, load_factored, save_factored
from geodrift.compress.model import load_setup
from geodrift.errors import GeodriftError

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("factored")
    setup = load_setup(tiny_llama_folder(root / "llama", n_layers=3), seq_len=16, calib_windows=1,
                       eval_windows_count=1)
    factors = {}
    shared = None
    for layer in range(3):
        for role in ("attn_q", "mlp_up"):
            U, S, Vh = torch.linalg.svd(setup.model.projection(role, layer).weight.detach())
            second, first = (U[:, :4] * S[:4]).contiguous(), Vh[:4].contiguous()
            if role == "attn_q":  # one basis shared by the three layers' Q, stored once
                shared = first if shared is None else shared
                first = shared
            factors[(role, layer)] = (second, first)
    return save_factored(setup, Compressed("test", 0.3, factors), root / "saved")


def _config(folder: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))


def _tensors(folder: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(str(folder / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(folder / "model.safetensors"))


def _truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _spec(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return lambda folder: _config(folder, lambda c: edit(c["geodrift_factored"]))


def _first_projection(spec: dict[str, Any]) -> str:
    return sorted(spec["projections"])[0]


def _past_last_layer(spec: dict[str, Any]) -> None:
    prefix = _first_projection(spec)
    spec["projections"]["model.layers.7." + prefix.split(".", 3)[3]] = spec["projections"].pop(prefix)


def _drop_factor(tensors: dict[str, torch.Tensor]) -> None:
    del tensors[next(name for name in sorted(tensors) if name.endswith(".second.weight"))]


DAMAGE: dict[str, tuple[Callable[[Path], None], str, str]] = {
    # case: (damage, the file the message names, a word of the entry it names)
    "truncated model.safetensors": (_truncate, "model.safetensors", "unreadable"),
    "unknown dtype": (_spec(lambda s: s.update(dtype="float8")), "config.json", "dtype"),
    "missing factor": (lambda f: _tensors(f, _drop_factor), "model.safetensors", ".second.weight"),
    "prefix past the last layer": (_spec(_past_last_layer), "config.json", "past the last layer"),
    "config of the wrong width": (lambda f: _config(f, lambda c: c.update(hidden_size=64)), "model.safetensors",
                                  "shape"),
    "projection entry of the wrong type": (_spec(lambda s: s["projections"].update(
        {_first_projection(s): "rank 4"})), "config.json", "must be"),
    "geodrift_factored of the wrong type": (lambda f: _config(f, lambda c: c.update(geodrift_factored=[1])),
                                            "config.json", "geodrift_factored"),
    "another format version": (_spec(lambda s: s.update(format=2)), "config.json", "format 2"),
    "a rank that does not match the factors": (_spec(lambda s: s["projections"][_first_projection(s)].update(
        rank=5)), "model.safetensors", "rank 5"),
    "a billion layers": (lambda f: _config(f, lambda c: c.update(num_hidden_layers=10**9)), "config.json",
                         "num_hidden_layers"),
    "a count that is not an integer": (lambda f: _config(f, lambda c: c.update(num_attention_heads="4")),
                                       "config.json", "num_attention_heads"),
    "tensors of another dtype than the spec": (_spec(lambda s: s.update(dtype="bfloat16")), "model.safetensors",
                                               "bfloat16"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_factored_save_is_one_error_naming_the_file_and_the_entry(saved: Path, tmp_path: Path,
                                                                             case: str) -> None:
    damage, file, entry = DAMAGE[case]
    folder = tmp_path / "copy"
    shutil.copytree(saved, folder)
    damage(folder)
    with pytest.raises(GeodriftError) as info:
        load_factored(folder)
    message = str(info.value)
    assert "\n" not in message and file in message and entry in message, message


def test_the_undamaged_save_loads_with_the_shared_basis_tied(saved: Path) -> None:
    model = load_factored(saved)
    firsts = [model.model.layers[i].self_attn.q_proj.first for i in range(3)]
    assert firsts[0] is firsts[1] is firsts[2]


@pytest.mark.parametrize("command", [["scan"], ["compress", "share"]])
def test_scan_and_share_say_what_a_factored_folder_is(saved: Path, command: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([*command, str(saved), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2 and len(err.splitlines()) == 1, err
    assert "factored model written by geodrift" in err and "--names mapping.json" not in err


def test_inspect_lists_a_factored_folder_saying_what_its_factors_are(saved: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["inspect", str(saved), "--json"])
    assert done.value.code in (0, None)
    rows = json.loads(capsys.readouterr().out)["tensors"]
    factors = [r for r in rows if r["name"].endswith((".first.weight", ".second.weight")) or "shared" in r["name"]]
    assert factors and all("low-rank factor of geodrift's factored save" in r["detail"] for r in factors), factors[:2]


# Bounded work on hostile saves (issue 39, item 2): each refusal comes at once, in bounded memory, from a subprocess
# with a deadline and an address-space limit (a hang or a runaway allocation fails the test, never the machine).
def _load_in_a_subprocess(folder: Path, timeout_s: float = 60) -> tuple[str, float]:
    import subprocess
    import sys
    import time

    script = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
              "from geodrift.compress.factorized import load_factored\nfrom geodrift.errors import GeodriftError\n"
              "try:\n    load_factored(sys.argv[1])\nexcept GeodriftError as e:\n    print('error:', e)\n"
              "else:\n    print('loaded')\n")
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"load_factored({str(folder)!r}) gave no answer within {timeout_s} s")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip(), time.perf_counter() - start


def test_a_fifo_config_json_is_refused_without_opening_it(saved: Path, tmp_path: Path) -> None:
    # It blocked forever (read_text on a FIFO); the CLI readers refused the same FIFO at once.
    import os

    folder = tmp_path / "copy"
    shutil.copytree(saved, folder)
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    out, _ = _load_in_a_subprocess(folder, timeout_s=60)
    assert out.startswith("error:") and "config.json" in out and "FIFO" in out, out
    (folder / "config.json").unlink()
    shutil.copy(saved / "config.json", folder / "config.json")
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    out, _ = _load_in_a_subprocess(folder, timeout_s=60)
    assert out.startswith("error:") and "model.safetensors" in out and "FIFO" in out, out


@pytest.mark.parametrize("layers", [5000, 99999])
def test_a_config_far_past_the_stored_layers_is_refused_before_a_model_is_laid_out(saved: Path, tmp_path: Path,
                                                                                    layers: int) -> None:
    # 5000 layers took 19.8 s and 663 MB; 99999 ran for minutes toward 13 GB (the meta model of the config's layers).
    folder = tmp_path / "copy"
    shutil.copytree(saved, folder)
    _config(folder, lambda c: c.update(num_hidden_layers=layers))
    out, seconds = _load_in_a_subprocess(folder, timeout_s=90)
    assert out.startswith("error:") and f"num_hidden_layers = {layers}" in out and "0..2" in out, out
    assert "\n" not in out


MORE_DAMAGE: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "factors all NaN": (lambda f: _tensors(f, lambda t: t.update({n: torch.full_like(v, float("nan")) for n, v in
                                                                  t.items() if n.endswith(".first.weight")})),
                        "model.safetensors", "NaN"),
    "one factor +Inf": (lambda f: _tensors(f, lambda t: t.update({n: v.index_fill(0, torch.tensor([0]), float("inf"))
                                                                  for n, v in t.items() if "geodrift.shared" in n})),
                        "model.safetensors", "geodrift.shared"),
    "a config.json past 16 MiB": (lambda f: (f / "config.json").write_text((f / "config.json").read_text()
                                                                          + " " * (17 << 20)),
                                  "config.json", "bytes"),
    "an embedding of another width than the config": (lambda f: _config(f, lambda c: c.update(vocab_size=7)),
                                                      "model.embed_tokens.weight", "vocab_size"),
}


@pytest.mark.parametrize("case", sorted(MORE_DAMAGE))
def test_more_damage_is_one_error_naming_the_file_and_the_entry(saved: Path, tmp_path: Path, case: str) -> None:
    damage, file, entry = MORE_DAMAGE[case]
    folder = tmp_path / "copy"
    shutil.copytree(saved, folder)
    damage(folder)
    with pytest.raises(GeodriftError) as info:
        load_factored(folder)
    message = str(info.value)
    assert "\n" not in message and file in message and entry in message, message


def test_a_path_like_or_bytes_folder_loads(saved: Path) -> None:
    # Any os.PathLike and a bytes path were refused ("must be a path").
    class Where:
        def __fspath__(self) -> str:
            return str(saved)

    for folder in (Where(), str(saved).encode()):
        model = load_factored(folder)  # type: ignore[arg-type]
        assert model.model.layers[0].self_attn.q_proj.first is model.model.layers[1].self_attn.q_proj.first
