"""Atomic writes get the user's umask (like any Unix tool), and every JSON file is strict and versioned."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from hypothesis import given
from strategies import json_like

from geodrift.io.atomic import (
    NONFINITE_NOTE,
    SCHEMA_VERSION,
    current_umask,
    document,
    payload_of,
    to_json,
    write_json,
    write_text,
    write_with,
)


@pytest.fixture
def umask():
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_get_the_mode_the_umask_gives_a_new_file(tmp_path: Path, umask, mask: int, mode: int):
    umask(mask)
    assert current_umask() == mask
    write_text(tmp_path / "a.txt", "x")
    write_json(tmp_path / "b.json", {"a": 1})
    write_with(tmp_path / "c.pt", lambda tmp: torch.save({"w": torch.ones(2)}, tmp))  # checkpoints too
    for name in ("a.txt", "b.json", "c.pt"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path):
    target = tmp_path / "keep.json"
    target.write_text("old")

    def boom(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_with(target, boom)
    assert target.read_text() == "old" and not list(tmp_path.glob(".*.tmp"))


def _strict_loads(text: str):
    def refuse(constant: str):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def test_nan_and_infinity_become_null_with_a_note_naming_each_path():
    doc = _strict_loads(to_json({"runs": [{"std": float("nan")}, {"z": float("inf")}], "a/b": [float("-inf"), 1.0]}))
    assert doc["runs"][0]["std"] is None and doc["runs"][1]["z"] is None and doc["a/b"] == [None, 1.0]
    assert doc["nonfinite"]["note"] == NONFINITE_NOTE and doc["nonfinite"]["count"] == 3
    assert doc["nonfinite"]["values"] == [{"path": "/runs/0/std", "was": "NaN"}, {"path": "/runs/1/z", "was": "Infinity"},
                                          {"path": "/a~1b/0", "was": "-Infinity"}]


def test_a_finite_payload_has_no_note_and_numpy_numbers_stay_numbers():
    import numpy as np

    doc = _strict_loads(to_json({"x": np.float32(0.5), "n": np.int64(3), "ok": True}))
    assert doc == {"x": 0.5, "n": 3, "ok": True}


@given(json_like())
def test_any_payload_becomes_json_a_strict_parser_accepts_and_every_replacement_is_listed(payload):
    doc = _strict_loads(to_json({"payload": payload}))

    def count(x) -> int:
        if isinstance(x, float):
            return int(not math.isfinite(x))
        if isinstance(x, dict):
            return sum(count(v) for v in x.values())
        if isinstance(x, list):
            return sum(count(v) for v in x)
        return 0

    assert doc.get("nonfinite", {}).get("count", 0) == count(payload)


def test_documents_start_with_schema_version_and_kind_and_read_back_without_them():
    doc = _strict_loads(to_json(document("proofs", {"seed": 0, "x": float("nan")})))
    assert list(doc)[:2] == ["schema_version", "kind"] and doc["schema_version"] == SCHEMA_VERSION
    assert payload_of(doc) == {"seed": 0, "x": None}
    with pytest.raises(ValueError, match="kind"):
        document("tokenizer", {"kind": "bpe"})
