"""``compress share --save`` on the embedded SmolLM2: file sizes, and perplexity after loading back in transformers.

Runs ``geodrift compress share --methods METHOD --ratios RATIO --save DIR`` for the factored format
in float32 and bfloat16 and for the dense format, then loads each folder with
``geodrift.compress.factorized.load_factored`` (factored) or ``LlamaForCausalLM.from_pretrained``
(dense) and evaluates it on the command's own held-out windows, beside the perplexity the command
reported. Prints a Markdown table.

Usage::

    .venv/bin/python benchmarks/bench_compress_save.py [--method geodrift] [--ratio 0.2] [--out runs/compress/save]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import torch

from geodrift.compress.table import DEFAULT_SAVE


def _nll(model: torch.nn.Module, windows: torch.Tensor) -> float:
    total = 0.0
    with torch.no_grad():
        for i in range(0, windows.shape[0], 8):
            chunk = windows[i: i + 8]
            logits = model(chunk[:, :-1]).logits.float()
            total += float(torch.nn.functional.cross_entropy(logits.transpose(1, 2), chunk[:, 1:], reduction="none")
                           .mean(1).sum())
    return total / windows.shape[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default=DEFAULT_SAVE)
    parser.add_argument("--ratio", default="0.2")
    parser.add_argument("--eval-windows", default="64")
    parser.add_argument("--out", type=Path, default=Path("runs/compress/save"))
    args = parser.parse_args()
    from transformers import LlamaForCausalLM

    from geodrift.compress.factorized import load_factored
    from geodrift.compress.sources import load_texts
    from geodrift.pretrained import tokenizer_for

    args.out.mkdir(parents=True, exist_ok=True)
    windows = load_texts(tokenizer_for(None), None, "sources", 128, 24, int(args.eval_windows), 1).evaluation
    print("| format | dtype | model.safetensors | geodrift ppl | transformers ppl |\n|---|---|---|---|---|")
    for fmt, dtype in (("factored", "float32"), ("factored", "bfloat16"), ("dense", "float32")):
        folder = args.out / f"{args.method}-{args.ratio}-{fmt}-{dtype}"
        report = args.out / f"{folder.name}.json"
        if not report.is_file():
            subprocess.run([sys.executable, "-m", "geodrift", "compress", "share", "--methods", args.method,
                            "--ratios", args.ratio, "--verdict-ratio", "0", "--eval-windows", args.eval_windows,
                            "--save", str(folder), "--save-format", fmt, "--save-dtype", dtype, "--cache",
                            str(args.out / "cache"), "--json-out",
                            str(report), "--quiet"], check=True, stdout=subprocess.DEVNULL)
        result = json.loads(report.read_text(encoding="utf-8"))
        model = load_factored(folder) if fmt == "factored" else \
            LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        ours = result["runs"][0]["ppl"]
        theirs = math.exp(_nll(model.float(), windows))
        size = (folder / "model.safetensors").stat().st_size
        print(f"| {fmt} | {dtype} | {size / 1e6:.1f} MB (dense float32 {result['saved']['dense_bytes'] / 1e6:.1f} MB) "
              f"| {ours:.3f} | {theirs:.3f} |", flush=True)


if __name__ == "__main__":
    main()
