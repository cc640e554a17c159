"""Hostile input to the commands added last (issue 23): each class ends in one `error:` line naming the file,
key, tensor or option, before any work - never a hang, a traceback or a silent non-answer.

Grid files (every bound and every key), `--names` regexes that backtrack catastrophically, `--layers`
specs that would expand to 10^8 integers, configs that claim 10^9 layers, runs above `--max-memory`,
checkpoints of different widths in `drift`/`compare`, a duplicated tensor name, and the Python API
given odd objects (GeodriftError only).
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
import torch
from _checkpoints import gguf_kv, hf_config, llama_state, write_hf_folder, write_raw_gguf
from _fuzz import _raw_spec
from safetensors.torch import save_file

import geodrift
from geodrift.cli.main import main
from geodrift.continuity import MeasureSpec
from geodrift.errors import GeodriftError
from geodrift.scanner.readers import open_checkpoint
from geodrift.scanner.scan import parse_layers
from geodrift.scanner.series import compare, drift


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


SMOKE = '[[configs]]\nbase = "smoke"\n'


@pytest.mark.parametrize(("name", "content", "needles"), [
    ("lr.toml", 'sim = "mlp"\n' + SMOKE + 'train = { lr = "fast" }\n', ["configs[0].train.lr", "a number > 0", "'fast'"]),
    ("seed.toml", f'sim = "mlp"\nseeds = [{2**70}]\n' + SMOKE, ["seeds", "[0, 2**64 - 1]", str(2**70)]),
    ("data.toml", 'sim = "mlp"\ndata = "no-such-set"\n' + SMOKE, ["data", "'no-such-set'", "mnist5k"]),
    ("scalar.toml", 'sim = "mlp"\nconfigs = 3\n', ["configs must be a list of tables"]),
    ("steps.toml", 'sim = "mlp"\nsteps = 0\n' + SMOKE, ["steps", "an integer >= 1"]),
    ("ema.toml", 'sim = "mlp"\n' + SMOKE + 'track = { ema_betas = 0.5 }\n', ["track.ema_betas", "a list of numbers"]),
    ("width.toml", 'sim = "mlp"\n' + SMOKE + 'model = { d_model = 1.5 }\n', ["model.d_model", "an integer"]),
    ("huge.toml", 'sim = "mlp"\n' + SMOKE + 'model = { d_model = 60000, n_layers = 9000 }\n', ["parameters"]),
    ("act.toml", 'sim = "mlp"\n' + SMOKE + 'model = { activation = "softmax" }\n', ["model.activation", "element-wise"]),
    ("base.toml", 'sim = "mlp"\n[[configs]]\nbase = 3\n', ["configs[0].base", "a preset name"]),
    ("flag.toml", 'sim = "mlp"\n' + SMOKE + 'model = { residual = "yes" }\n', ["model.residual", "true or false"]),
    ("deep.json", "[" * 100_000 + "]" * 100_000, ["nested deeper"]),
    ("deep2.json", '{"configs": ' + "[" * 40 + "]" * 40 + "}", ["levels deep"]),
    ("bytes.toml", b"sim = \xff\xfe", ["not UTF-8", "byte 6"]),
    ("big.json", b" " * (2 << 20), ["bytes is more than"]),
    ("grid.yaml", "sim: mlp", [".toml or .json"]),
])
def test_grid_files_are_checked_whole_before_any_run(name: str, content: str | bytes, needles: list[str],
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / name
    grid.write_bytes(content if isinstance(content, bytes) else content.encode())
    started = time.monotonic()
    line = _refused(["sweep", str(grid), "--out", str(tmp_path / "runs"), "--quiet"], capsys)
    assert str(grid) in line and all(n in line for n in needles), line
    assert not (tmp_path / "runs").exists() and time.monotonic() - started < 30


def test_a_fifo_given_as_the_grid_is_refused_without_opening_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "grid.toml"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes: the sweep hung
    assert "FIFO" in _refused(["sweep", str(fifo)], capsys)


def test_a_catastrophic_names_regex_cannot_hang_the_scan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (a+)+$ against a long run of a's: exponential time for a backtracking engine, linear for RE2.
    name = "a" * 40 + "!"
    path = tmp_path / "m.safetensors"
    save_file({name: torch.ones(2, 2), **{k: v.contiguous() for k, v in llama_state(2, 16, 2, 1, 32, 20).items()}},
              str(path))
    mapping = tmp_path / "names.json"
    mapping.write_text(json.dumps({"(a+)+$": "ignore"}))
    started = time.monotonic()
    with pytest.raises(SystemExit):
        main(["inspect", str(path), "--names", str(mapping), "--json"])
    capsys.readouterr()
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(("pattern", "needle"), [
    ("x" * 1001, "longer than the 1000 allowed"),
    (r"(a)\1", "does not compile as RE2"),
    ("(?=a)b", "does not compile as RE2"),
    ("(?:a{999}){999}", "does not compile as RE2"),
])
def test_names_regexes_are_bounded(pattern: str, needle: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    mapping = tmp_path / "names.json"
    mapping.write_text(json.dumps({pattern: "attn_q"}))
    line = _refused(["scan", "--names", str(mapping), "--layers", "0-1"], capsys)
    assert needle in line and str(mapping) in line


def test_a_layers_spec_of_many_repeated_ranges_is_merged_not_expanded() -> None:
    started = time.monotonic()
    layers = parse_layers(",".join(["0-99999"] * 20_000))  # 2e9 integers if each range were expanded
    assert layers == list(range(100_000)) and time.monotonic() - started < 10


def test_a_config_claiming_a_billion_layers_is_refused_before_allocation(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from test_compress import tiny_llama_folder

    folder = tiny_llama_folder(tmp_path / "liar", n_layers=2)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 10**9}))
    line = _refused(["compress", "prune", str(folder), "--max-remove", "1", "--quiet"], capsys)
    assert "1000000000 layers" in line and "0..1 (2)" in line


def test_compress_options_above_max_memory_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_compress import tiny_llama_folder

    folder = tiny_llama_folder(tmp_path / "llama", n_layers=2)
    line = _refused(["compress", "share", str(folder), "--seq-len", "1000000000", "--quiet"], capsys)
    assert "--seq-len 1000000000" in line and "--max-memory" in line


def _folder(path: Path, d: int) -> Path:
    return write_hf_folder(path, llama_state(3, d, 4, 2, 2 * d, vocab=20), hf_config(n_layers=3, d=d, d_ff=2 * d,
                                                                                    vocab=20))


@pytest.mark.parametrize("command", ["drift", "compare"])
def test_checkpoints_of_different_widths_name_both_shapes(command: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # drift used to exit 0 and print nothing.
    a, b = _folder(tmp_path / "a", 32), _folder(tmp_path / "b", 16)
    line = _refused([command, str(a), str(b), "--quiet"], capsys)
    assert "attn_k is 16x32" in line and "8x16" in line and str(a) in line and str(b) in line


def test_drift_over_checkpoints_with_different_layers_is_refused(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    a = _folder(tmp_path / "a", 16)
    b = write_hf_folder(tmp_path / "b", llama_state(4, 16, 4, 2, 32, vocab=20), hf_config(n_layers=4, d=16, d_ff=32,
                                                                                         vocab=20))
    assert "layers 0..2 (3)" in _refused(["drift", str(a), str(b), "--quiet"], capsys)


def test_drift_and_compare_check_max_memory_and_layers_first(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    a = _folder(tmp_path / "a", 16)
    assert "--max-memory" in _refused(["drift", str(a), str(a), "--max-memory", "1K", "--quiet"], capsys)
    line = _refused(["compare", str(a), str(a), "--layers", "0-99999", "--quiet"], capsys)
    assert "(99997 in all)" in line and len(line) < 400


def test_a_duplicated_gguf_tensor_name_names_both_copies(tmp_path: Path) -> None:
    kvs, tensors = _raw_spec()
    tensors[3] = (tensors[0][0], *tensors[3][1:])
    path = write_raw_gguf(tmp_path / "dup.gguf", [gguf_kv(k, t, v) for k, t, v in kvs], tensors)
    with pytest.raises(GeodriftError, match=r"'blk.0.attn_q.weight' occurs twice \(tensors #0 and #3"):
        open_checkpoint(path)


def test_a_tensor_in_two_shards_names_both(tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "m", llama_state(2, 16, 2, 1, 32, vocab=20),
                             hf_config(n_layers=2, d=16, n_heads=2, n_kv=1, d_ff=32, vocab=20), shards=2)
    first = sorted(folder.glob("model-*.safetensors"))[0]
    name = "model.layers.0.self_attn.q_proj.weight"
    save_file({name: torch.ones(16, 16)}, str(folder / "model-extra.safetensors"))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["x"] = "model-extra.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(GeodriftError, match="in two shards") as info:
        open_checkpoint(folder)
    assert "model-extra.safetensors" in str(info.value) or first.name in str(info.value)


def _state(**change: object) -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    return {f"model.layers.{i}.self_attn.q_proj.weight": torch.randn(8, 8, generator=g) for i in range(3)} | change


@pytest.mark.parametrize("model", [
    pytest.param(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Dropout()), id="module-without-linear-layers"),
    pytest.param({"model.layers.0.self_attn.q_proj.weight": [1.0, 2.0], "a": "x"}, id="state-dict-of-non-tensors"),
    pytest.param({k: v.to("meta") for k, v in _state().items()}, id="meta-tensors"),
    pytest.param(_state(**{"model.layers.1.self_attn.q_proj.weight": torch.full((8, 8), float("nan"))}), id="nan"),
    pytest.param(_state(**{"model.layers.1.self_attn.q_proj.weight": torch.full((8, 8), float("inf"))}), id="inf"),
    pytest.param({k: v.to(torch.complex64) for k, v in _state().items()}, id="complex"),
    pytest.param({k: v > 0 for k, v in _state().items()}, id="bool"),
    pytest.param({k: v.to_sparse() for k, v in _state().items()}, id="sparse"),
    pytest.param(struct, id="a-module-object"),
])
def test_the_api_given_odd_objects_raises_geodrift_error_only(model: object) -> None:
    spec = MeasureSpec(k=2, null_draws=4)
    for call in (lambda: geodrift.scan(model, k=2, null_draws=4), lambda: drift([model, model], spec),
                 lambda: compare(model, model, spec)):
        with pytest.raises(GeodriftError) as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int64, torch.uint8])
def test_integer_weights_are_refused_naming_the_tensor(dtype: torch.dtype) -> None:
    # Issue 33: integers are not weights (masks, indices, raw codes of an unknown quantisation); only a known
    # quantised format (GGUF's Q*/IQ* blocks) is dequantised and measured.
    weights = {k: (10 * v).to(dtype) for k, v in _state().items()}
    with pytest.raises(GeodriftError) as info:
        geodrift.scan(weights, k=2, null_draws=4)
    assert "integers or booleans" in str(info.value) and ".weight" in str(info.value)


def test_command_fuzz_findings_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Found by benchmarks/fuzz_commands.py: one selected layer has no adjacent pair, so no memory estimate
    # bounded --null-draws (torch.empty overflowed); drift over one layer drew a figure of 0 panels.
    a = _folder(tmp_path / "a", 16)
    line = _refused(["compare", str(a), str(a), "--layers", "0", "--null-draws", str(2**64), "--quiet"], capsys)
    assert "--null-draws" in line and str(2**64) in line
    line = _refused(["drift", str(a), str(a), "--layers", "0", "--plot", str(tmp_path / "d.png"), "--quiet"], capsys)
    assert "2 or more selected layers" in line and not (tmp_path / "d_rotation.png").exists()


@pytest.mark.parametrize(("keywords", "start"), [
    ({"k": 2.5}, "k=2.5: must be an integer"),
    ({"roles": ["q", 3]}, "roles=['q', 3]: must be a string"),
    ({"progress": "x"}, "progress='x': must be a function"),
    ({"layers": 5}, "layers=5: must be a string"),
    ({"ov": "yes"}, "ov='yes': must be True or False"),
    ({"names": 3}, "names=3: must be the path"),
    ({"config": ["x"]}, "config=['x']: must be a dict"),
    ({"null_draws": 10**12}, "null_draws=1000000000000, k=2: this scan would need about"),
    ({"names": "y" * 3000}, "names='" + "y" * 59 + "... (3002 characters): not a usable path (File name too long)"),
    ({"config": {"num_attention_heads": 3, "num_key_value_heads": 3}}, "state dict (in memory): config "
                                                                       "num_attention_heads = 3 does not divide"),
])
def test_every_keyword_of_the_python_api_is_checked_up_front(keywords: dict[str, object], start: str) -> None:
    # Issue 33: each was a TypeError deep in the measurement, a RuntimeError in the OV hook or an endless allocation.
    state = llama_state(3, 32, 4, 2, 48)
    with pytest.raises(GeodriftError) as info:
        geodrift.scan(state, **{"k": 2, "null_draws": 4, **keywords})
    assert str(info.value).startswith(start) and "\n" not in str(info.value), str(info.value)


def test_the_cli_refuses_the_same_head_counts_from_config_json(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    config = {k: v for k, v in hf_config(n_layers=3).items() if k != "hidden_size"}
    folder = write_hf_folder(tmp_path / "m", llama_state(3, 32, 4, 2, 48),
                             config | {"num_attention_heads": 3, "num_key_value_heads": 3}, dtype=torch.float32)
    line = _refused(["scan", str(folder), "--quiet"], capsys)
    assert "config.json num_attention_heads = 3" in line and str(folder) in line


def test_inspect_lists_an_unrecognised_tensor_and_a_names_rule_error_names_its_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = llama_state(3, 32, 4, 2, 48) | {"model.layers.0.extra_thing.weight": torch.ones(3, 3)}
    folder = write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3), dtype=torch.float32)
    with pytest.raises(SystemExit) as done:
        main(["inspect", str(folder), "--json"])
    assert done.value.code in (0, None)
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["tensors"]}
    assert rows["model.layers.0.extra_thing.weight"]["use"] == "not scanned"
    assert _refused(["scan", str(folder), "--quiet"], capsys).count("not recognised") == 1  # scan still refuses
    mapping = tmp_path / "names.json"
    mapping.write_text(json.dumps({r"model\.layers\.(\w+)\.self_attn\.q_proj\.weight": "attn_q"}))
    state["model.layers.x.self_attn.q_proj.weight"] = torch.ones(16, 32)
    other = write_hf_folder(tmp_path / "n", state, hf_config(n_layers=3), dtype=torch.float32)
    line = _refused(["scan", str(other), "--names", str(mapping), "--quiet"], capsys)
    assert line.startswith(f"error: {mapping}: name rule") and "'x'" in line


def test_a_missing_data_path_says_it_does_not_exist_before_any_status_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["simulate", "mlp", "--data", "/nonexistent", "--steps", "2"], capsys)
    assert "--data /nonexistent: does not exist" in line


def test_a_config_claiming_a_billion_layers_names_the_file(tmp_path: Path) -> None:
    from geodrift.pretrained import llama_from_checkpoint, open_llama, weights_label

    folder = write_hf_folder(tmp_path / "m", llama_state(3, 32, 4, 2, 48),
                             hf_config(n_layers=3) | {"num_hidden_layers": 10**9}, dtype=torch.float32)
    ckpt = open_llama(folder)
    assert weights_label(ckpt).startswith("F32 projections")  # the layers held, not the 10^9 claimed
    with pytest.raises(GeodriftError) as info:
        llama_from_checkpoint(ckpt)
    assert str(info.value).startswith(f"{folder / 'config.json'} num_hidden_layers = 1000000000")
