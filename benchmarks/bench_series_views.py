"""Cost of the default view's gauge fixing in ``geodrift drift`` / ``compare``: linear in the number of checkpoints,
and its ratio to the folded view's drift of the same series (issue 38's target: at most 1.5x).

Writes the embedded SmolLM2-135M as a Hugging Face folder (float32, through ``geodrift.lm.hf.save_hf``) and a
training-series stand-in after it: each next checkpoint the previous one plus Gaussian noise of ``--eps`` of each
matrix's std (a random walk). Then times, side by side in one run (each view right after the other, so both see
the same load), ``drift`` of the first 2, 4 and 8 checkpoints and ``compare`` of the first two, in the default
view (canonical reference, every other checkpoint aligned to it) and in ``--view folded``: wall seconds, and
the ratio in CPU seconds too (``time.process_time``, every thread of the process: steadier on a loaded machine).
After one warm-up drift of layers 0-1 in each view (imports, thread pools), each job runs ``--repeats`` times, the
two views interleaved (their order alternating), and the medians are reported: one run of each under a load of 4
to 8 moved the ratio by up to a tenth.

Usage (writes ``--out``, default benchmarks/RESULTS_series_views.md, stamped with the load):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_series_views.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from geodrift.continuity import MeasureSpec
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.jobs.series import CompareRequest, DriftRequest
from geodrift.lm.hf import save_hf
from geodrift.pretrained import llama_from_checkpoint, open_llama
from geodrift.scanner.series import compare, drift


def series(root: Path, count: int, eps: float) -> list[str]:
    """The embedded model and ``count - 1`` checkpoints after it, each the last plus noise of ``eps`` of each std."""
    base = save_hf(llama_from_checkpoint(open_llama(None)), root / "step-000")
    config = (base / "config.json").read_text()
    sd, paths, g = load_file(base / "model.safetensors"), [str(base)], torch.Generator().manual_seed(0)
    for i in range(1, count):
        sd = {k: v + eps * v.std() * torch.randn(v.shape, generator=g) if v.ndim == 2 else v for k, v in sd.items()}
        folder = root / f"step-{i:03d}"
        folder.mkdir()
        save_file(sd, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(config)
        paths.append(str(folder))
    return paths


def default_k(request: type) -> int:
    """The command's own default ``--k`` (drift keeps 4 vectors, compare compares 8-dimensional subspaces)."""
    return int(next(f.default for f in dataclasses.fields(request) if f.name == "k"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="2,4,8")
    parser.add_argument("--eps", type=float, default=1e-3)
    parser.add_argument("--layers", default=None, help="e.g. 0-9 (default: all 30)")
    parser.add_argument("--null-draws", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each job and view; medians reported")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_series_views.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    t_start, load_before = time.perf_counter(), load_average()
    counts = [int(c) for c in args.counts.split(",")]
    layers = None if args.layers is None else list(range(int(args.layers.split("-")[0]),
                                                         int(args.layers.split("-")[1]) + 1))
    spec = MeasureSpec(k=default_k(DriftRequest), null_draws=args.null_draws)
    compare_spec = MeasureSpec(k=default_k(CompareRequest), null_draws=args.null_draws)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = series(Path(tmp), max(counts), args.eps)
        jobs = [(f"drift of {n} checkpoints", n, lambda view, n=n: drift(paths[:n], spec, view=view, layers=layers))
                for n in counts]
        jobs.append(("compare of 2 checkpoints", 2, lambda view: compare(paths[0], paths[1], compare_spec, view=view,
                                                                        layers=layers)))
        for view in (None, "folded"):  # warm-up: imports, thread pools
            drift(paths[:2], spec, view=view, layers=[0, 1])
        for label, n, job in jobs:
            seconds: dict[str | None, list[float]] = {None: [], "folded": []}
            cpu: dict[str | None, list[float]] = {None: [], "folded": []}
            for repeat in range(args.repeats):
                for view in (None, "folded") if repeat % 2 == 0 else ("folded", None):
                    t0, c0 = time.perf_counter(), time.process_time()
                    job(view)
                    seconds[view].append(time.perf_counter() - t0)
                    cpu[view].append(time.process_time() - c0)
            rows.append((label, n, *(statistics.median(x) for x in (seconds[None], seconds["folded"], cpu[None],
                                                                     cpu["folded"]))))
            print(rows[-1], seconds, cpu, flush=True)
    lines = [f"1 torch thread; the embedded SmolLM2-135M (float32 Hugging Face folders, layers "
             f"{args.layers or '0-29'}), each checkpoint the last plus noise of {args.eps:g} of each matrix's std; "
             f"each command's default k ({spec.k} for drift, {compare_spec.k} for compare), {args.null_draws} null draws; "
             f"median of {args.repeats} runs of each view, interleaved, after a "
             "warm-up. Default: canonical reference, every other checkpoint aligned to it; folded: norm gains folded, "
             "no gauge fixed.", "",
             "| job | checkpoints | default s | default s / checkpoint | folded s | folded s / checkpoint | "
             "default / folded (wall) | default / folded (CPU) |", "|---|---|---|---|---|---|---|---|"]
    for label, n, default, folded, cpu_default, cpu_folded in rows:
        lines.append(f"| {label} | {n} | {default:.1f} | {default / n:.2f} | {folded:.1f} | {folded / n:.2f} | "
                     f"{default / folded:.2f} | {cpu_default / cpu_folded:.2f} |")
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t_start})
    title = "Drift and compare: the default view's gauge fixing against the folded view"
    print(f"wrote {write_results(args.out, title, chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
