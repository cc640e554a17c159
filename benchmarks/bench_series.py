"""Cost of `geodrift drift` / `compare` against the number of checkpoints: linear, each checkpoint read once.

Writes N random-init Llama-shaped safetensors folders (a stand-in for a training series of one
shape), then times, side by side in one run, the scan of one checkpoint and the drift of the first
2, 4 and 8 checkpoints, counting the matrices read. Linear cost means seconds per checkpoint stays
flat as N grows and matrices read = N x matrices per checkpoint.

Usage (timing: run under the shared lock; writes ``--out``, default benchmarks/RESULTS_series.md, with the
stamp of ``geodrift.io.provenance``):
    flock /tmp/geodrift-bench.lock .venv/bin/python benchmarks/bench_series.py
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from geodrift.continuity import MeasureSpec
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.scanner.series import compare, decompose_checkpoint, drift

SHAPE = {"layers": 12, "hidden": 384, "heads": 6, "kv": 2, "ff": 1024}


def write_checkpoint(folder: Path, seed: int) -> Path:
    """A Llama-shaped bf16 safetensors folder with N(0, 0.02) projections."""
    s, g = SHAPE, torch.Generator().manual_seed(seed)
    hd = s["hidden"] // s["heads"]
    shapes = {"self_attn.q_proj": (s["heads"] * hd, s["hidden"]), "self_attn.k_proj": (s["kv"] * hd, s["hidden"]),
              "self_attn.v_proj": (s["kv"] * hd, s["hidden"]), "self_attn.o_proj": (s["hidden"], s["heads"] * hd),
              "mlp.gate_proj": (s["ff"], s["hidden"]), "mlp.up_proj": (s["ff"], s["hidden"]),
              "mlp.down_proj": (s["hidden"], s["ff"])}
    state = {f"model.layers.{layer}.{name}.weight": (0.02 * torch.randn(*shape, generator=g)).bfloat16()
             for layer in range(s["layers"]) for name, shape in shapes.items()}
    folder.mkdir(parents=True)
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": s["hidden"], "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"], "intermediate_size": s["ff"]}))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="2,4,8")
    parser.add_argument("--null-draws", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_series.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    counts = [int(c) for c in args.counts.split(",")]
    spec = MeasureSpec(k=4, null_draws=args.null_draws)
    load_before = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [str(write_checkpoint(Path(tmp) / f"step-{i:03d}", i)) for i in range(max(counts))]
        seen: list[str] = []
        t0 = time.perf_counter()
        decompose_checkpoint(paths[0], spec, view="raw", progress=seen.append)
        one = time.perf_counter() - t0
        per_ckpt = len(seen)
        rows.append(("scan of 1 checkpoint (decompose + report)", 1, one, len(seen)))
        for n in counts:
            seen = []
            t0 = time.perf_counter()
            drift(paths[:n], spec, view="raw", progress=seen.append)
            rows.append((f"drift of {n} checkpoints", n, time.perf_counter() - t0, len(seen)))
        seen = []
        t0 = time.perf_counter()
        compare(paths[0], paths[1], spec, view="raw", progress=seen.append)
        rows.append(("compare of 2 checkpoints", 2, time.perf_counter() - t0, len(seen)))
    lines = [f"1 torch thread; checkpoints: {SHAPE['layers']} layers, width {SHAPE['hidden']}, d_ff {SHAPE['ff']}, "
             f"GQA {SHAPE['heads']}/{SHAPE['kv']}, bf16 safetensors; k = 4, {args.null_draws} null draws.", "",
             "| job | checkpoints | seconds | seconds / checkpoint | × one scan per checkpoint | matrices read | "
             "= checkpoints × per checkpoint |", "|---|---|---|---|---|---|---|"]
    for label, n, seconds, matrices in rows:
        lines.append(f"| {label} | {n} | {seconds:.2f} | {seconds / n:.2f} | {seconds / n / one:.2f} | {matrices} | "
                     f"{'yes' if matrices == n * per_ckpt else 'no'} |")
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t_start})
    title = "Series and compare: cost against the number of checkpoints"
    print(f"wrote {write_results(args.out, title, chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
