"""Calibrate the per-projection verdicts (shared frame, depth path): false-positive and true-positive rates.

Not a timing benchmark (no lock needed). Models with no depth structure to find:

1. **Random init, every supported architecture** (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3,
   phi3, gpt2): ``transformers``' own ``from_config`` init (normal, ``initializer_range`` 0.02),
   written with ``save_pretrained`` as real safetensors Hugging Face folders and scanned from disk. A
   predicted space (Q, K, Gate, Up -> v; O, Down, OV -> u) whose frame or path **holds** is a false
   positive; for V ("neither") a **fails** is a false alarm.
2. **Layer-shuffled copies of the trained embedded SmolLM2-135M**: whole layers (all projections of a
   layer together) moved to a random depth order. ``--shuffles`` copies go through ``geodrift.scan`` as
   in-memory state dicts (the whole path: reading, SVD, nulls, verdicts); ``--extra-shuffles`` more reuse
   the trained model's decomposition (a matrix's SVD does not depend on where the layer sits) and
   re-run only ``geodrift.continuity.assemble`` on the reordered triplets (nulls, trajectory, verdicts),
   with their own null seed. A shared frame survives shuffling, so "frame holds" there is expected; a
   "path holds" is a false positive.

And with depth structure (true positives): the trained SmolLM2 under ``--null-seeds`` null seeds, and
the simulators' trained runs (``--sim``): the transformer ``cpu`` preset (D 128, 8 layers) and the toy
MLP (16 layers, D 256; Res+ReLU and Res+None; its ``block`` role has no per-space prediction, so the
table gives whether W v1 shows a depth path).

Usage (writes ``--out``, default benchmarks/RESULTS_verdicts.md, with the stamp of ``geodrift.io.provenance``):
    nice -n 10 .venv/bin/python benchmarks/bench_verdicts.py --seeds 4 --shuffles 8 --extra-shuffles 64 \
        --null-seeds 5 --sim
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

import geodrift
from geodrift.continuity import MeasureSpec, Report, assemble, decompose
from geodrift.continuity.verdicts import ORDER_ALPHA, depth_path
from geodrift.io.atomic import write_json
from geodrift.io.provenance import (
    check_results_path,
    command_line,
    git_dirty,
    git_revision,
    load_average,
    stamp,
    write_results,
)
from geodrift.scanner.open import open_model
from geodrift.scanner.readers import canonical_keys, load_canonical, open_checkpoint, weightset
from geodrift.scanner.scan import heads_of, ov_composite_hook
from geodrift.weights import HF_LLAMA_PROJECTIONS, PREDICTED_SPACE, ROLE_LABELS

ARCHS = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "gpt2")
# One shape for every architecture: 12 layers, width 256, 8 query heads (4 key-value heads where GQA exists).
SHAPE = {"layers": 12, "hidden": 256, "heads": 8, "kv": 4, "ff": 688, "vocab": 512}
LEVELS = (0.05, 0.01, ORDER_ALPHA)  # order p-value levels checked for calibration on shuffled stacks


def random_init_folder(arch: str, seed: int, folder: Path) -> Path:
    """A transformers random-init model of ``arch`` saved as a safetensors Hugging Face folder."""
    import transformers

    s = SHAPE
    common = dict(vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                  num_attention_heads=s["heads"], num_key_value_heads=s["kv"], intermediate_size=s["ff"],
                  max_position_embeddings=256)
    configs = {
        "llama": lambda: transformers.LlamaConfig(**common),
        "mistral": lambda: transformers.MistralConfig(**common),
        "qwen2": lambda: transformers.Qwen2Config(**common),
        "qwen3": lambda: transformers.Qwen3Config(**common, head_dim=s["hidden"] // s["heads"]),
        "gemma": lambda: transformers.GemmaConfig(**common, head_dim=s["hidden"] // s["heads"]),
        "gemma2": lambda: transformers.Gemma2Config(**common, head_dim=s["hidden"] // s["heads"]),
        "gemma3": lambda: transformers.Gemma3TextConfig(**common, head_dim=s["hidden"] // s["heads"]),
        "phi3": lambda: transformers.Phi3Config(**common, pad_token_id=0),
        "gpt2": lambda: transformers.GPT2Config(vocab_size=s["vocab"], n_embd=s["hidden"], n_layer=s["layers"],
                                                n_head=s["heads"], n_positions=256),
    }
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(configs[arch]())
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def smollm2() -> tuple[dict[tuple[str, int], torch.Tensor], dict[str, Any], int]:
    """The embedded SmolLM2's projections (dequantised), an HF-style config, and its depth."""
    ckpt = open_checkpoint(None)
    base = {key: load_canonical(ckpt, key) for key in canonical_keys(ckpt)
            if key[0] in HF_LLAMA_PROJECTIONS and key[1] is not None}
    config = {"model_type": "llama", "num_attention_heads": ckpt.config["n_heads"],
              "num_key_value_heads": ckpt.config["n_kv_heads"], "hidden_size": ckpt.config["d_model"]}
    return base, config, int(ckpt.config["n_layers"])


def shuffled_state_dict(order: list[int], base: dict[tuple[str, int], torch.Tensor]) -> dict[str, torch.Tensor]:
    """SmolLM2's projections with layer ``l`` moved to depth ``order[l]`` (HF Llama names)."""
    return {f"model.layers.{order[layer]}.{HF_LLAMA_PROJECTIONS[role]}.weight": w for (role, layer), w in base.items()}


def depth_order(seed: int, n_layers: int) -> list[int]:
    return torch.randperm(n_layers, generator=torch.Generator().manual_seed(seed)).tolist()


def outcome(report: Report) -> dict[str, Any]:
    """Per role: both verdicts; per stack: whether it shows a depth path, its order p and z."""
    return {"frame": {r.role: r.verdict for r in report.roles},
            "path": {r.role: r.path_verdict for r in report.roles},
            "stacks": {f"{t.role}/{t.space}": [depth_path(t), t.order_p, t.order_z] for t in report.trajectory}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=4, help="random-init models per architecture")
    parser.add_argument("--archs", default=",".join(ARCHS), help="random-init architectures (comma-separated)")
    parser.add_argument("--shuffles", type=int, default=8, help="layer-shuffled SmolLM2 copies scanned whole")
    parser.add_argument("--extra-shuffles", type=int, default=64, help="more shuffles on the reused decomposition")
    parser.add_argument("--null-seeds", type=int, default=5, help="null seeds of the trained SmolLM2")
    parser.add_argument("--null-draws", type=int, default=100)
    parser.add_argument("--sim", action="store_true", help="also train the simulators (transformer cpu, MLP)")
    parser.add_argument("--sim-seeds", type=int, default=2)
    parser.add_argument("--mlp-steps", type=int, default=469)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_verdicts.md"),
                        help="the Markdown results file")
    parser.add_argument("--json", type=Path, default=None, help="write every outcome as JSON here")
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    git, load_before = (git_revision(), git_dirty()), load_average()  # the code and load this run starts with
    t0 = time.perf_counter()
    results: dict[str, Any] = {"random_init": defaultdict(list), "shuffled": [], "extra_shuffled": [], "trained": [],
                               "sim": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs.split(","):
            for seed in range(args.seeds):
                folder = random_init_folder(arch, seed, Path(tmp) / f"{arch}-{seed}")
                got = outcome(geodrift.scan(folder, view="raw", null_draws=args.null_draws, seed=seed))
                results["random_init"][arch].append(got)
                _log(f"{arch} seed {seed}", got)
    base, config, n_layers = smollm2()
    for seed in range(args.shuffles):
        got = outcome(geodrift.scan(shuffled_state_dict(depth_order(seed, n_layers), base), view="raw", config=config,
                                    null_draws=args.null_draws, seed=seed))
        results["shuffled"].append(got)
        _log(f"shuffle {seed}", got)
    ckpt = open_model(shuffled_state_dict(list(range(n_layers)), base), config=config)
    ws = weightset(ckpt)
    heads = heads_of(ckpt)
    spectra = decompose(ws, MeasureSpec(null_draws=args.null_draws), None, ov_composite_hook(*heads) if heads else None)
    for seed in range(args.null_seeds):
        got = outcome(assemble(spectra, MeasureSpec(null_draws=args.null_draws, seed=seed), ws.origin, ws.view,
                               trajectory=True))
        results["trained"].append(got)
        _log(f"trained, null seed {seed}", got)
    for seed in range(args.shuffles, args.shuffles + args.extra_shuffles):
        order = depth_order(seed, n_layers)
        moved = {(role, order[layer]): t for (role, layer), t in spectra.items()}
        got = outcome(assemble(moved, MeasureSpec(null_draws=args.null_draws, seed=seed), ws.origin, ws.view,
                               trajectory=True))
        results["extra_shuffled"].append(got)
        _log(f"shuffle {seed} (reused SVDs)", got)
    if args.sim:
        results["sim"] = simulate(args)
    text = render(args, results)
    print(text)
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t0}, git=git)
    print(f"wrote {write_results(args.out, 'Verdict calibration: false- and true-positive rates', text, s)}")
    if args.json:
        write_json(args.json, results)


def simulate(args: argparse.Namespace) -> dict[str, Any]:
    """Short trained runs of both simulators: per configuration, per seed, the final report's outcome."""
    from geodrift.sim.experiment import Overrides, build_specs
    from geodrift.sim.run import run

    out: dict[str, Any] = {}
    seeds = list(range(42, 42 + args.sim_seeds))
    (transformer,) = build_specs("transformer", "cpu")
    mlps = [s for s in build_specs("mlp", "table1", Overrides(steps=args.mlp_steps)) if s.label in ("Res+ReLU", "Res+None")]
    for spec in [transformer, *mlps]:
        for seed in seeds:
            (res,) = run(spec, [seed], device="cpu")
            got = outcome(res.report)
            out.setdefault(f"{spec.sim} {spec.label} ({spec.train.steps} steps)", []).append(got)
            _log(f"{spec.sim} {spec.label} seed {seed}", got)
    return out


def _log(what: str, got: dict[str, Any]) -> None:
    print(f"{what}: frame {got['frame']}; path {got['path']}", file=sys.stderr, flush=True)


def _wrong(role: str, verdict: str) -> bool:
    # On a model without depth structure: a predicted space that holds is a false positive; V "fails" a false alarm.
    return verdict == ("fails" if PREDICTED_SPACE.get(role) is None else "holds")


def _rate(k: int, n: int) -> str:
    # k/n with the exact (Clopper-Pearson) 95 % interval.
    from scipy.stats import binomtest

    if n == 0:
        return "—"
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return f"{k}/{n} = {k / n:.1%} (95 % CI {ci.low:.1%}–{ci.high:.1%})"


def _count(outcomes: list[dict[str, Any]], kind: str, predicate: Any, scope: Any) -> tuple[int, int]:
    # Over outcomes and the roles in scope(role) with a verdict, how many verdicts of `kind` satisfy
    # predicate(role, verdict): the denominator counts only the verdicts the rate is about (V's verdicts are
    # not chances of a predicted space's false positive, nor the other roles' of V's false alarm).
    pairs = [(role, v) for got in outcomes for role, v in got[kind].items() if v in ("holds", "fails") and scope(role)]
    return sum(bool(predicate(role, v)) for role, v in pairs), len(pairs)


def _is_v(role: str) -> bool:
    return role == "attn_v"


def _has_prediction(role: str) -> bool:
    return PREDICTED_SPACE.get(role) is not None


def _predicted(role: str, verdict: str) -> bool:
    return PREDICTED_SPACE.get(role) is not None


def render(args: argparse.Namespace, results: dict[str, Any]) -> str:
    random_all = [got for runs in results["random_init"].values() for got in runs]
    shuffled_all = results["shuffled"] + results["extra_shuffled"]
    lines = ["1 torch thread.", "",
             "Verdicts (docs/verdicts.md): **frame** = the predicted space's first vectors agree across adjacent "
             "layers beyond the permutation null and beyond the other space (Eq. 1, the paper's claim); **path** = "
             f"the depth order's lag-1 |cos| has layer-order permutation p ≤ {ORDER_ALPHA:g} and its excess over the "
             "permutation null decays with layer distance by more than 3 null sd. For V (predicted neither) both "
             "are relative to its peers. Rates are counts with exact (Clopper–Pearson) 95 % intervals.", "",
             "## Summary", "",
             "| what | frame | path |", "|---|---|---|",
             f"| random init, predicted spaces that hold (false positives) | "
             f"{_rate(*_count(random_all, 'frame', lambda r, v: _predicted(r, v) and v == 'holds', _has_prediction))} | "
             f"{_rate(*_count(random_all, 'path', lambda r, v: _predicted(r, v) and v == 'holds', _has_prediction))} |",
             f"| random init, V fails (false alarms) | "
             f"{_rate(*_count(random_all, 'frame', lambda r, v: r == 'attn_v' and v == 'fails', _is_v))} | "
             f"{_rate(*_count(random_all, 'path', lambda r, v: r == 'attn_v' and v == 'fails', _is_v))} |",
             f"| layer-shuffled SmolLM2, predicted spaces that hold (path: false positives) | "
             f"{_rate(*_count(shuffled_all, 'frame', lambda r, v: _predicted(r, v) and v == 'holds', _has_prediction))} | "
             f"{_rate(*_count(shuffled_all, 'path', lambda r, v: _predicted(r, v) and v == 'holds', _has_prediction))} |",
             f"| trained SmolLM2 ({args.null_seeds} null seeds), predicted spaces that hold (true positives) | "
             f"{_rate(*_count(results['trained'], 'frame', lambda r, v: _predicted(r, v) and v == 'holds', _has_prediction))} | "
             f"{_rate(*_count(results['trained'], 'path', lambda r, v: _predicted(r, v) and v == 'holds', _has_prediction))} |"]
    for label, runs in results["sim"].items():
        if label.startswith("transformer"):
            lines.append(f"| simulator: {label}, {len(runs)} seeds, predicted spaces that hold | "
                         f"{_rate(*_count(runs, 'frame', lambda r, v: _predicted(r, v) and v == 'holds', _has_prediction))} | "
                         f"{_rate(*_count(runs, 'path', lambda r, v: _predicted(r, v) and v == 'holds', _has_prediction))} |")
    lines += ["", _calibration(shuffled_all, random_all), "", *_random_table(args, results["random_init"]), "",
              *_shuffle_table(args, results), "", *_sim_table(results["sim"])]
    return "\n".join(lines) + "\n"


def _calibration(shuffled: list[dict[str, Any]], random_all: list[dict[str, Any]]) -> str:
    # Is the order p-value calibrated? Share of stacks (both spaces) at or below each level.
    parts = []
    for name, outcomes in (("layer-shuffled SmolLM2", shuffled), ("random init", random_all)):
        ps = [p for got in outcomes for _, p, _ in got["stacks"].values()]
        found = sum(bool(path) for got in outcomes for path, _, _ in got["stacks"].values())
        cells = ", ".join(f"p ≤ {a:g}: {sum(p <= a for p in ps)}/{len(ps)} (nominal {a:.2%})" for a in LEVELS)
        parts.append(f"- {name}: stacks (projection × space) with layer-order {cells}; stacks showing a depth path "
                     f"(both criteria): {found}/{len(ps)}.")
    return "Calibration of the layer-order p-value (every stack, v1 and u1):\n\n" + "\n".join(parts)


def _random_table(args: argparse.Namespace, rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    roles = [r for r in ROLE_LABELS if any(r in got["frame"] for runs in rows.values() for got in runs)]
    lines = [f"## 1. Random init ({args.seeds} seeds per architecture; transformers `from_config`, {SHAPE['layers']} "
             f"layers, width {SHAPE['hidden']}, saved as safetensors folders)", "",
             "A cell is wrong verdicts frame / path over models (predicted spaces: holds; V: fails).", "",
             "| architecture | " + " | ".join(ROLE_LABELS[r] for r in roles) + " | stacks with a path |",
             "|---|" + "---|" * (len(roles) + 1)]
    for arch, runs in rows.items():
        cells = []
        for role in roles:
            frame = [got["frame"][role] for got in runs if role in got["frame"]]
            path = [got["path"][role] for got in runs if role in got["path"]]
            cells.append(f"{sum(_wrong(role, v) for v in frame)} / {sum(_wrong(role, v) for v in path)} of {len(frame)}"
                         if frame else "—")
        stacks = [path for got in runs for path, _, _ in got["stacks"].values()]
        lines.append(f"| {arch} | " + " | ".join(cells) + f" | {sum(bool(s) for s in stacks)}/{len(stacks)} |")
    return lines


def _shuffle_table(args: argparse.Namespace, results: dict[str, Any]) -> list[str]:
    full, extra, trained = results["shuffled"], results["extra_shuffled"], results["trained"]
    lines = [f"## 2. SmolLM2-135M: trained ({args.null_seeds} null seeds) and layer-shuffled ({args.shuffles} whole "
             f"scans + {args.extra_shuffles} on the reused decomposition)", "",
             "| Proj | trained: frame holds | trained: path holds | trained order z (p), predicted space | "
             "shuffled: frame holds | shuffled: path holds | shuffled stacks with order p ≤ 0.05 |",
             "|---|---|---|---|---|---|---|"]
    for role in [r for r in ROLE_LABELS if trained and r in trained[0]["frame"]]:
        space = PREDICTED_SPACE.get(role) or "v"
        stack = trained[0]["stacks"].get(f"{role}/{space}", [None, float("nan"), float("nan")])
        shuffled = full + extra
        small = [p for got in shuffled for key, (_, p, _) in got["stacks"].items() if key.startswith(f"{role}/")]
        lines.append(f"| {ROLE_LABELS[role]} | {sum(g['frame'][role] == 'holds' for g in trained)}/{len(trained)} | "
                     f"{sum(g['path'][role] == 'holds' for g in trained)}/{len(trained)} | "
                     f"{stack[2]:+.1f} ({stack[1]:.2g}) | "
                     f"{sum(g['frame'][role] == 'holds' for g in shuffled)}/{len(shuffled)} | "
                     f"{sum(g['path'][role] == 'holds' for g in shuffled)}/{len(shuffled)} | "
                     f"{sum(p <= 0.05 for p in small)}/{len(small)} |")
    lines += ["", "V's frame and path verdicts are relative to its peers (\"holds\" = V shows no more than they "
              "do), so V holding on shuffled models is the expected outcome, not a positive."]
    return lines


def _sim_table(sim: dict[str, list[dict[str, Any]]]) -> list[str]:
    if not sim:
        return ["## 3. Simulators", "", "Not run (add `--sim`)."]
    lines = ["## 3. Simulators' trained runs (true positives)", "",
             "| configuration | seed | frame holds | path holds | stacks with a path (order p of the v1 / u1 stacks) |",
             "|---|---|---|---|---|"]
    for label, runs in sim.items():
        for i, got in enumerate(runs):
            judged = [r for r, v in got["frame"].items() if v in ("holds", "fails") and PREDICTED_SPACE.get(r)]
            frame = f"{sum(got['frame'][r] == 'holds' for r in judged)}/{len(judged)}" if judged else "no prediction"
            paths = [r for r in judged if got["path"][r] in ("holds", "fails")]
            path = f"{sum(got['path'][r] == 'holds' for r in paths)}/{len(paths)}" if paths else "—"
            stacks = ", ".join(f"{key}: {'yes' if found else 'no'} ({p:.2g})"
                               for key, (found, p, _) in got["stacks"].items())
            lines.append(f"| {label} | {42 + i} | {frame} | {path} | {stacks} |")
    return lines


if __name__ == "__main__":
    main()
