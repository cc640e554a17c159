"""`geodrift scan` against WeightWatcher on the embedded SmolLM2-135M: paired whole-process runs.

Writes the embedded model's 210 projection matrices (7 per layer x 30 layers, dequantized from the Q4_1 GGUF
to float32) as a Hugging Face safetensors folder with its config.json, so both tools read the same matrices
from the same files. Then ``--pairs`` alternating pairs of fresh child processes: ``geodrift scan DIR --view raw --brief
-q`` (the raw view, the paper's metric, as before the canonical default: k = 8, 100 null draws, every metric and floor, the OV composite, the trajectory) and
WeightWatcher's default ``WeightWatcher(model=DIR).analyze()`` (install it with pip into the venv; it is no
dependency of geodrift). Reports each side's median wall time and peak RSS and their ratio (target: geodrift
>= 4x faster). The folder is deleted afterwards.

Usage::

    uptime; python benchmarks/bench_vs_weightwatcher.py --pairs 3 --lock /tmp/geodrift-bench.lock \\
        --write-results benchmarks/RESULTS_scan.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scan_8b import _CHILD_WW, bench_lock  # noqa: E402
from bench_scan_memory import run_child  # noqa: E402

TARGET = 4.0
HF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_o": "self_attn.o_proj", "mlp_gate": "mlp.gate_proj", "mlp_up": "mlp.up_proj",
            "mlp_down": "mlp.down_proj"}


def export_embedded(folder: Path) -> int:
    """The embedded SmolLM2's projections as ``model.safetensors`` + ``config.json``; returns the matrix count."""
    from safetensors.torch import save_file

    from geodrift.scanner.readers import open_checkpoint
    from geodrift.scanner.scan import heads_of, load_weights

    ws, _ = load_weights(None, "raw")
    ckpt = open_checkpoint(None)
    n_heads, n_kv = heads_of(ckpt) or (9, 3)
    state = {f"model.layers.{layer}.{HF_NAMES[role]}.weight": ws[(role, layer)].float().contiguous()
             for role, layer in ws}
    folder.mkdir(parents=True)
    save_file(state, str(folder / "model.safetensors"))
    d_model = ws[("attn_q", 0)].shape[1]
    config = {"model_type": "llama", "num_hidden_layers": len(ws.layers("attn_q")), "hidden_size": d_model,
              "num_attention_heads": n_heads, "num_key_value_heads": n_kv,
              "intermediate_size": ws[("mlp_up", 0)].shape[0], "vocab_size": 49152, "rms_norm_eps": 1e-5}
    (folder / "config.json").write_text(json.dumps(config))
    return len(state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--lock", type=Path, default=None, help="flock this file while timing")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--write-results", type=Path, default=None)
    args = parser.parse_args()
    geodrift = shutil.which("geodrift") or str(Path(sys.executable).parent / "geodrift")
    work = Path(tempfile.mkdtemp(prefix="geodrift-vs-ww-"))
    runs: dict[str, list[dict[str, object]]] = {"geodrift": [], "weightwatcher": []}
    try:
        folder = work / "smollm2"
        n = export_embedded(folder)
        load_before = os.getloadavg()
        with bench_lock(args.lock):
            for i in range(args.pairs):
                runs["geodrift"].append(run_child([geodrift, "scan", str(folder), "--view", "raw", "--brief", "-q"],
                                                  f"geodrift scan ({i + 1})", args.timeout))
                runs["weightwatcher"].append(run_child([sys.executable, "-c", _CHILD_WW, str(folder)],
                                                       f"weightwatcher ({i + 1})", args.timeout))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(float(r["wall_s"]) for r in v) for k, v in runs.items()}  # type: ignore[arg-type]
    rss = {k: max(float(r["peak_rss_gb"]) for r in v) for k, v in runs.items()}  # type: ignore[arg-type]
    ratio = med["weightwatcher"] / med["geodrift"]
    line = (f"{n} matrices; median of {args.pairs} alternating pairs: geodrift {med['geodrift']:.1f} s, WeightWatcher "
            f"{med['weightwatcher']:.1f} s -> geodrift {ratio:.2f}x faster (target >= {TARGET:.0f}x: "
            f"{'met' if ratio >= TARGET else 'MISSED'}); peak RSS {rss['geodrift']:.2f} GB vs {rss['weightwatcher']:.2f} GB")
    print(line)
    if args.write_results:
        from _stamp import stamp_lines

        from geodrift.io.atomic import write_text

        path: Path = args.write_results
        text = path.read_text(encoding="utf-8") if path.exists() else "# Scan benchmarks\n"
        marker = "## Against WeightWatcher on the embedded SmolLM2"
        head, _, rest = text.partition(marker)
        tail = rest[rest.index("\n## "):] if "\n## " in rest else ""
        rows = ["| child | wall (s) | peak RSS (GB) | exit |", "|---|---:|---:|---:|"]
        rows += [f"| {r['label']} | {float(r['wall_s']):.1f} | {float(r['peak_rss_gb']):.3f} | {r['exit']} |"  # type: ignore[arg-type]
                 for pair in zip(runs["geodrift"], runs["weightwatcher"], strict=True) for r in pair]
        body = [marker, "", *stamp_lines(load_before), "", "The same 210 float32 matrices (the embedded Q4_1 GGUF "
                "dequantized) in one safetensors file with config.json; every row a fresh child process "
                "(OMP_NUM_THREADS=1 in its environment).", "", *rows, "", f"- {line}", ""]
        write_text(path, head.rstrip() + "\n\n" + "\n".join(body) + tail)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
