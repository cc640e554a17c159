"""Calibration of ``geodrift merge``'s one-gauge verdict: how far the recovered maps are from the identity on real pairs.

``geodrift merge --align auto`` aligns a model only when the maps that alignment recovers are far from the identity
(:mod:`geodrift.merging.identity`: every layer keeps at least half of its hidden units, heads and signs, and the
residual rotation, V/O, Q/K maps and Up/Down scales lie within 0.1 RMS of the identity; the thresholds' grounds are
stated there). This script measures each statistic on pairs whose answer is known, with the merge's own check
(:func:`geodrift.merging.frame.check_pair`):

- **one gauge** (must not be aligned): fine-tunes of the embedded SmolLM2-135M (``bench_merge.py``'s recipe: full
  fine-tuning through transformers, 2 x 128 tokens per step), each against the base and against each other: ft1
  (documentation, ``--steps`` steps, lr ``--lr``), ft2 (standard-library code, the same), ft3 (documentation, lr
  ``--big-lr``: a fine-tune five times larger);
- **align** (must be aligned): ft2 under a random exact gauge, a randomised Hadamard rotation of the stream and an
  AWQ fold, each against ft1; and ``--pairs`` seed pairs of the transformer simulator's ``tiny`` Llama trained
  ``--sim-steps`` steps from different seeds.

Usage (writes ``--out``, default benchmarks/RESULTS_merge_one_gauge.md, stamped):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_merge_one_gauge.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parent))
from bench_merge import CODE_MODULES, SHAPE, fine_tune, gauged, release, write_folder  # noqa: E402

from geodrift.gauge.align import shape_of  # noqa: E402
from geodrift.gauge.orbit import GaugeShape, StateDict  # noqa: E402
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results  # noqa: E402
from geodrift.lm.hf import hf_step_dir  # noqa: E402
from geodrift.lm.text import encode_ids, eval_windows, load_corpus  # noqa: E402
from geodrift.merging.frame import PairCheck, check_pair, fold_reference  # noqa: E402
from geodrift.merging.identity import KEEP_SHARE, MAP_TOLERANCE  # noqa: E402
from geodrift.pretrained import llama_from_checkpoint, open_checkpoint, tokenizer_for  # noqa: E402
from geodrift.sim.presets import preset  # noqa: E402
from geodrift.sim.record import run_dir  # noqa: E402
from geodrift.sim.run import run  # noqa: E402


def checked(reference: StateDict, other: StateDict, shape: GaugeShape, label: str, ref_label: str) -> PairCheck:
    _, check = check_pair(fold_reference(reference, shape), other, shape, label, ref_label)
    release()
    return check


def row(model: str, pair: str, expected: str, c: PairCheck) -> str:
    m = c.maps
    verdict = "one gauge" if c.one_gauge else "align"
    ok = "yes" if verdict == expected else "**no**"
    return (f"| {model} | {pair} | {expected} | {100 * m['units_kept']:.1f}% | {100 * m['heads_kept']:.0f}% | "
            f"{100 * m['sign_flips']:.1f}% | {m['rotation']:.3g} | {m['vo']:.3g} | {m['qk']:.3g} | {m['updown']:.3g} | "
            f"{c.ratio:.3g} | {verdict} | {ok} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--big-lr", type=float, default=1e-3)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--sim-steps", type=int, default=600)
    parser.add_argument("--smollm2", action="store_true",
                        help="also the SmolLM2-135M pairs (about 6 GB; bench_merge.py's check table measures them too)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_merge_one_gauge.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    load_before = load_average()
    walls: dict[str, float] = {}
    rows: list[str] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-one-gauge-") as tmp:
        root = Path(tmp)
        spec = preset("transformer", "tiny")[0]
        spec = replace(spec, train=replace(spec.train, steps=args.sim_steps, warmup_steps=min(20, args.sim_steps // 10)))
        for pair in range(args.pairs):
            seeds = (2 * pair + 1, 2 * pair + 2)
            for seed in seeds:
                run(spec, [seed], out=tmp, save_hf_every=args.sim_steps, track=False)
            a, b = (load_file(str(hf_step_dir(run_dir(tmp, spec.label, s), args.sim_steps) / "model.safetensors"))
                    for s in seeds)
            shape = shape_of(a, spec.model.n_heads, spec.model.n_kv_heads)
            rows.append(row("simulator tiny", f"seed {seeds[1]} vs seed {seeds[0]}", "align",
                            checked(a, b, shape, "B", "A")))
            print(rows[-1], flush=True)
        walls["simulator"] = time.perf_counter() - t0
        if args.smollm2:
            walls.update(smollm2_rows(args, root, rows))
    lines = header(args, rows)
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s=walls)
    print(f"wrote {write_results(args.out, 'geodrift merge: the one-gauge verdict on pairs whose answer is known', chr(10).join(lines), s)}")


def smollm2_rows(args: argparse.Namespace, root: Path, rows: list[str]) -> dict[str, float]:
    """SmolLM2-135M's pairs: fine-tunes against the base and each other, gauged copies of ft2 against ft1."""
    walls: dict[str, float] = {}
    t1 = time.perf_counter()
    base_sd = llama_from_checkpoint(open_checkpoint(None)).state_dict()
    tied = write_folder({k: v for k, v in base_sd.items() if k != "lm_head.weight"}, root / "base-tied", tie=True)
    base = {k: v.detach().clone() for k, v in base_sd.items()}
    base.setdefault("lm_head.weight", base["model.embed_tokens.weight"].clone())
    del base_sd
    tokenizer = tokenizer_for(tied)
    corpus = load_corpus(None)
    lib = Path(json.__file__).parent.parent
    code = "\n\n".join((lib / m).read_text(encoding="utf-8") for m in CODE_MODULES)
    docs_ids, code_ids = encode_ids(tokenizer, corpus.train), encode_ids(tokenizer, code)
    calibration = eval_windows(docs_ids, 128, 16)
    fts = {name: fine_tune(tied, ids, args.steps, lr, seed)
           for name, ids, lr, seed in (("ft1", docs_ids, args.lr, 1), ("ft2", code_ids, args.lr, 2),
                                       ("ft3", docs_ids, args.big_lr, 3))}
    release()
    walls["fine-tuning"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    model = "SmolLM2-135M"
    for name in ("ft1", "ft2", "ft3"):
        rows.append(row(model, f"{name} vs base", "one gauge", checked(base, fts[name], SHAPE, name, "base")))
    rows.append(row(model, "ft2 vs ft1", "one gauge", checked(fts["ft1"], fts["ft2"], SHAPE, "ft2", "ft1")))
    rows.append(row(model, "ft3 vs ft2", "one gauge", checked(fts["ft2"], fts["ft3"], SHAPE, "ft3", "ft2")))
    for kind in ("random exact gauge", "Hadamard rotation", "AWQ fold"):
        moved = {k: v.float() for k, v in gauged(kind, fts["ft2"], calibration).items()}
        rows.append(row(model, f"{kind} of ft2 vs ft1", "align", checked(fts["ft1"], moved, SHAPE, kind, "ft1")))
        del moved
        release()
    walls["checks"] = time.perf_counter() - t2
    return walls


def header(args: argparse.Namespace, rows: list[str]) -> list[str]:
    """The results section: the table with its explanation."""
    return ["## The recovered maps on pairs whose answer is known", "",
             f"Each row is `geodrift merge`'s pre-merge check of the pair (`check_pair`: the better of the general and "
             f"orthogonal head-map fits). Discrete maps: the lowest share over layers of hidden units and key-value "
             f"heads kept at their index, the highest share of units matched with a sign flip. Continuous maps: "
             f"`||M - I||_F / sqrt(n)` of the residual rotation, the largest over heads of the V/O and Q/K maps, the "
             f"largest over layers of the median `|log |s||` of the Up/Down scales. Verdict: one gauge when at least "
             f"{KEEP_SHARE:g} is kept (flips at most {1 - KEEP_SHARE:g}) and every continuous map is within "
             f"{MAP_TOLERANCE:g} of the identity (thresholds from geodrift/merging/identity.py's stated grounds, fixed "
             f"before this run). The ratio (aligned / naive weight distance) is the criterion it replaces (one gauge "
             f"when >= 0.9). Simulator: the `tiny` transformer preset, {args.sim_steps} steps per seed. " + (
                 f"SmolLM2 fine-tunes: {args.steps} steps, 2 x 128 tokens, lr {args.lr:g} (ft1 documentation, ft2 code), "
                 f"ft3 lr {args.big_lr:g} on documentation." if args.smollm2 else "SmolLM2-135M's pairs (fine-tunes "
                 "against the base and each other; a random exact gauge, an AWQ fold and a Hadamard rotation of a "
                 "fine-tune) are measured by `geodrift merge` itself in RESULTS_merge.md's check table (this script's "
                 "`--smollm2` measures them here, at about 6 GB)."), "",
             "| model | pair | expected | units kept | heads kept | sign flips | rotation | V/O | Q/K | Up/Down | "
             "ratio | verdict | right |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rows, ""]


if __name__ == "__main__":
    sys.exit(main())
