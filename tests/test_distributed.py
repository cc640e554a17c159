"""Scans on Ray (--backend ray): a training series, a pair and layer ranges give the local run's numbers, bitwise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _checkpoints import hf_config, llama_state, write_hf_folder

from geodrift.continuity import MeasureSpec
from geodrift.errors import GeodriftError
from geodrift.scanner.distributed import RaySource, check_backend, layer_ranges
from geodrift.scanner.scan import load_weights, scan
from geodrift.scanner.series import compare, drift

ray = pytest.importorskip("ray")


def _series(folder: Path, n: int) -> list[str]:
    # n checkpoints of one small Llama: seed 0 plus a drift that grows along the "training" (k/v heads, GQA).
    base = llama_state(n_layers=4, d=48, n_heads=4, n_kv=2, d_ff=96, seed=0)
    paths = []
    for t in range(n):
        noise = llama_state(n_layers=4, d=48, n_heads=4, n_kv=2, d_ff=96, seed=100 + t)
        state = {name: w + 0.05 * t * noise[name] for name, w in base.items()}
        path = folder / f"step{t}"
        write_hf_folder(path, state, hf_config(n_layers=4, d=48, n_heads=4, n_kv=2, d_ff=96))
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _json(report) -> str:
    return json.dumps(report.to_dict(), sort_keys=True)


@pytest.mark.heavy  # eight checkpoints on a local Ray cluster; the default run keeps compare on Ray
def test_a_drift_of_eight_checkpoints_on_ray_is_the_local_drift_bitwise(tmp_path, cluster):
    paths = _series(tmp_path, 8)
    spec = MeasureSpec(k=3, null_draws=20)
    local = drift(paths, spec)
    on_ray = drift(paths, spec, backend="ray")
    assert len(on_ray.reports) == 8 and _json(on_ray) == _json(local)


def test_compare_on_ray_is_the_local_compare_bitwise(tmp_path, cluster):
    a, b = _series(tmp_path, 2)
    spec = MeasureSpec(k=3, null_draws=20)
    assert _json(compare(a, b, spec, backend="ray")) == _json(compare(a, b, spec))


@pytest.mark.heavy  # a scan on a local Ray cluster; the default run keeps compare on Ray
def test_a_scan_of_layer_ranges_on_ray_is_the_local_scan_bitwise(cluster):
    # The embedded SmolLM2 (real GGUF), 6 layers in 3 ranges: the merged report, trajectory included.
    ws, heads = load_weights(None, layers=list(range(6)))
    spec = MeasureSpec(k=4, null_draws=20)
    local = scan(ws, spec, heads=heads)
    on_ray = scan(ws, spec, heads=heads, ray=RaySource(None, chunks=3))
    assert _json(on_ray) == _json(local)


def test_a_task_error_is_one_line_naming_the_checkpoint(tmp_path, cluster):
    paths = _series(tmp_path, 2)
    (Path(paths[1]) / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(GeodriftError) as error:
        drift(paths, MeasureSpec(k=2, null_draws=4), backend="ray")
    assert "step1" in str(error.value) and "\n" not in str(error.value) and "Traceback" not in str(error.value)


def test_backend_options_are_checked_before_any_work():
    with pytest.raises(GeodriftError, match="--backend 'spark'"):
        check_backend("spark", None)
    with pytest.raises(GeodriftError, match="--address"):
        check_backend("local", "auto")
    assert layer_ranges(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]


@pytest.mark.heavy  # starts its own Ray cluster
def test_the_cli_drift_runs_on_a_local_ray_cluster(tmp_path):
    paths = _series(tmp_path, 3)
    out = tmp_path / "drift.json"
    done = subprocess.run([sys.executable, "-m", "geodrift", "drift", *paths, "--backend", "ray", "--k", "2",
                           "--null-draws", "8", "-q", "--json-out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(json.loads(out.read_text())["reports"]) == 3
