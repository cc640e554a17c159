"""Gauge diagnosis, measured: SmolLM2 under every fold and rotation quantisers apply, beside trained references.

Three parts (issue 42 item 4; docs/scan.md "Gauge diagnosis"):

1. **Folds of the embedded SmolLM2-135M**, each exact (the function is checked: max |Δlogit| on held-out
   windows): AWQ (``s = mean|x|^alpha`` from the calibration windows ``geodrift compress`` uses,
   :mod:`geodrift.compress.awq_fold`), SmoothQuant (``s = max|x|^alpha / max|W|^(1-alpha)`` from the same
   windows, between both norms and their readers, :mod:`geodrift.compress.gauge_folds`), QuaRot (gains folded,
   the stream rotated by a randomised Hadamard matrix), V/O maps of condition 1000 per KV head, and per-pair
   Q/K rotation-scalings (``log r ~ N(0, 1)``). The diagnosis of each: every family's median over layers and
   which are flagged.
2. **The scan's numbers**: v1/u1 continuity of Gate, Up and Down in the raw and the canonical view, before and
   after the AWQ fold (the canonical view should not move; the raw one may).
3. **References**: the transformer simulator's ``tiny`` preset at initialisation and trained ``--steps`` steps
   with weight decay 0.1 (its default) and 0. The band of the trained ones and SmolLM2 is
   ``geodrift.gauge.diagnose.REFERENCE`` (printed here; the module's constants must equal it).

Usage (writes ``--out``, default benchmarks/RESULTS_gauge_diagnosis.md, with the stamp of ``geodrift.io.provenance``):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_gauge_diagnosis.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

import geodrift
from geodrift.compress.awq_fold import activation_scales, fold_awq
from geodrift.compress.gauge_folds import fold_smoothquant, input_maxima, quarot
from geodrift.compress.sources import load_compress_setup
from geodrift.gauge.align import shape_of
from geodrift.gauge.diagnose import FAMILIES, LOW_IS_OFF, REFERENCE, GaugeDiagnosis, diagnose
from geodrift.gauge.orbit import StateDict, random_conditioned, transform_qk_all, transform_vo
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.hf import hf_step_dir
from geodrift.lm.llama import LlamaLM
from geodrift.sim.presets import preset
from geodrift.sim.record import run_dir
from geodrift.sim.run import run

HF_CONFIG = {"model_type": "llama", "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
             "num_hidden_layers": 30, "intermediate_size": 1536}


def _row(label: str, diag: GaugeDiagnosis) -> str:
    return (f"| {label} | " + " | ".join(f"{'**' if diag.off(f) else ''}{diag.medians[f]:.3f}{'**' if diag.off(f) else ''}"
                                      for f in FAMILIES)
            + f" | {', '.join(diag.flagged_families) if diag.flagged else 'nothing'} |")


def _diagnose(sd: StateDict, n_heads: int, n_kv: int, label: str) -> GaugeDiagnosis:
    shape = shape_of(sd, n_heads, n_kv)
    return diagnose([(layer, sd) for layer in range(shape.n_layers)], shape, label)


def _pair_maps(sd: StateDict, shape: Any, generator: torch.Generator) -> StateDict:
    for layer in range(shape.n_layers):
        for kv in range(shape.n_kv_heads):
            sd = transform_qk_all(sd, shape, layer, kv, torch.randn(shape.pairs, generator=generator,
                                                                     dtype=torch.float64).exp(),
                                  torch.rand(shape.pairs, generator=generator, dtype=torch.float64) * 6.283185307179586)
    return sd


def _vo_maps(sd: StateDict, shape: Any, generator: torch.Generator) -> StateDict:
    for layer in range(shape.n_layers):
        for kv in range(shape.n_kv_heads):
            sd = transform_vo(sd, shape, layer, kv, random_conditioned(shape.head_dim, 1000.0, generator))
    return sd


def _untied(model: LlamaLM) -> LlamaLM:
    # the same Llama with its own head (geodrift.lm.llama.LlamaLM's switches kept)
    return LlamaLM(model.model.embed_tokens.num_embeddings, model.model.embed_tokens.embedding_dim, model.n_layers,
                   model.n_heads, model.model.layers[0].mlp.up_proj.out_features, n_kv_heads=model.n_kv_heads,
                   rope_theta=model.rope_theta, norm_eps=model.norm_eps, tie_embeddings=False, init_std=0.0).eval()


def folds_part(alpha: float, layers: str, null_draws: int) -> tuple[list[str], list[str], GaugeDiagnosis]:
    """Parts 1 and 2 on the embedded SmolLM2."""
    setup, texts = load_compress_setup(None)
    model = setup.model
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    shape = shape_of(sd, 9, 3)
    calibration = texts.draws[0]
    generator = torch.Generator().manual_seed(0)
    folds = {
        f"AWQ (alpha {alpha:g}, real activations)": fold_awq(sd, shape, activation_scales(model, calibration, alpha)),
        f"SmoothQuant (alpha {alpha:g}, real activations)": fold_smoothquant(sd, shape, input_maxima(model, calibration),
                                                                            alpha),
        "QuaRot (gains folded, randomised Hadamard rotation)": quarot(sd, shape, generator),
        "V/O maps of condition 1000 per KV head": _vo_maps(sd, shape, generator),
        "Q/K rotation-scalings per RoPE pair (log r ~ N(0, 1))": _pair_maps(sd, shape, generator),
    }
    ids = texts.evaluation[:4, :-1]
    other = _untied(model)  # QuaRot folds the final gain into the head, which unties it
    with torch.no_grad():
        before = model(ids)
    plain = _diagnose(sd, 9, 3, "SmolLM2")
    rows = [_row("SmolLM2-135M (embedded)", plain)]
    changes = []
    for label, folded in folds.items():
        state = {k: v.to(torch.float32) for k, v in folded.items()}
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
        other.load_state_dict(state)
        with torch.no_grad():
            changes.append(f"{label.split(' (')[0]} {float((other(ids) - before).abs().max()):.1e}")
        rows.append(_row(f"the same, {label}", _diagnose(folded, 9, 3, label)))
    head = [f"Calibration: {calibration.shape[0]} windows of {calibration.shape[1] - 1} tokens "
            f"({texts.corpus['calibration']}). Function kept: max |Δlogit| on {ids.shape[0]} held-out windows of "
            f"{ids.shape[1]} tokens (logits up to {float(before.abs().max()):.1f}, float32): {'; '.join(changes)}.", ""]
    awq = folds[f"AWQ (alpha {alpha:g}, real activations)"]
    scan_lines = ["## The scan's numbers before and after the AWQ fold", "",
                  f"`geodrift.scan(state_dict, view=..., layers=\"{layers}\", null_draws={null_draws})` on the "
                  "embedded model's state dict and on its AWQ-folded copy; mean |cos| of adjacent layers' v1 / u1.",
                  "", "| view | projection | before v1 | after v1 | before u1 | after u1 |", "|---|---|---|---|---|---|"]
    for view in ("raw", "canonical"):
        reps = [geodrift.scan(s, view=view, config=HF_CONFIG, layers=layers, null_draws=null_draws,
                              roles="gate,up,down", ov=False) for s in (sd, awq)]
        for role in ("mlp_gate", "mlp_up", "mlp_down"):
            a, b = reps[0].role(role), reps[1].role(role)
            scan_lines.append(f"| {view} | {a.label} | {a.spaces['v'].vectors[0].mean:.4f} | "
                              f"{b.spaces['v'].vectors[0].mean:.4f} | {a.spaces['u'].vectors[0].mean:.4f} | "
                              f"{b.spaces['u'].vectors[0].mean:.4f} |")
    return head + rows, scan_lines, plain


def reference_part(steps: int) -> tuple[list[str], list[GaugeDiagnosis]]:
    """Part 3: the tiny simulator at initialisation and trained with and without weight decay."""
    spec = preset("transformer", "tiny")[0]
    rows, trained = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for wd in (0.1, 0.0):
            label = f"tiny wd{wd:g}"
            run(replace(spec, label=label, train=replace(spec.train, steps=steps, weight_decay=wd,
                                                          warmup_steps=min(20, steps // 10))),
                [1], out=tmp, save_hf_every=steps, track=False)
            folder = run_dir(tmp, label, 1)
            cfg = spec.model
            if wd == 0.1:
                init = load_file(str(hf_step_dir(folder, 0) / "model.safetensors"))
                rows.append(_row("simulator `tiny`, step 0 (its initialisation; not in the band)",
                                 _diagnose(init, cfg.n_heads, cfg.n_kv_heads or cfg.n_heads, "init")))
            sd = load_file(str(hf_step_dir(folder, steps) / "model.safetensors"))
            trained.append(_diagnose(sd, cfg.n_heads, cfg.n_kv_heads or cfg.n_heads, label))
            rows.append(_row(f"simulator `tiny`, {steps} steps, weight decay {wd:g}", trained[-1]))
    return rows, trained


def band(diagnoses: list[GaugeDiagnosis]) -> dict[str, tuple[float, float]]:
    """Each family's (lowest, highest) median over the trained checkpoints, rounded as REFERENCE holds them."""
    return {f: (round(min(d.medians[f] for d in diagnoses), 3), round(max(d.medians[f] for d in diagnoses), 3))
            for f in FAMILIES}


def diagnose_margin() -> float:
    from geodrift.gauge.diagnose import MARGIN

    return MARGIN


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
    folds, scan_lines, plain = folds_part(args.alpha, args.layers, args.null_draws)
    t1 = time.perf_counter()
    refs, trained = reference_part(args.steps)
    walls = {"folds and scans": t1 - t0, "references": time.perf_counter() - t1}
    measured = band([*trained, plain])
    table = ["| checkpoint | " + " | ".join(FAMILIES) + " | flagged |", "|---|" + "---|" * (len(FAMILIES) + 1)]
    lines = ["## Diagnosis", "", *folds[:2],
             "Each number is the median over layers of a family of `geodrift.gauge.diagnose` (nats); bold: beyond the "
             f"trained band by more than {diagnose_margin()}x (above it; `residual` below it), which flags the "
             "checkpoint.", "", *table, *folds[2:], *refs, "",
             "The band of the trained checkpoints (the two trained simulators and SmolLM2), lowest and highest "
             "median: " + ", ".join(f"{f} [{lo:.3f}, {hi:.3f}]" for f, (lo, hi) in measured.items())
             + (" - equal to `geodrift.gauge.diagnose.REFERENCE`." if measured == REFERENCE else
                f" - NOT equal to `geodrift.gauge.diagnose.REFERENCE` ({REFERENCE}): update it."),
             f"Below the band is off only for {', '.join(sorted(LOW_IS_OFF))} (a rotation removes the privileged "
             "basis).", "", *scan_lines, ""]
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s=walls)
    print(f"wrote {write_results(args.out, 'Gauge diagnosis: folds and rotations against trained references', chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
