"""What a Python caller holds is scanned or refused, never dropped (issue 39, item 5).

- a state dict whose values are numpy arrays, lists or tuples of numbers scans like the same weights as tensors
  (those projections were silently left out);
- a value at a weight's name that is not an array of numbers (a string, a ragged list, an array of strings) is one
  GeodriftError naming the key;
- a path-like object or a bytes path is a path (it was refused with "pass a path");
- a progress callback that cannot take one argument is named before any work (it was a TypeError after the first
  matrix).

Real weights: a random Llama state dict, and the same written as a real safetensors folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder

import geodrift
from geodrift.errors import GeodriftError

KW: dict[str, Any] = {"k": 2, "null_draws": 4, "seed": 3, "view": "raw", "ov": False}
Q1 = "model.layers.1.self_attn.q_proj.weight"


def _numbers(report: geodrift.ScanReport) -> list[tuple[str, str, float]]:
    return [(r.role, s.space, s.vectors[0].mean) for r in report.roles for s in r.spaces.values()]


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return llama_state(3, 32, 4, 2, 48, seed=5)


@pytest.fixture(scope="module")
def reference(state: dict[str, torch.Tensor]) -> geodrift.ScanReport:
    return geodrift.scan(state, **KW)


@pytest.mark.parametrize("form", ["numpy", "numpy float16", "list", "tuple", "all numpy"])
def test_a_state_dict_of_arrays_or_lists_scans_like_the_same_tensors(state: dict[str, torch.Tensor],
                                                                     reference: geodrift.ScanReport,
                                                                     form: str) -> None:
    convert = {"numpy": lambda t: t.numpy(), "numpy float16": lambda t: t.to(torch.float16).float().numpy()
               .astype(np.float16), "list": lambda t: t.tolist(), "tuple": lambda t: tuple(map(tuple, t.tolist())),
               "all numpy": lambda t: t.numpy()}[form]
    converted = {k: (convert(v) if "q_proj" in k or form == "all numpy" else v) for k, v in state.items()}
    converted["step"] = np.int64(1000)  # a numpy scalar beside the weights is not a weight: left out, as an int is
    report = geodrift.scan(converted, **KW)
    assert [r.role for r in report.roles] == [r.role for r in reference.roles]  # attn_q was missing
    if form != "numpy float16":
        assert _numbers(report) == _numbers(reference)
    else:  # float16 weights: the same numbers to float16's precision
        assert [n[:2] for n in _numbers(report)] == [n[:2] for n in _numbers(reference)]
        assert [n[2] for n in _numbers(report)] == pytest.approx([n[2] for n in _numbers(reference)], abs=5e-3)


@pytest.mark.parametrize(("value", "said"), [("not a tensor", "is a str, not an array"),
                                             ([[1.0, 2.0], [3.0]], "not a rectangular array of numbers"),
                                             (np.array([["a", "b"]]), "not numbers"),
                                             (np.array([[object()]]), "not numbers"),
                                             ({"nested": 1}, "is a dict, not an array")])
def test_a_weight_that_is_not_an_array_of_numbers_is_refused_naming_its_key(state: dict[str, torch.Tensor],
                                                                           value: Any, said: str) -> None:
    with pytest.raises(GeodriftError) as info:
        geodrift.scan({**state, Q1: value}, **KW)
    message = str(info.value)
    assert Q1 in message and said in message and "\n" not in message, message


def test_a_path_like_object_or_a_bytes_path_is_a_path(state: dict[str, torch.Tensor], tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "m", state, hf_config(n_layers=3), dtype=torch.float32)
    expected = _numbers(geodrift.scan(str(folder), **KW))

    class Where:  # any os.PathLike, as a library of paths would hand one over
        def __fspath__(self) -> str:
            return str(folder / "model.safetensors")

    for given in (Where(), os.fsencode(folder), os.fsencode(folder / "model.safetensors")):
        assert _numbers(geodrift.scan(given, **KW)) == expected


@pytest.mark.parametrize(("callback", "said"), [(lambda: None, "takes 0 positional arguments"),
                                                (lambda a, b: None, "missing a required argument: 'b'")])
def test_a_callback_of_the_wrong_signature_is_named_before_any_work(tmp_path: Path, callback: Any,
                                                                    said: str) -> None:
    os.mkfifo(tmp_path / "fifo.safetensors")  # opening it would block: the callback is checked before the model
    with pytest.raises(GeodriftError) as info:
        geodrift.scan(tmp_path / "fifo.safetensors", progress=callback, **KW)
    assert str(info.value).startswith("progress=") and said in str(info.value), str(info.value)


def test_callbacks_that_take_one_string_are_accepted(state: dict[str, torch.Tensor]) -> None:
    seen: list[str] = []
    for callback in (seen.append, lambda label, *rest: seen.append(label), print):
        geodrift.scan(state, roles="k", progress=callback, **KW)
    assert "attn_k[0]" in seen
