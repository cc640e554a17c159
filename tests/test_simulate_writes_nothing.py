"""`geodrift simulate transformer` without --out writes nothing: the SmolLM2 reference is scanned in memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.test_sim_record import _text_corpus


def test_the_transformer_simulator_without_out_writes_nothing_and_says_so(tmp_path: Path):
    corpus = _text_corpus(tmp_path / "corpus.txt")
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "geodrift", "simulate", "transformer", "--preset", "tiny",
                           "--seeds", "5", "--steps", "2", "--track-every", "0", "--device", "cpu",
                           "--data", str(corpus)], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(cwd.rglob("*")) == []  # no runs/transformer/smollm2-135m_scan_*.json, nothing else
    assert "in memory, not cached: no --out, nothing written" in done.stderr
    assert "SmolLM2" in done.stdout  # the reference column is still shown


def test_with_out_the_reference_scan_is_cached_there(tmp_path: Path):
    from geodrift.continuity import MeasureSpec
    from geodrift.pretrained import smollm2_reference

    spec = MeasureSpec(k=1, null_draws=2)
    first = smollm2_reference(tmp_path, spec)
    cached = list(tmp_path.glob("smollm2-135m_scan_k1_n2_s0.json"))
    assert len(cached) == 1
    again = smollm2_reference(tmp_path, spec)  # read back from the cache, not rescanned
    assert again.to_dict() == first.to_dict()
