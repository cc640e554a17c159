"""A whole synthetic Llama-3.1-8B scanned end to end from a cold page cache: wall time, peak RSS, stages.

Writes one checkpoint at a time (``--spectrum trained``, ``random`` or ``both``, in that order) with
Llama-3.1-8B's shapes: 32 decoder layers, hidden 4096, 32 query / 8 key-value heads (head dim 128),
d_ff 14336, vocabulary 128256 (the embedding shard is written, though the scan reads projections
only), bf16, sharded (``--layers-per-shard`` decoder layers per shard, plus the embedding shard, with
model.safetensors.index.json): about 16 GB. Then, as root, ``sync; echo 3 > /proc/sys/vm/drop_caches``
so that every byte comes from the disk, and ``geodrift scan DIR [--view V] --brief --json-out ...`` runs in a fresh
child process (OMP_NUM_THREADS=1 in its environment; geodrift sets its own thread layout) whose
stage functions are wrapped by ``bench_scan_speed``'s StageClock (exclusive seconds per stage: the
read, Gram products, Lanczos, block Krylov, the acceptance rule, the exact fallback, the trajectory,
...). Its peak RSS is ``ru_maxrss`` from ``os.wait4``, and its CPU time (user + system) is recorded beside the
wall time: on a shared machine it says how much of the 2 cores the scan actually got. The folder is removed before the next
checkpoint is written (and on any error).

The two spectra (``bench_scan_memory.write_checkpoint``):

- ``random``: N(0, 0.02) entries, a Marchenko-Pastur bulk whose top singular values lie within 0.1 %
  of each other, the hardest case for any iterative SVD;
- ``trained``: low rank plus noise: the same bulk plus 12 rank-one spikes along random directions whose
  singular values are ``TRAINED_TOP[i]`` times the bulk edge, ``TRAINED_TOP`` being the embedded
  SmolLM2-135M's measured profile (the median over its Q, O, Gate, Up and Down matrices of layers 5,
  15 and 25 of ``s_i / s_41``, i = 1..12): a trained model's top singular values stand out from
  its bulk by these ratios; below them the spectrum is the random bulk's.

Targets (issue 34): <= 3 min (trained), <= 5 min (random), peak RSS < 2 GB; issue 42: the same in the default
(canonical) view, which costs at most 1.3x the folded view (``--also folded`` scans it cold after the default). The timing runs under
``--lock`` when given (the writes run outside it); the stamp records the load average, since the
machine may be shared.

Usage (root, for the cache drop)::

    uptime; python benchmarks/bench_scan_8b_cold.py --spectrum both --dir /tmp --lock /tmp/geodrift-bench.lock \\
        --write-results benchmarks/RESULTS_scan_8b_cold.md
    python benchmarks/bench_scan_8b_cold.py --spectrum trained --also folded --dir /tmp \\
        --write-results benchmarks/RESULTS_scan_8b_cold_default.md   # the default view, and folded beside it
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scan_8b import TARGET_RSS_GB, bench_lock  # noqa: E402
from bench_scan_memory import D_FF, D_MODEL, N_HEADS, N_KV, run_child  # noqa: E402

LAYERS, VOCAB_31 = 32, 128256
TARGETS_S = {"trained": 180.0, "random": 300.0}

# The scan child: the real CLI with bench_scan_speed's stage wrappers (the scan's own two-worker schedule).
_CHILD = """
import json, sys, time
from geodrift.cli.entry import use_huge_pages
use_huge_pages()  # as the console script does, before torch is imported
sys.path.insert(0, sys.argv[1])
from bench_scan_speed import StageClock, stage_patches
from geodrift.cli.main import main
model, report, stages, view = sys.argv[2:6]
if sys.argv[6:] == ["no-warm"]:  # the comparison: large matrices read on the main thread only, nothing warmed
    from geodrift.scanner.checkpoint import Checkpoint
    from geodrift.scanner.safetensors_reader import SafetensorsCheckpoint
    SafetensorsCheckpoint.warm = Checkpoint.warm
clock = StageClock()
start = time.perf_counter()
with stage_patches(clock, serial=False):
    sys.argv = ["geodrift", "scan", model, *(["--view", view] if view != "default" else []), "--brief", "--json-out", report]
    try:
        main()
    except SystemExit as exit:
        if exit.code:
            raise
wall = time.perf_counter() - start
with open(stages, "w") as out:
    json.dump({"wall_s": wall, "seconds": dict(clock.seconds), "calls": dict(clock.calls)}, out)
"""


def drop_caches() -> str:
    """``sync; echo 3 > /proc/sys/vm/drop_caches``; returns what was done (root only)."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as error:
        return f"page cache NOT dropped ({error.strerror}): the read is warm, not cold"
    return "page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches)"


def write(folder: Path, spectrum: str, per_shard: int, layers: int) -> int:
    folder.mkdir()
    argv = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from bench_scan_memory import "
            "write_checkpoint; from pathlib import Path; print(write_checkpoint(Path(sys.argv[2]), int(sys.argv[3]), "
            "spectrum=sys.argv[4], vocab=int(sys.argv[5]), layers_per_shard=int(sys.argv[6])))",
            str(Path(__file__).resolve().parent), str(folder), str(layers), spectrum, str(VOCAB_31), str(per_shard)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return int(subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1])


def one(spectrum: str, args: argparse.Namespace) -> dict[str, object]:
    """Write, drop the cache, scan, remove: one checkpoint's row."""
    work = Path(tempfile.mkdtemp(prefix="geodrift-8b-cold-", dir=args.dir))
    try:
        folder = work / f"llama31-8b-shaped-{spectrum}"
        start = time.perf_counter()
        if args.checkpoint is not None:  # already written by this writer (same seed: the same bytes), read only
            folder = args.checkpoint
            size = sum(f.stat().st_size for f in folder.iterdir() if f.suffix == ".safetensors")
        else:
            size = write(folder, spectrum, args.layers_per_shard, args.layers)
        written = time.perf_counter() - start
        print(f"{spectrum}: {'found' if args.checkpoint else 'wrote'} {size / 1e9:.2f} GB in {written:.0f} s", flush=True)
        with bench_lock(args.lock):
            load_before = os.getloadavg()
            start = time.perf_counter()
            dropped = drop_caches()
            drop_s = time.perf_counter() - start
            child = [sys.executable, "-c", _CHILD, str(Path(__file__).resolve().parent), str(folder),
                     str(work / "scan.json"), str(work / "stages.json"), args.view]
            rows = []
            for run in range(args.repeat):  # interleaved: the view, then each other view, each from a cold cache
                tag = f" (run {run + 1} of {args.repeat})" if args.repeat > 1 else ""
                if run:
                    drop_caches()
                rows.append(run_child(child, f"scan {args.layers} layers, {spectrum}, {_view_label(args.view)}{tag}",
                                      args.timeout))
                for other in args.also:  # the same checkpoint, cold again, in another view (the default's cost ratio)
                    drop_caches()
                    rows.append(run_child([*child[:-3], str(work / f"scan-{other}.json"),
                                           str(work / f"stages-{other}.json"), other],
                                          f"same, {_view_label(other)}{tag}", args.timeout))
            mains = [r for r in rows if not str(r["label"]).startswith("same")]
            row = dict(sorted(mains, key=lambda r: float(r["wall_s"]))[len(mains) // 2],  # type: ignore[arg-type]
                       peak_rss_gb=max(float(r["peak_rss_gb"]) for r in mains))  # type: ignore[arg-type]
            if args.no_warm_too:  # the same scan, cold again, with the page-cache warm-up switched off
                drop_caches()
                rows.append(run_child([*child[:-2], str(work / "stages-no-warm.json"), args.view, "no-warm"],
                                      f"same, nothing warmed ({spectrum})", args.timeout))
            load_after = os.getloadavg()
        stages = json.loads((work / "stages.json").read_text()) if (work / "stages.json").exists() else {}
        other_stages = {other: json.loads((work / f"stages-{other}.json").read_text()) for other in args.also
                        if (work / f"stages-{other}.json").exists()}
        methods: dict[str, int] = {}
        if (work / "scan.json").exists():
            for role in json.loads((work / "scan.json").read_text())["roles"]:
                for method, count in role["methods"].items():
                    methods[method] = methods.get(method, 0) + count
    finally:
        start = time.perf_counter()
        shutil.rmtree(work, ignore_errors=True)
        removed = time.perf_counter() - start
    return {"existing": args.checkpoint is not None, "spectrum": spectrum, "view": args.view, "size": size, "layers": args.layers, "row": row, "rows": rows, "stages": stages, "other_stages": other_stages, "methods": methods, "dropped": dropped,
            "load_before": load_before, "load_after": load_after,
            "wall": {"write checkpoint": written, "drop caches": drop_s, "scan (child)": float(row["wall_s"]),  # type: ignore[arg-type]
                     "remove checkpoint": removed}}


def _view_label(view: str) -> str:
    return "the default view" if view == "default" else f"--view {view}"


def _view_flag(view: str) -> str:
    return "" if view == "default" else f"--view {view} "


def _ratios(rows: list[dict[str, object]]) -> list[str]:
    # the scanned view's wall over each other view's (the default view's cost against folded and raw): with repeats,
    # median over median, and each run's own ratio
    def view_of(row: dict[str, object]) -> str:
        return str(row["label"]).split(" (run ")[0].split(", ")[-1]

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    first = view_of(rows[0])
    mains = [float(r["wall_s"]) for r in rows if view_of(r) == first]  # type: ignore[arg-type]
    out = []
    for other in dict.fromkeys(view_of(r) for r in rows if view_of(r) != first and "--view" in view_of(r)):
        walls = [float(r["wall_s"]) for r in rows if view_of(r) == other]  # type: ignore[arg-type]
        ratios = [a / b for a, b in zip(mains, walls, strict=False)]  # each run against the one right after it
        runs = (f" (the median of {len(ratios)} interleaved pairs, each run's ratio: "
                f"{', '.join(f'{r:.2f}x' for r in ratios)}; median walls {median(mains):.1f} s and {median(walls):.1f} s)"
                if len(ratios) > 1 else "")
        out.append(f"- {first} / {other}: {median(ratios):.2f}x wall{runs} "
                   "(target for the default view against folded: <= 1.3x)")
    return out


def section(result: dict[str, object], per_shard: int) -> list[str]:
    """The Markdown section of one checkpoint (stamp, what was measured, the stage table)."""
    from _stamp import stamp_lines

    spectrum, row = str(result["spectrum"]), result["row"]
    assert isinstance(row, dict)
    stages = result["stages"]
    assert isinstance(stages, dict)
    wall = float(row["wall_s"])
    target = TARGETS_S[spectrum]
    rss = float(row["peak_rss_gb"])
    load_before, load_after = result["load_before"], result["load_after"]
    assert isinstance(load_before, tuple) and isinstance(load_after, tuple)
    walls = result["wall"]
    assert isinstance(walls, dict)
    extra = {"wall per stage": ", ".join(f"{k} {v:.1f} s" for k, v in walls.items())}
    lines = [f"## Whole Llama-3.1-8B-shaped checkpoint, cold, {spectrum} spectrum", "",
             *stamp_lines(load_before, extra), "",
             f"Checkpoint: synthetic, {result['layers']} layers, hidden {D_MODEL}, d_ff {D_FF}, {N_HEADS} query / {N_KV} key-value "
             f"heads, vocabulary {VOCAB_31}, bf16, {per_shard} layers per shard + the embedding shard: "
             f"{float(result['size']) / 1e9:.2f} GB ({spectrum} spectrum: see the script's docstring"  # type: ignore[arg-type]
             f"{'; an existing copy, --checkpoint, so no write time' if result.get('existing') else ''}). "
             f"{result['dropped']}; the scan is a fresh child process (`geodrift scan DIR {_view_flag(str(result['view']))}"
             "--brief --json-out`), its peak RSS `ru_maxrss`. torch's allocator: "
             f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', '1')} (1, the console script's default: "
             "tensors of 2 MB and more on transparent huge pages; `cli/entry.py` `use_huge_pages`).", "",
             "| child | peak RSS (GB) | wall (s) | CPU, user + system (s) | of which system (s) | minor page faults "
             "| exit |", "|---|---:|---:|---:|---:|---:|---:|",
             *[f"| {r['label']} | {float(r['peak_rss_gb']):.3f} | {float(r['wall_s']):.1f} | {float(r['cpu_s']):.1f} | "
               f"{float(r.get('system_s', float('nan'))):.1f} | {int(r.get('minor_faults', 0)):,} | {r['exit']} |"
               for r in result["rows"]], "",  # type: ignore[attr-defined]
             *[f"- FAILED: {r['label']} exited {r['exit']}: {r.get('note', '')}" for r in result["rows"]  # type: ignore[attr-defined]
               if r["exit"]],
             f"- wall {wall:.0f} s ({wall / 60:.1f} min; target <= {target / 60:.0f} min: "
             f"{'met' if wall <= target else 'MISSED'}); peak RSS {rss:.2f} GB (target < {TARGET_RSS_GB} GB: "
             f"{'met' if rss < TARGET_RSS_GB else 'MISSED'}); SVD methods {result['methods']}",
             *_ratios(result["rows"]),  # type: ignore[arg-type]
             f"- load average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f} "
             "(other engineers' work shares the 2 cores when it is above ~1)", ""]
    columns = {_view_label(str(result["view"])): stages, **{_view_label(v): st for v, st in
                                                             result.get("other_stages", {}).items()}}  # type: ignore[attr-defined]
    seconds = stages.get("seconds", {})
    if seconds:
        names = list(columns)
        lines += ["Stages of each scan child (exclusive seconds per thread, summed over the reader thread and both SVD "
                  "workers, so they can exceed the wall time; calls in brackets):", "",
                  "| stage | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for stage, _ in sorted(seconds.items(), key=lambda item: -item[1]):
            cells = [f"{col.get('seconds', {}).get(stage, 0.0):.1f} ({col.get('calls', {}).get(stage, 0)})"
                     for col in columns.values()]
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spectrum", choices=("trained", "random", "both"), default="both")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the checkpoint (about 16 GB free)")
    parser.add_argument("--layers-per-shard", type=int, default=4)
    parser.add_argument("--no-warm-too", action="store_true",
                        help="after each scan, drop the cache again and scan with the page-cache warm-up switched off")
    parser.add_argument("--layers", type=int, default=LAYERS, help="32: Llama-3.1-8B (fewer only to try the script)")
    parser.add_argument("--lock", type=Path, default=None, help="flock this file while timing")
    parser.add_argument("--view", default="default", choices=("default", "raw", "folded", "canonical"),
                        help="the view scanned (default: the scan's default view, canonical for this Llama)")
    parser.add_argument("--also", default="", help="comma-separated other views scanned cold after it (e.g. folded)")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="scan this folder, written earlier by this script's writer with the same --spectrum, "
                             "--layers and --layers-per-shard (it is neither written nor removed; for a disk without "
                             "room for a second copy)")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="scan the view (and each --also view) this many times, interleaved, each cold; the "
                             "targets read the median wall and the largest peak RSS")
    parser.add_argument("--write-results", type=Path, default=None)
    args = parser.parse_args()
    args.also = [v for v in args.also.split(",") if v]
    if args.write_results is not None:
        from geodrift.io.provenance import check_results_path

        check_results_path(args.write_results)
    spectra = ("trained", "random") if args.spectrum == "both" else (args.spectrum,)
    if args.checkpoint is not None and len(spectra) > 1:
        parser.error("--checkpoint holds one spectrum: pass --spectrum trained or random")
    body = ["<!-- geodrift results file: generated by `python " + " ".join(["benchmarks/bench_scan_8b_cold.py",
            *sys.argv[1:]]) + "`; re-run it rather than editing this file -->",
            "# A whole Llama-3.1-8B-shaped checkpoint, scanned cold", ""]
    for spectrum in spectra:
        result = one(spectrum, args)
        lines = section(result, args.layers_per_shard)
        print("\n".join(lines), flush=True)
        body += lines
        if args.write_results is not None:  # after each checkpoint: an interrupted run keeps what it measured
            from geodrift.io.atomic import write_text

            write_text(args.write_results, "\n".join(body))
            print(f"wrote {args.write_results}", flush=True)


if __name__ == "__main__":
    main()
