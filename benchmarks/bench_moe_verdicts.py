"""Calibrate the mixture-of-experts verdicts: false positives on random and layer-shuffled models, hits on planted ones.

Not a timing benchmark (no lock needed). The router and every expert's Gate/Up/Down get the dense MLP's
verdict (``geodrift.continuity.verdicts.projection_verdict``: the predicted space beats its permutation
null by z >= 3 and its excess exceeds the other space's); the experts of one layer compared with each
other get none. Three kinds of model, scanned from disk as Hugging Face safetensors folders:

1. **Random init**: ``transformers``' own init (normal, ``initializer_range`` 0.02) of Mixtral, Qwen2-MoE
   and OLMoE - no depth structure, so every "holds" is a false positive. The experts-within-a-layer
   statistic is reported too, as the share of layers whose z >= 3 (it is never turned into a verdict).
2. **Layer-shuffled planted**: the planted model below with each layer's stream coordinates relabelled by
   its own random permutation (readers' columns, writers' rows): every matrix keeps its spectrum, only
   the agreement between layers is gone - every "holds" is a false positive.
3. **Planted**: every expert's Gate/Up reads along one stream direction, every Down writes along another,
   the router reads along a third (rank-1 signal over Gaussian noise) - every "fails" is a miss.

Usage (the numbers in benchmarks/RESULTS_moe.md):
    nice -n 10 .venv/bin/python benchmarks/bench_moe_verdicts.py --seeds 6 --out benchmarks/RESULTS_moe.md
"""

from __future__ import annotations

import argparse
import math
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

import geodrift
from geodrift.weights import split_expert_role

SHAPE = {"layers": 8, "hidden": 64, "heads": 4, "kv": 2, "ff": 96, "experts": 8, "vocab": 128}
FAMILIES = ("mixtral", "qwen2_moe", "olmoe")


def random_init_folder(family: str, seed: int, folder: Path) -> Path:
    """A transformers random-init mixture of experts of ``family`` saved as a safetensors folder."""
    import transformers

    s = SHAPE
    torch.manual_seed(seed)
    common = dict(vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                  num_attention_heads=s["heads"], num_key_value_heads=s["kv"], intermediate_size=s["ff"],
                  num_experts_per_tok=2, max_position_embeddings=128)
    if family == "mixtral":
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**common, num_local_experts=s["experts"]))
    elif family == "qwen2_moe":
        model = transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
            **common, num_experts=s["experts"], moe_intermediate_size=s["ff"], shared_expert_intermediate_size=s["ff"]))
    else:
        model = transformers.OlmoeForCausalLM(transformers.OlmoeConfig(**common, num_experts=s["experts"]))
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def planted_folder(seed: int, shuffle: bool, folder: Path) -> Path:
    """A Mixtral-named model with planted depth structure (see the module docstring), optionally layer-shuffled."""
    import json

    from safetensors.torch import save_file

    s = SHAPE
    g = torch.Generator().manual_seed(seed)
    d, ff, n_exp = s["hidden"], s["ff"], s["experts"]

    def unit(n: int) -> torch.Tensor:
        x = torch.randn(n, generator=g)
        return x / x.norm()

    read, write, route = unit(d), unit(d), unit(d)
    signal = 2.0 * (math.sqrt(ff) + math.sqrt(d))  # twice the top singular value of the noise
    state: dict[str, torch.Tensor] = {"model.embed_tokens.weight": torch.randn(s["vocab"], d, generator=g)}
    for layer in range(s["layers"]):
        perm = torch.randperm(d, generator=g) if shuffle else torch.arange(d)
        p = f"model.layers.{layer}."
        hd = d // s["heads"]
        for name, rows in (("q_proj", s["heads"] * hd), ("k_proj", s["kv"] * hd), ("v_proj", s["kv"] * hd)):
            state[p + f"self_attn.{name}.weight"] = torch.randn(rows, d, generator=g)[:, perm]
        state[p + "self_attn.o_proj.weight"] = torch.randn(d, s["heads"] * hd, generator=g)[perm, :]
        state[p + "input_layernorm.weight"] = torch.ones(d)
        state[p + "post_attention_layernorm.weight"] = torch.ones(d)
        state[p + "block_sparse_moe.gate.weight"] = (signal * torch.outer(unit(n_exp), route)
                                                     + torch.randn(n_exp, d, generator=g))[:, perm]
        for e in range(n_exp):
            for w in ("w1", "w3"):
                state[p + f"block_sparse_moe.experts.{e}.{w}.weight"] = (
                    signal * torch.outer(unit(ff), read) + torch.randn(ff, d, generator=g))[:, perm]
            state[p + f"block_sparse_moe.experts.{e}.w2.weight"] = (
                signal * torch.outer(write, unit(ff)) + torch.randn(d, ff, generator=g))[perm, :]
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"))
    config = {"model_type": "mixtral", "num_hidden_layers": s["layers"], "hidden_size": d,
              "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"], "intermediate_size": ff,
              "num_local_experts": n_exp, "vocab_size": s["vocab"]}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def tally(report: geodrift.continuity.Report) -> dict[str, tuple[int, int]]:
    """``group -> (holds, judged)`` for the router, each expert family, and the dense roles together."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in report.roles:
        if r.verdict not in ("holds", "fails") or r.predicted_space is None:
            continue
        split = split_expert_role(r.role)
        group = split[0] if split else r.role if r.role in ("router", "shared_gate", "shared_up", "shared_down") else "dense"
        out[group][0] += r.verdict == "holds"
        out[group][1] += 1
    within = [r.spaces[s].vectors[0].z >= 3 for r in report.across_experts for s in ("v", "u")]
    out["within-layer z >= 3"] = [sum(within), len(within)]
    return {k: (v[0], v[1]) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--null-draws", type=int, default=100)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started, revision = time.time(), _revision()
    rows: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        kinds = [(f"random {f}", lambda seed, f=f: random_init_folder(f, seed, root / f"{f}-{seed}")) for f in FAMILIES]
        kinds += [("layer-shuffled planted", lambda seed: planted_folder(seed, True, root / f"shuffled-{seed}")),
                  ("planted", lambda seed: planted_folder(seed, False, root / f"planted-{seed}"))]
        for kind, make in kinds:
            for seed in range(args.seeds):
                report = geodrift.scan(make(seed), view="raw", null_draws=args.null_draws, seed=seed)
                for group, (held, judged) in tally(report).items():
                    rows[(kind, group)][0] += held
                    rows[(kind, group)][1] += judged
                print(f"{kind} seed {seed}: {dict(tally(report))}", file=sys.stderr)
    lines = [
        "# Mixture-of-experts verdicts: calibration",
        "",
        "Command: `nice -n 10 .venv/bin/python benchmarks/bench_moe_verdicts.py "
        f"--seeds {args.seeds} --null-draws {args.null_draws}{' --out ' + str(args.out) if args.out else ''}`",
        f"(geodrift {geodrift.__version__}, git {revision}, {platform.machine()}, torch {torch.__version__}; "
        f"{time.time() - started:.0f} s). Shape: {SHAPE['layers']} layers, width {SHAPE['hidden']}, "
        f"{SHAPE['experts']} experts of width {SHAPE['ff']}; seeds 0..{args.seeds - 1}; the scan's defaults otherwise (k 8).",
        "",
        "\"holds\" counts the verdicts that say the predicted space is continuous (z >= 3 against the permutation",
        "null and an excess over the null above the other space's). On random and layer-shuffled models every",
        "holds is a false positive; on planted ones every fails is a miss. The experts-within-a-layer row counts",
        "layer x space statistics with z >= 3 (no verdict is drawn from them; the theory predicts nothing there).",
        "",
        "| model | group | holds / judged | rate |",
        "|---|---|---|---|",
    ]
    for (kind, group), (held, judged) in rows.items():
        rate = f"{held / judged:.3f}" if judged else "—"
        lines.append(f"| {kind} | {group} | {held} / {judged} | {rate} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")


def _revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    main()
