"""Markdown tables of a ``compress prune`` and a ``compress share`` JSON (bench_compress.py writes them into RESULTS_compress.md).

Usage::

    python benchmarks/compress_tables.py runs/compress/prune.json runs/compress/share.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def prune_tables(doc: dict) -> str:
    curves = doc["curves"]
    head = "| n | " + " | ".join(c["method"] for c in curves) + " | random (mean ± std) |"
    lines = [head, "|" + "---|" * (len(curves) + 2)]
    for n in range(len(doc["random_mean"])):
        cells = [f"{c['ppl'][n]:.1f}" for c in curves]
        lines.append(f"| {n + 1} | " + " | ".join(cells) + f" | {doc['random_mean'][n]:.1f} ± {doc['random_std'][n]:.1f} |")
    lines += ["", f"Unpruned: {doc['baseline_ppl']:.2f} (± {doc['baseline_nll_se']:.3f} nats SE over "
              f"{doc['eval_windows']} windows of {doc['seq_len']} tokens).", "",
              "| n | " + " | ".join(c["method"] for c in curves) + " |", "|" + "---|" * (len(curves) + 1)]
    for n in range(len(doc["random_mean"])):
        lines.append(f"| {n + 1} | " + " | ".join(" ".join(map(str, c["removed"][n])) for c in curves) + " |")
    lines += ["", "| data-free | reference | Spearman rho | p |", "|---|---|---|---|"]
    for r in doc["spearman"]:
        lines.append(f"| {r['data_free']} | {r['reference']} | {r['rho']:+.3f} | {r['p_value']:.2g} |")
    lines += ["", "| stage | seconds | × one evaluation |", "|---|---|---|"]
    for stage, s in doc["seconds"].items():
        lines.append(f"| {stage} | {s:.1f} | {s / doc['eval_seconds']:.1f} |")
    lines.append(f"| one held-out evaluation | {doc['eval_seconds']:.1f} | 1.0 |")
    return "\n".join(lines)


def share_tables(doc: dict) -> str:
    curves = doc["curves"]
    lines = ["| removed | " + " | ".join(c["policy"] for c in curves) + " |", "|" + "---|" * (len(curves) + 1)]
    for i, ratio in enumerate(doc["ratios"]):
        lines.append(f"| {ratio:.0%} | " + " | ".join(f"{c['ppl'][i]:.1f}" for c in curves) + " |")
    lines += ["", f"Dense: {doc['baseline_ppl']:.2f}; groups of {doc['group_size']}; kept/dense parameters: "
              + "; ".join(f"{c['policy']} " + "/".join(f"{k / c['dense_params']:.3f}" for k in c["kept_params"])
                          for c in curves), ""]
    if doc["alone"]:
        lines += [f"Each projection alone at {doc['alone_ratio']:.0%} removed:", "",
                  "| Proj | input (v) shared | output (u) shared | private | predicted | difference (nats, ± SE) | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for v in doc["verdicts"]:
            rows = {a["space"]: a for a in doc["alone"] if a["role"] == v["role"]}
            diff = "; ".join(f"{k}: {d['mean']:+.4f} ± {d['se']:.4f}" for k, d in v["differences"].items())
            lines.append(f"| {v['label']} | " + " | ".join(f"{rows[s]['ppl']:.2f}" for s in ("input", "output", "private"))
                         + f" | {v['predicted']} | {diff} | {v['verdict']} |")
    lines += ["", "| stage | seconds | × one evaluation |", "|---|---|---|"]
    for stage, s in doc["seconds"].items():
        lines.append(f"| {stage} | {s:.1f} | {s / doc['eval_seconds']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    for path in sys.argv[1:]:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        print(f"<!-- {path} -->")
        print(prune_tables(doc) if doc["kind"] == "compress_prune" else share_tables(doc))
        print()


if __name__ == "__main__":
    main()
