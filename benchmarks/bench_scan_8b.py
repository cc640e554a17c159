"""`geodrift scan` at Llama-3.1-8B shapes: seconds per layer, peak RSS, and WeightWatcher side by side.

Writes a synthetic Llama-3.1-8B-shaped bf16 checkpoint (hidden 4096, d_ff 14336, 32 query / 8
key-value heads, head dim 128; random N(0, 0.02) weights; one shard per layer plus the embedding
shard, with model.safetensors.index.json) of ``--layers`` decoder layers (8 -> about 3.7 GB) into a
temporary folder, and a second one with the first ``--ww-layers`` layers only (the same tensors: one
generator, layer by layer; no embedding shard), then times, each in a fresh child process with its
peak RSS from ``os.wait4``:

  1. ``geodrift scan DIR --view raw`` (all L layers);
  2. ``geodrift scan SMALL --view raw`` and WeightWatcher's default ``WeightWatcher(model=SMALL).analyze()`` on
     the same ``--ww-layers`` layers (the same projection matrices): the ratio a user would see;
     seconds per layer = (T(L) - T(SMALL)) / (L - ww_layers), so start-up and fixed costs cancel
     (with ``--ww-layers 0``: ``geodrift scan DIR --layers 0-(L/2-1)`` is the shallow point instead).

Then it extrapolates ``T(L) = fixed + per_layer * L`` to 32 (Llama-3.1-8B) and 80 (Llama-3.1-70B's
depth at these widths; a real 70B is 8192 wide, so about 4x per layer on top) layers. The folders
are deleted afterwards. The timing children run under the bench lock only when ``--lock`` is given
(the writes run outside it).

Usage::

    uptime; python benchmarks/bench_scan_8b.py --layers 8 --ww-layers 2 --lock /tmp/geodrift-bench.lock \\
        [--spectrum random|trained] --write-results benchmarks/RESULTS_scan_8b.md
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scan_memory import D_FF, D_MODEL, N_HEADS, N_KV, run_child  # noqa: E402

TARGET_RSS_GB, TARGET_8B_S = 2.0, 300.0

_CHILD_WW = """
import sys, time, logging
logging.disable(logging.WARNING)
import weightwatcher as ww
t = time.perf_counter()
details = ww.WeightWatcher(model=sys.argv[1]).analyze()
print(f"weightwatcher {ww.__version__}: {len(details)} layers analysed in {time.perf_counter() - t:.1f} s", file=sys.stderr)
"""


@contextmanager
def bench_lock(path: Path | None):  # type: ignore[no-untyped-def]
    if path is None:
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write(folder: Path, layers: int, embedding: bool, spectrum: str) -> int:
    folder.mkdir()
    argv = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from bench_scan_memory import "
            "write_checkpoint; from pathlib import Path; print(write_checkpoint(Path(sys.argv[2]), int(sys.argv[3]), "
            "embedding=sys.argv[4] == '1', spectrum=sys.argv[5]))", str(Path(__file__).resolve().parent), str(folder),
            str(layers), "1" if embedding else "0", spectrum]
    return int(subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--ww-layers", type=int, default=2, help="layers of the WeightWatcher comparison (0 = skip)")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--lock", type=Path, default=None, help="flock this file while timing")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--write-results", type=Path, default=None)
    parser.add_argument("--spectrum", choices=("random", "trained"), default="random",
                        help="random N(0, 0.02) weights (the hardest spectrum) or the same with the embedded model's "
                        "measured top-12 spectrum planted (bench_scan_memory.TRAINED_TOP)")
    args = parser.parse_args()
    half = args.layers // 2
    work = Path(tempfile.mkdtemp(prefix="geodrift-8b-", dir=args.dir))
    geodrift = shutil.which("geodrift") or str(Path(sys.executable).parent / "geodrift")
    rows: dict[str, dict[str, object]] = {}
    try:
        deep, small = work / "llama8b-shaped", work / "llama8b-shaped-first-layers"
        start = time.perf_counter()
        size = write(deep, args.layers, embedding=True, spectrum=args.spectrum)
        small_size = write(small, args.ww_layers, embedding=False, spectrum=args.spectrum) if args.ww_layers else 0
        print(f"wrote {size / 1e9:.2f} GB ({args.layers} layers) and {small_size / 1e9:.2f} GB ({args.ww_layers} layers) "
              f"in {time.perf_counter() - start:.0f} s", flush=True)
        uptime = os.getloadavg()
        load_before = uptime
        with bench_lock(args.lock):
            rows["full"] = run_child([geodrift, "scan", str(deep), "--view", "raw", "--brief", "--json-out", str(work / "full.json")],
                                     f"scan {args.layers} layers", args.timeout)
            if args.ww_layers:  # the WW set's scan is also the shallow point of the per-layer slope
                rows["half"] = run_child([geodrift, "scan", str(small), "--view", "raw", "--brief", "--json-out",
                                          str(work / "small.json")], f"scan {args.ww_layers} layers (WW set)",
                                         args.timeout)
                rows["ww"] = run_child([sys.executable, "-c", _CHILD_WW, str(small)],
                                       f"weightwatcher {args.ww_layers} layers", args.timeout)
            else:
                rows["half"] = run_child([geodrift, "scan", str(deep), "--view", "raw", "--layers", f"0-{half - 1}", "--brief",
                                          "--json-out", str(work / "half.json")], f"scan {half} layers", args.timeout)
        uptime_after = os.getloadavg()
        report = json.loads((work / "full.json").read_text())
        methods: dict[str, int] = {}
        for role in report["roles"]:
            for method, count in role["methods"].items():
                methods[method] = methods.get(method, 0) + count
    finally:
        shutil.rmtree(work, ignore_errors=True)
    t_half, t_full = float(rows["half"]["wall_s"]), float(rows["full"]["wall_s"])  # type: ignore[arg-type]
    shallow = args.ww_layers or half
    per_layer = (t_full - t_half) / (args.layers - shallow)
    fixed = t_full - per_layer * args.layers
    projected = {depth: fixed + per_layer * depth for depth in (32, 80)}
    peak = max(float(r["peak_rss_gb"]) for key, r in rows.items() if key != "ww")  # type: ignore[arg-type]
    lines = [f"checkpoint {size / 1e9:.2f} GB, {args.layers} layers; load average before {uptime[0]:.1f}, "
             f"after {uptime_after[0]:.1f}; SVD methods {methods}",
             f"per layer {per_layer:.1f} s, fixed {fixed:.1f} s; projected 32 layers {projected[32]:.0f} s "
             f"({projected[32] / 60:.1f} min, target <= {TARGET_8B_S / 60:.0f} min), 80 layers {projected[80]:.0f} s "
             f"({projected[80] / 60:.1f} min); worst geodrift peak RSS {peak:.3f} GB (target < {TARGET_RSS_GB} GB)"]
    if args.ww_layers:
        ratio = float(rows["ww"]["wall_s"]) / float(rows["half"]["wall_s"])  # type: ignore[arg-type]
        lines.append(f"WeightWatcher / geodrift on the same {args.ww_layers} layers: {ratio:.1f}x wall; "
                     f"peak RSS {float(rows['ww']['peak_rss_gb']):.2f} GB vs {float(rows['half']['peak_rss_gb']):.2f} GB")  # type: ignore[arg-type]
    print("\n".join(lines))
    if args.write_results:
        write_results(args, size, rows, lines, load_before)


def write_results(args: argparse.Namespace, size: int, rows: dict[str, dict[str, object]], lines: list[str],
                  load_before: tuple[float, float, float]) -> None:
    from _stamp import stamp_lines

    from geodrift.io.atomic import write_text

    path: Path = args.write_results
    text = path.read_text(encoding="utf-8") if path.exists() else "# Scan benchmarks\n"
    marker = f"## 8B-shaped checkpoint, {args.spectrum} spectrum"
    head, _, rest = text.partition(marker)
    tail = rest[rest.index("\n## "):] if "\n## " in rest else ""
    body = [
        marker, "",
        *stamp_lines(load_before),
        "", f"Checkpoint: synthetic, Llama-3.1-8B shapes (hidden {D_MODEL}, d_ff {D_FF}, {N_HEADS} query / {N_KV} "
        f"key-value heads, head dim {D_MODEL // N_HEADS}), {args.spectrum} spectrum ("
        + ("N(0, 0.02) weights: a Marchenko-Pastur bulk whose top singular values lie within 0.1 % of each other"
           if args.spectrum == "random" else "N(0, 0.02) weights plus the embedded SmolLM2's measured top-12 "
           "spectrum planted as rank-one spikes, `bench_scan_memory.TRAINED_TOP`")
        + f") in bf16, {args.layers} layers + embedding, one shard per layer: {size / 1e9:.2f} GB. Each row is a fresh "
        "child process (OMP_NUM_THREADS=1 in its environment; geodrift sets its own thread layout); peak RSS is its "
        "`ru_maxrss`.", "",
        "| child | peak RSS (GB) | wall (s) | exit |", "|---|---:|---:|---:|",
    ]
    for row in rows.values():
        body.append(f"| {row['label']} | {float(row['peak_rss_gb']):.3f} | {float(row['wall_s']):.1f} | "  # type: ignore[arg-type]
                    f"{row['exit']} |")
    body += ["", *[f"- {line}" for line in lines], ""]
    write_text(path, head.rstrip() + "\n\n" + "\n".join(body) + tail)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
