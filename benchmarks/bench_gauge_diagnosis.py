"""Gauge diagnosis, measured: SmolLM2 before and after an AWQ-style fold from real activations, beside references.

Three parts (issue 31 item 4; docs/scan.md "Gauge diagnosis"):

1. **AWQ-style fold** of the embedded SmolLM2-135M: per layer ``s = mean|x|^alpha`` from the
   calibration windows ``geodrift compress`` uses (:func:`geodrift.compress.sources.load_compress_setup`,
   its defaults), folded between the MLP norm and Gate/Up columns and between Up rows and Down columns
   (:mod:`geodrift.compress.awq_fold`). The function is checked (max |Δlogit| on held-out windows),
   then the diagnosis of both checkpoints: median over layers of each family's spread, and the flag.
2. **The scan's numbers**: v1/u1 continuity of Gate, Up and Down (``--layers``) in the raw and the
   canonical view, before and after the fold (the canonical view should not move; the raw one may).
3. **References**: a fresh initialisation of the same shape, and the transformer simulator's ``tiny``
   preset trained ``--steps`` steps with weight decay 0.1 (its default) and 0: each one's median
   spreads and flag.

Usage (writes ``--out``, default benchmarks/RESULTS_gauge_diagnosis.md, with the stamp of ``geodrift.io.provenance``):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_gauge_diagnosis.py
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file

import geodrift
from geodrift.compress.awq_fold import activation_scales, fold_awq
from geodrift.compress.sources import load_compress_setup
from geodrift.gauge.align import shape_of
from geodrift.gauge.diagnose import FAMILIES, GaugeDiagnosis, diagnose
from geodrift.gauge.orbit import StateDict
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.hf import hf_step_dir
from geodrift.sim.presets import preset
from geodrift.sim.record import run_dir
from geodrift.sim.run import run

HF_CONFIG = {"model_type": "llama", "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
             "num_hidden_layers": 30, "intermediate_size": 1536}


def _row(label: str, diag: GaugeDiagnosis) -> str:
    medians = [statistics.median(diag.spread(f)) for f in FAMILIES]
    return (f"| {label} | " + " | ".join(f"{m:.3f}" for m in medians)
            + f" | {statistics.median(x.vo_gram for x in diag.layers):.2f} | {diag.mlp_median_ratio:.1f} | "
            f"{'**flagged**' if diag.flagged else 'not flagged'} |")


def _diagnose(sd: StateDict, n_heads: int, n_kv: int, label: str) -> GaugeDiagnosis:
    shape = shape_of(sd, n_heads, n_kv)
    d_model = int(sd["model.embed_tokens.weight"].shape[1])
    d_ff = int(sd["model.layers.0.mlp.up_proj.weight"].shape[0])
    return diagnose([(layer, sd) for layer in range(shape.n_layers)], shape, d_model, d_ff, label)


def awq_part(alpha: float, layers: str, null_draws: int) -> tuple[list[str], list[str]]:
    """Parts 1 and 2 on the embedded SmolLM2."""
    setup, texts = load_compress_setup(None)
    model = setup.model
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    shape = shape_of(sd, 9, 3)
    scales = activation_scales(model, texts.draws[0], alpha)
    folded = fold_awq(sd, shape, scales)
    other = copy.deepcopy(model)
    other.load_state_dict(folded)
    with torch.no_grad():
        ids = texts.evaluation[:4, :-1]
        before, after = model(ids), other(ids)
    spread_s = statistics.median(float(s[1].log().std()) for s in scales.values())
    rows = [_row("SmolLM2-135M (embedded)", _diagnose(sd, 9, 3, "SmolLM2")),
            _row(f"the same, AWQ-style fold (alpha {alpha:g})", _diagnose(folded, 9, 3, "SmolLM2 AWQ"))]
    head = [f"Calibration: {texts.draws[0].shape[0]} windows of {texts.draws[0].shape[1] - 1} tokens "
            f"({texts.corpus['calibration']}); median over layers of the spread of log s over hidden units "
            f"{spread_s:.3f}. Function: max |Δlogit| {float((before - after).abs().max()):.2e} on "
            f"{ids.shape[0]} held-out windows of {ids.shape[1]} tokens (logits up to "
            f"{float(before.abs().max()):.1f}).", ""]
    scan_lines = ["## The scan's numbers before and after the fold", "",
                  f"`geodrift.scan(state_dict, view=..., layers=\"{layers}\", null_draws={null_draws})` on the "
                  "embedded model's state dict and on its AWQ-folded copy; mean |cos| of adjacent layers' v1 / u1.",
                  "", "| view | projection | before v1 | after v1 | before u1 | after u1 |", "|---|---|---|---|---|---|"]
    for view in ("raw", "canonical"):
        reps = [geodrift.scan(s, view=view, config=HF_CONFIG, layers=layers, null_draws=null_draws,
                              roles="gate,up,down", ov=False) for s in (sd, folded)]
        for role in ("mlp_gate", "mlp_up", "mlp_down"):
            a, b = reps[0].role(role), reps[1].role(role)
            scan_lines.append(f"| {view} | {a.label} | {a.spaces['v'].vectors[0].mean:.4f} | "
                              f"{b.spaces['v'].vectors[0].mean:.4f} | {a.spaces['u'].vectors[0].mean:.4f} | "
                              f"{b.spaces['u'].vectors[0].mean:.4f} |")
    return head + rows, scan_lines


def reference_part(steps: int) -> list[str]:
    """Part 3: fresh initialisation and the tiny simulator trained with and without weight decay."""
    spec = preset("transformer", "tiny")[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for wd in (0.1, 0.0):
            label = f"tiny wd{wd:g}"
            trained = replace(spec, label=label, train=replace(spec.train, steps=steps, weight_decay=wd,
                                                               warmup_steps=min(20, steps // 10)))
            run(trained, [1], out=tmp, save_hf_every=steps, track=False)
            folder = run_dir(tmp, label, 1)
            cfg = spec.model
            if wd == 0.1:
                init = load_file(str(hf_step_dir(folder, 0) / "model.safetensors"))
                rows.append(_row("simulator `tiny`, step 0 (its initialisation)",
                                 _diagnose(init, cfg.n_heads, cfg.n_kv_heads or cfg.n_heads, "init")))
            sd = load_file(str(hf_step_dir(folder, steps) / "model.safetensors"))
            rows.append(_row(f"simulator `tiny`, {steps} steps, weight decay {wd:g}",
                             _diagnose(sd, cfg.n_heads, cfg.n_kv_heads or cfg.n_heads, label)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--layers", default="0-9")
    parser.add_argument("--null-draws", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_gauge_diagnosis.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    load_before = load_average()
    t0 = time.perf_counter()
    awq, scan_lines = awq_part(args.alpha, args.layers, args.null_draws)
    t1 = time.perf_counter()
    refs = reference_part(args.steps)
    walls = {"awq and scans": t1 - t0, "references": time.perf_counter() - t1}
    table = ["| checkpoint | " + " | ".join(f"{f} spread" for f in FAMILIES) + " | V/O Gram | Up/Down ×init | flag |",
             "|---|" + "---|" * (len(FAMILIES) + 3)]
    lines = ["## Diagnosis", "", *awq[:2],
             "Each number is the median over layers (nats; V/O Gram relative); `Up/Down ×init` is the median of "
             "each layer's Up/Down spread over a fresh initialisation of its shape (flagged at ≥ 3×, "
             "`geodrift.gauge.diagnose.FLAG_RATIO`).", "", *table, *awq[2:], *refs, "", *scan_lines, ""]
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s=walls)
    print(f"wrote {write_results(args.out, 'Gauge diagnosis: an AWQ-style fold against references', chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
