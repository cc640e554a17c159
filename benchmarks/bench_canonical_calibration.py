"""A reduced calibration of the canonical view's verdicts: false positives on random inits and layer-shuffled copies.

The same models as ``benchmarks/bench_verdicts.py`` (whose helpers it uses), fewer of them, scanned with
``view="canonical"``: ``transformers`` random inits of the architectures whose gauge group is derived
(llama, mistral, qwen2; a predicted space whose frame or path holds is a false positive, a V that fails a
false alarm) and layer-shuffled copies of the embedded SmolLM2-135M (every tensor of a layer moved
together; embedding and final norm kept; a "path holds" is a false positive), beside the trained
SmolLM2 (true positives). The counts are small: this bounds gross miscalibration only.

Usage (writes ``--out``, default benchmarks/RESULTS_canonical_calibration.md, with the stamp of ``geodrift.io.provenance``):
    nice -n 10 .venv/bin/python benchmarks/bench_canonical_calibration.py --seeds 2 --shuffles 3
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from bench_verdicts import (
    _count,
    _has_prediction,
    _is_v,
    _predicted,
    _rate,
    depth_order,
    outcome,
    random_init_folder,
)

import geodrift
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.hf import hf_config
from geodrift.pretrained import llama_from_checkpoint, open_llama

ARCHS = ("llama", "mistral", "qwen2")
LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def shuffled(state: dict[str, torch.Tensor], order: list[int]) -> dict[str, torch.Tensor]:
    """``state`` with layer ``l``'s tensors (projections and norms) moved to depth ``order[l]``."""
    out = {}
    for name, tensor in state.items():
        match = LAYER.match(name)
        out[LAYER.sub(f"model.layers.{order[int(match.group(1))]}.", name) if match else name] = tensor
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--shuffles", type=int, default=3)
    parser.add_argument("--null-draws", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_canonical_calibration.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    load_before, t0 = load_average(), time.perf_counter()
    random_init: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHS:
            for seed in range(args.seeds):
                folder = random_init_folder(arch, seed, Path(tmp) / f"{arch}-{seed}")
                random_init.append(outcome(geodrift.scan(folder, view="canonical", null_draws=args.null_draws,
                                                         seed=seed)))
    model = llama_from_checkpoint(open_llama(None))
    config, state = hf_config(model), {k: v.clone() for k, v in model.state_dict().items()}
    trained = [outcome(geodrift.scan(state, view="canonical", config=config, null_draws=args.null_draws))]
    shuffles = [outcome(geodrift.scan(shuffled(state, depth_order(seed, model.n_layers)), view="canonical",
                                      config=config, null_draws=args.null_draws, seed=seed))
                for seed in range(args.shuffles)]
    holds = lambda r, v: _predicted(r, v) and v == "holds"  # noqa: E731
    v_fails = lambda r, v: r == "attn_v" and v == "fails"  # noqa: E731
    lines = [f"1 torch thread; canonical view; {args.null_draws} null draws. Random inits: transformers "
             f"`from_config` of {', '.join(ARCHS)} ({args.seeds} seeds each; 12 layers, width 256, as "
             "bench_verdicts.py). Rates are counts with exact (Clopper–Pearson) 95 % intervals.", "",
             "| what | frame | path |", "|---|---|---|",
             f"| random init, predicted spaces that hold (false positives) | {_rate(*_count(random_init, 'frame', holds, _has_prediction))} | "
             f"{_rate(*_count(random_init, 'path', holds, _has_prediction))} |",
             f"| random init, V fails (false alarms) | {_rate(*_count(random_init, 'frame', v_fails, _is_v))} | "
             f"{_rate(*_count(random_init, 'path', v_fails, _is_v))} |",
             f"| layer-shuffled SmolLM2 ({args.shuffles} copies), predicted spaces that hold (path: false positives) | "
             f"{_rate(*_count(shuffles, 'frame', holds, _has_prediction))} | {_rate(*_count(shuffles, 'path', holds, _has_prediction))} |",
             f"| trained SmolLM2, predicted spaces that hold | {_rate(*_count(trained, 'frame', holds, _has_prediction))} | "
             f"{_rate(*_count(trained, 'path', holds, _has_prediction))} |", "",
             "Per model (frame / path per projection):", ""]
    names = [f"{a} seed {s}" for a in ARCHS for s in range(args.seeds)] + [f"shuffle {s}" for s in range(args.shuffles)]
    for name, got in [*zip(names, random_init + shuffles, strict=True), ("trained SmolLM2", trained[0])]:
        lines.append(f"- {name}: " + ", ".join(f"{role} {got['frame'][role]}/{got['path'][role]}" for role in got["frame"]))
    text = "\n".join(lines)
    print(text)
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t0})
    print(f"wrote {write_results(args.out, 'The canonical view: a reduced verdict calibration', text, s)}")


if __name__ == "__main__":
    main()
