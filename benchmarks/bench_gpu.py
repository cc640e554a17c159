"""The GPU route in one run (``scripts/gpu_check.sh``): ensemble, transformer tokens/s, and a scan on CUDA.

Three checks, side by side in one process, each against its CPU counterpart where one exists:

1. **Batched ensemble** of the toy MLP (Res+ReLU, tracking off): ``--members`` seeds x ``--ens-steps``
   steps as one batched ensemble on CUDA and on the CPU; member-steps/s and their ratio (target:
   CUDA >= 5x the CPU ensemble).
2. **The ``paper`` transformer preset** for ``--tf-steps`` steps on CUDA, tracked as the preset tracks:
   training tokens/s (the record's ``tokens_per_second``).
3. **A scan on CUDA**: the embedded SmolLM2 and one random Llama-3.1-8B-shaped layer's 14336 x 4096 MLP
   matrix, ``--device cuda`` against the CPU: wall seconds and the smallest ``|cos|`` between the two
   devices' top-8 vectors (every vector is certified within 0.999 of the exact one on either device, so the
   two agree to at least 0.996).

Writes ``--out`` (default benchmarks/RESULTS_gpu.md) with the stamp. Exits 1 when CUDA is absent.

Usage::

    python benchmarks/bench_gpu.py [--members 16] [--ens-steps 300] [--tf-steps 200] [--out benchmarks/RESULTS_gpu.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _stamp import stamp_lines  # noqa: E402

TARGET_ENSEMBLE = 5.0


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def ensemble(members: int, steps: int) -> list[str]:
    from geodrift.sim.config import ImageData, MLPConfig, RunSpec, TrackConfig, TrainConfig
    from geodrift.sim.run import run_seeds

    spec = RunSpec("mlp", "Res+ReLU", MLPConfig(), ImageData(), TrainConfig(steps=steps), TrackConfig(every=0))
    seeds = [42 + i for i in range(members)]
    run_seeds(spec, seeds[:2], batched=True, device="cuda")  # warm-up: CUDA context, kernels
    cuda = _timed(lambda: run_seeds(spec, seeds, batched=True, device="cuda"))
    cpu = _timed(lambda: run_seeds(spec, seeds, batched=True, device="cpu"))
    work = members * steps
    ratio = cpu / cuda
    return [f"| batched ensemble ({members} x {steps} steps) | {work / cpu:.0f} member-steps/s | "
            f"{work / cuda:.0f} member-steps/s | {ratio:.1f}x ({'met' if ratio >= TARGET_ENSEMBLE else 'MISSED'}, "
            f"target >= {TARGET_ENSEMBLE:.0f}x) |"]


def transformer(steps: int) -> list[str]:
    from geodrift.sim.reproduce import build_specs
    from geodrift.sim.run import run

    (spec,) = build_specs("transformer", "paper", steps=steps)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        (res,) = run(spec, [42], out=out, device="cuda")
        wall = time.perf_counter() - start
    tokens = float(res.record.timing["tokens_per_second"])
    return [f"| `paper` transformer preset, {steps} steps (tracked as the preset) | — | {tokens:,.0f} tokens/s "
            f"({wall:.0f} s wall) | — |"]


def scan_rows() -> list[str]:
    from geodrift.continuity import MeasureSpec, decompose
    from geodrift.linalg import top_k_svd
    from geodrift.scanner.scan import load_weights, ov_composite_hook

    rows = []
    ws, heads = load_weights(None, "raw")
    assert heads is not None
    resident = {key: ws[key] for key in ws}
    from geodrift.weights import WeightSet

    resident_ws = WeightSet.from_tensors(resident, origin="resident")
    decompose(resident_ws, MeasureSpec(device="cuda"))  # warm-up
    times, results = {}, {}
    for device in ("cuda", "cpu"):
        start = time.perf_counter()
        results[device] = decompose(resident_ws, MeasureSpec(device=device), derive=ov_composite_hook(*heads))
        torch.cuda.synchronize()
        times[device] = time.perf_counter() - start
    rows.append(f"| scan SVD stage, embedded SmolLM2 ({len(resident)} matrices + OV) | {times['cpu']:.2f} s | "
                f"{times['cuda']:.2f} s | {times['cpu'] / times['cuda']:.1f}x; min top-8 |cos| between devices "
                f"{_agreement(results['cpu'], results['cuda']):.5f} |")
    g = torch.Generator().manual_seed(0)
    W = (torch.randn(14336, 4096, generator=g) * 0.02).bfloat16().float()
    start = time.perf_counter()
    on_gpu = top_k_svd(W.cuda(), 8)
    torch.cuda.synchronize()
    t_gpu = time.perf_counter() - start
    start = time.perf_counter()
    on_cpu = top_k_svd(W, 8)
    t_cpu = time.perf_counter() - start
    rows.append(f"| 8B-shaped 14336 x 4096 (random, the hardest spectrum) | {t_cpu:.1f} s ({on_cpu.method}) | "
                f"{t_gpu:.2f} s ({on_gpu.method}) | {t_cpu / t_gpu:.1f}x; min top-8 |cos| "
                f"{_agreement({0: on_cpu}, {0: on_gpu}):.5f} |")
    return rows


def _agreement(a: dict, b: dict) -> float:  # type: ignore[type-arg]
    worst = 1.0
    for key, t in a.items():
        u = b[key]
        cos_v = (t.Vh.double() * u.Vh.double()).sum(1).abs().min()
        cos_u = (t.U.double() * u.U.double()).sum(0).abs().min()
        worst = min(worst, float(cos_v), float(cos_u))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=16)
    parser.add_argument("--ens-steps", type=int, default=300)
    parser.add_argument("--tf-steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS_gpu.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured (run this on a machine with a GPU)", file=sys.stderr)
        sys.exit(1)
    load_before = os.getloadavg()
    rows = ["| check | CPU | CUDA | ratio / note |", "|---|---:|---:|---|"]
    sections = [("ensemble", lambda: ensemble(args.members, args.ens_steps)),
                ("transformer", lambda: transformer(args.tf_steps)), ("scan", scan_rows)]
    for name, section in sections:
        start = time.perf_counter()
        try:
            rows += section()
        except Exception as failure:  # one failed check must not hide the others' numbers
            rows.append(f"| {name} | FAILED | {type(failure).__name__}: {str(failure).splitlines()[0][:120]} | |")
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    gpu = f"{torch.cuda.get_device_name(0)} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)"
    text = "\n".join(["# GPU route (issue 22)", "", *stamp_lines(load_before, {"GPU": gpu}), "", *rows, ""])
    from geodrift.io.atomic import write_text

    write_text(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
