"""Markdown tables of ``compress prune`` / ``compress share`` JSONs (what README and RESULTS_compress.md show).

Several share JSONs of the same model, windows and ratios (e.g. draw 0 from the default run and
draws 1-2 from another) are merged: their runs are pooled and the verdict "geodrift beats the best
baseline" is judged over every draw present, with the command's own criterion.

Usage::

    python benchmarks/compress_tables.py runs/compress/prune.json
    python benchmarks/compress_tables.py runs/compress/share.json runs/compress/share-draws.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from geodrift.compress.evaluate import paired
from geodrift.compress.share_run import MethodRun, ShareSpec, _beats
from geodrift.compress.table import CANDIDATE


def prune_tables(doc: dict[str, Any]) -> str:
    curves = doc["curves"]
    head = "| n | " + " | ".join(c["method"] for c in curves) + " | random median | random (mean ± std) |"
    lines = [f"Weights: {doc.get('weights', '')}.", "", head, "|" + "---|" * (len(curves) + 3)]
    for n in range(len(doc["random_mean"])):
        cells = [f"{c['ppl'][n]:.1f}" for c in curves]
        lines.append(f"| {n + 1} | " + " | ".join(cells) + f" | {doc['random_median'][n]:.1f} | "
                     f"{doc['random_mean'][n]:.1f} ± {doc['random_std'][n]:.1f} |")
    lines += ["", f"Unpruned: {doc['baseline_ppl']:.2f} (± {doc['baseline_nll_se']:.3f} nats SE over "
              f"{doc['eval_windows']} windows of {doc['seq_len']} tokens); {len(doc['random_curves'])} random orders.",
              "", "Fraction of the random orders each method beats:", "",
              "| n | " + " | ".join(c["method"] for c in curves) + " |", "|" + "---|" * (len(curves) + 1)]
    for n in range(len(doc["random_mean"])):
        lines.append(f"| {n + 1} | " + " | ".join(f"{doc['beats_random'][c['method']][n]:.2f}" for c in curves) + " |")
    lines += ["", "| n | " + " | ".join(c["method"] for c in curves) + " |", "|" + "---|" * (len(curves) + 1)]
    for n in range(len(doc["random_mean"])):
        lines.append(f"| {n + 1} | " + " | ".join(" ".join(map(str, c["removed"][n])) for c in curves) + " |")
    lines += ["", "| claim | measured | verdict |", "|---|---|---|"]
    lines += [f"| {v['claim']} | {v['measured']} | **{v['verdict']}** |" for v in doc["verdicts"]]
    lines += ["", "| data-free | reference | Spearman rho | p |", "|---|---|---|---|"]
    for r in doc["spearman"]:
        lines.append(f"| {r['data_free']} | {r['reference']} | {r['rho']:+.3f} | {r['p_value']:.2g} |")
    lines += ["", "| stage | seconds | × one evaluation |", "|---|---|---|"]
    for stage, s in doc["seconds"].items():
        lines.append(f"| {stage} | {s:.1f} | {s / doc['eval_seconds']:.1f} |")
    lines.append(f"| one held-out evaluation | {doc['eval_seconds']:.1f} | 1.0 |")
    return "\n".join(lines)


def _runs(docs: list[dict[str, Any]]) -> list[MethodRun]:
    return [MethodRun(**r) for d in docs for r in d["runs"]]


def _best(runs: list[MethodRun], ratio: float, draw: int) -> MethodRun | None:
    cands = [r for r in runs if r.kind == "baseline" and r.ratio == ratio and r.draw == draw]
    return min(cands, key=lambda r: r.nll) if cands else None


def share_tables(docs: list[dict[str, Any]]) -> str:
    first = docs[0]
    runs = _runs(docs)
    draws = sorted({r.draw for r in runs})
    ratios = sorted({r.ratio for r in runs})
    methods = list(dict.fromkeys(r.method for r in runs))
    lines = [f"Model: {first['model']}; weights: {first['weights']}. Held-out: {first['eval_windows']} windows of "
             f"{first['seq_len']} tokens ({first['corpus']['evaluation']}); calibration: {first['corpus']['calibration']}, "
             f"{first['calib_windows']} windows per draw. Dense: {first['baseline_ppl']:.2f} (± "
             f"{first['baseline_nll_se']:.3f} nats)."]
    for ratio in ratios:
        lines += ["", f"**{ratio:.0%} of the projection parameters removed** — perplexity ± SE of the mean window NLL "
                  "(nats); Δ = paired NLL difference to that draw's best baseline (nats ± SE)", "",
                  "| method | kind | " + " | ".join(f"draw {d} ppl | Δ (draw {d})" for d in draws)
                  + " | params kept | seconds (first draw) |", "|" + "---|" * (3 + 2 * len(draws) + 1)]
        for m in methods:
            by = {r.draw: r for r in runs if r.method == m and r.ratio == ratio}
            if not by:
                continue
            cells = []
            for d in draws:
                r, best = by.get(d), _best(runs, ratio, d)
                if r is None:
                    cells += ["—", "—"]
                    continue
                delta = "best" if best is not None and best.method == m else (
                    "{mean:+.3f} ± {se:.3f}".format(**paired(r.window_nll, best.window_nll)) if best else "—")
                cells += [f"{r.ppl:.2f} ± {r.nll_se:.3f}", delta]
            any_run = next(iter(by.values()))
            lines.append(f"| {m} | {any_run.kind} | " + " | ".join(cells) + f" | "
                         f"{any_run.kept_params / any_run.dense_params:.3f} | "
                         f"{any_run.build_seconds + any_run.eval_seconds:.0f} |")
    verdicts = []
    for ratio in ratios:  # over the draws that ran geodrift at this ratio (the extra draws skip 30 %)
        ran = sorted({r.draw for r in runs if r.ratio == ratio and r.method == CANDIDATE})
        if ran and ran == list(range(ran[0], ran[0] + len(ran))):
            spec = ShareSpec(ratios=(ratio,), methods=tuple(methods), calib_draws=len(ran), first_draw=ran[0])
            verdicts += [v] if (v := _beats(runs, ratio, spec)) is not None else []
    if verdicts:
        lines += ["", "| claim | measured | verdict |", "|---|---|---|"]
        lines += [f"| {v.claim} | {v.measured} | **{v.verdict}** |" for v in verdicts]
    controls = [c for d in docs for c in d["comparisons"] if c["what"] == "attribution control"]
    if controls:
        lines += ["", "Attribution controls (a − b, nats ± SE; negative: a better):", "",
                  "| ratio | draw | a | b | a − b | beyond 2 SE |", "|---|---|---|---|---|---|"]
        for c in controls:
            lines.append(f"| {c['ratio']:.0%} | {c['draw']} | {c['a']} | {c['b']} | {c['mean']:+.3f} ± {c['se']:.3f} | "
                         f"{'yes' if c['significant'] else 'no'} |")
    if first.get("choices"):
        lines += ["", "geodrift's choices (first draw): space, the space by whitened loss alone, matched-pair overlap "
                  "(floor r/d), fraction of matched pairs adjacent in depth (random pairing: 2/L):", "",
                  "| ratio | Proj | space | by loss | overlap in / out (floor) | adjacent in / out |", "|---|---|---|---|---|---|"]
        for c in first["choices"]:
            lines.append(f"| {c['ratio']:.0%} | {c['role']} | {c['space']} | {c['loss_space']} | "
                         f"{c['overlap']['input']:.3f} ({c['floor']['input']:.3f}) / {c['overlap']['output']:.3f} "
                         f"({c['floor']['output']:.3f}) | {c['adjacent']['input']:.2f} / {c['adjacent']['output']:.2f} |")
    if first.get("sharing"):
        lines += ["", f"Sharing evidence per projection at {first['verdict_ratio']:.0%} removed (mean ± SE over the "
                  "adjacent pairs; relative whitened error):", "",
                  "| Proj | space | r | penalty | unrelated | alignment adjacent | alignment random pairs | rank at equal "
                  "params | shared − private at equal params |", "|---|---|---|---|---|---|---|---|---|"]
        for p in first["sharing"]:
            for space in ("input", "output"):
                s = p["spaces"][space]
                tag = " (predicted)" if p["predicted"] == space else ""
                lines.append(f"| {p['label']} | {space}{tag} | {p['rank']} | {_ms(s['penalty'])} | {_ms(s['unrelated'])} | "
                             f"{_ms(s['alignment'])} | {_ms(s['alignment_random'])} | {s['rank_equal_params']} | "
                             f"{_ms(s['excess'])} |")
        lines += ["", "| claim | measured | verdict |", "|---|---|---|"]
        lines += [f"| {v['claim']} | {v['measured']} | **{v['verdict']}** |" for p in first["sharing"]
                  for v in p["verdicts"]]
    for d in docs:
        lines += ["", f"Cost ({d['draw_ids']}): " + "; ".join(f"{k} {v:.0f} s" for k, v in d["seconds"].items())
                  + f"; one dense evaluation {d['eval_seconds']:.0f} s. Whitening: {'; '.join(d['whitening'])}."]
    return "\n".join(lines)


def _ms(values: list[float]) -> str:
    clean = [v for v in values if v == v]
    if not clean:
        return "—"
    mean = sum(clean) / len(clean)
    se = math.sqrt(sum((v - mean) ** 2 for v in clean) / (len(clean) - 1) / len(clean)) if len(clean) > 1 else math.nan
    return f"{mean:+.3f} ± {se:.3f}"


def main() -> None:
    paths = [a for a in sys.argv[1:] if a.endswith(".json")]
    docs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    for path in paths:  # the run's own timing record beside its JSON (bench_compress.py writes it)
        timing = Path(path).with_suffix(".timing.json")
        if timing.is_file():
            t = json.loads(timing.read_text(encoding="utf-8"))
            print(f"Run `{t['command']}`: wall {t['wall_s']:.0f} s, CPU {t['cpu_s']:.0f} s (1 torch thread); "
                  f"load before: {t['load_before']}; after: {t['load_after']}; one held-out evaluation "
                  f"{t['eval_seconds']:.1f} s.\n")
    for path, doc in zip(paths, docs, strict=True):
        if doc["kind"] == "compress_prune":
            print(f"<!-- {path} -->\n{prune_tables(doc)}\n")
    shares = [d for d in docs if d["kind"] == "compress_share"]
    if shares:
        print(f"<!-- {', '.join(p for p, d in zip(paths, docs, strict=True) if d['kind'] == 'compress_share')} -->")
        print(share_tables(shares))


if __name__ == "__main__":
    if "--results" in sys.argv[1:-1]:  # the tables after the stamp of geodrift.io.provenance
        from geodrift.io.provenance import run_recorded

        run_recorded(main, sys.argv[sys.argv.index("--results") + 1], "Compression at the commands' defaults")
    else:
        main()
