"""geodrift merge on the embedded SmolLM2-135M: gauge robustness, do no harm, the folder transformers loads, mergekit.

Issue 41 item 3's acceptance checks at real size:

1. **Fine-tunes**: the embedded SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to float32) fine-tuned in full
   through ``transformers`` (AdamW, ``--lr``, batches of 2 x 128 tokens, ``--steps`` steps) on two texts: the
   offline corpus's training split (the Python standard library's documentation) and Python source code from the
   standard library. Every folder is written untied (an explicit ``lm_head``), so mergekit reads them all alike.
2. **Gauged copies** of the second fine-tune: a random exact gauge (``random_gauge``: residual rotation, head and
   hidden permutations, V/O maps of condition number 100, Q/K and Up/Down log-scales ~ N(0, 1)); an AWQ fold
   (``geodrift.compress.awq_fold`` with scales from the fine-tune's own activations on calibration windows of the
   training text); a QuaRot-style randomised Hadamard rotation of the residual stream (gains folded, ``H diag(s)``
   with ``H`` the full 576-order Hadamard matrix ``H12 x H12 x H4``, ``geodrift.gauge.hadamard``).
3. **Gauge robustness**: ``geodrift merge`` (``--align auto``) of (ft1, g ft2) against (ft1, ft2), held-out NLL
   (the corpus's held-out split, ``--eval-windows`` windows of 128 tokens), for ``linear`` and for ``ties`` with
   the base; the same with ``--align off`` and mergekit's ``linear`` and ``ties`` on the same pairs.
4. **Do no harm**: (ft1, ft2) merged with ``--align auto``, ``off`` and ``on``.
5. **The folder loads**: ``AutoModelForCausalLM`` on merged folders, its NLL against geodrift's own.

Usage (writes ``--out``, default benchmarks/RESULTS_merge.md, stamped):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_merge.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from geodrift.compress.awq_fold import activation_scales, fold_awq
from geodrift.gauge.hadamard import random_hadamard_rotation
from geodrift.gauge.orbit import GaugeShape, StateDict, fold_gains, random_gauge, rotate_residual
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.hf import save_hf
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import encode_ids, eval_windows, load_corpus, sample_batch
from geodrift.merging.evaluate import geodrift_nll, transformers_nll
from geodrift.pretrained import keep_tokenizer, llama_from_checkpoint, open_checkpoint, tokenizer_for

SHAPE = GaugeShape(n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64)
CODE_MODULES = ("json/decoder.py", "json/encoder.py", "textwrap.py", "argparse.py", "dataclasses.py", "fractions.py",
                "heapq.py", "bisect.py", "shlex.py", "string.py")
GAUGES = ("random exact gauge", "AWQ fold", "Hadamard rotation")
# Which merges each plan runs: method -> partner of ft1 -> the --align modes (and "mergekit").
PLANS = {
    "full": {"linear": {"ft2": ("auto", "off", "on", "mergekit"), "random exact gauge": ("auto", "off", "mergekit"),
                        "AWQ fold": ("auto",), "Hadamard rotation": ("auto",)},
             "ties": {"ft2": ("auto", "off", "on", "mergekit"), "random exact gauge": ("auto", "mergekit")}},
    "auto": {"linear": {"ft2": ("auto", "off", "on"), "random exact gauge": ("auto",), "AWQ fold": ("auto",),
                        "Hadamard rotation": ("auto",)},
             "ties": {"ft2": ("auto", "off", "on"), "random exact gauge": ("auto",)}},
    "ties-do-no-harm": {"ties": {"ft2": ("auto", "off")}},
    "ties-gauge": {"ties": {"ft2": ("auto",), "random exact gauge": ("auto",)}},
    "folds": {method: {"ft2": ("auto", "mergekit"), "AWQ fold": ("auto", "mergekit"),
                       "Hadamard rotation": ("auto", "mergekit")} for method in ("linear", "ties")},
}
PLAN_NOTES = {  # what each plan leaves out, in the results file's words
    "full": "Run on a shared 2-core machine, the plan is cut to what fits: every gauge under `linear`, the random gauge "
            "under `ties`, `--align off` and mergekit on the random gauge and on ft2 (`--plan folds` adds the rest of "
            "mergekit's rows: RESULTS_merge_folds.md).",
    "auto": "`--plan auto`: only the rows that `--align auto`'s one-gauge rule moves; no mergekit here.",
    "ties-do-no-harm": "`--plan ties-do-no-harm`: `ties` on the two fine-tunes, `--align auto` and `off` only.",
    "ties-gauge": "`--plan ties-gauge`: `ties --align auto` on ft2 and on its random exact gauge only.",
    "folds": "`--plan folds`: the AWQ fold and the Hadamard rotation under `linear` and `ties`, `--align auto` and "
             "mergekit (the full plan's RESULTS_merge.md has the random gauge and `--align off`).",
}


def release() -> None:
    """Give freed memory back to the system (the merges run beside other benchmarks on a shared machine)."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def geodrift_merge(models: list[Path], out: Path, method: str, align: str, base: Path | None) -> dict[str, Any]:
    """``geodrift merge`` as a user runs it (its own process: its memory is returned when it ends); its JSON report."""
    command = [str(Path(sys.executable).with_name("geodrift")), "merge", *map(str, models), "--out", str(out),
               "--method", method, "--align", align, "--json", "-q", *(["--base", str(base)] if base else [])]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return dict(json.loads(done.stdout))


def write_folder(sd: StateDict, folder: Path, tie: bool = False) -> Path:
    """A SmolLM2-shaped state dict as a Hugging Face folder with the embedded model's tokenizer."""
    model = LlamaLM(49152, 576, 30, 9, 1536, n_kv_heads=3, rope_theta=100000.0, norm_eps=1e-5, tie_embeddings=tie,
                    init_std=0.0)
    state = {k: v.to(torch.float32) for k, v in sd.items() if k in model.state_dict()}
    state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    model.load_state_dict(state)
    save_hf(model, folder, context_length=8192, config_extra={"bos_token_id": 1, "eos_token_id": 2})
    keep_tokenizer(None, folder)
    return folder


def fine_tune(base: Path, ids: torch.Tensor, steps: int, lr: float, seed: int) -> StateDict:
    """Full fine-tuning of the (tied) base folder through transformers; the weights after ``steps`` steps."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(base), torch_dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = sample_batch(ids, 2, 128, gen)
        logits = model(batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"].clone()  # untied from here on
    return sd


def gauged(kind: str, sd: StateDict, calibration: torch.Tensor) -> StateDict:
    wide = {k: v.double() for k, v in sd.items()}
    if kind == "random exact gauge":
        return random_gauge(wide, SHAPE, torch.Generator().manual_seed(0), condition=100.0, sigma=1.0)
    if kind == "AWQ fold":
        model = LlamaLM(49152, 576, 30, 9, 1536, n_kv_heads=3, rope_theta=100000.0, norm_eps=1e-5, init_std=0.0)
        model.load_state_dict(sd)
        return fold_awq(wide, SHAPE, activation_scales(model, calibration))
    return rotate_residual(fold_gains(wide, SHAPE), SHAPE, random_hadamard_rotation(576, torch.Generator().manual_seed(0)))


def mergekit(exe: str, method: str, base: Path, pair: list[Path], out: Path) -> str | None:
    """mergekit-yaml on the pair (``ties``: with the base, density 0.5); None when it ran, else its last error line."""
    models = "".join(f"  - model: {p}\n    parameters: {{weight: 1.0{', density: 0.5' if method == 'ties' else ''}}}\n"
                     for p in pair)
    config = f"merge_method: {method}\n" + (f"base_model: {base}\n" if method == "ties" else "") + \
        f"models:\n{models}dtype: float32\n"
    (out.parent / f"{out.name}.yml").write_text(config)
    done = subprocess.run([exe, str(out.parent / f"{out.name}.yml"), str(out), "--quiet"], capture_output=True,
                          text=True, env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    if not (out / "model.safetensors").is_file():
        return (done.stderr.strip().splitlines() or ["no output"])[-1]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--eval-windows", type=int, default=16)
    parser.add_argument("--mergekit", default="/tmp/mergekit-venv/bin/mergekit-yaml")
    parser.add_argument("--plan", choices=tuple(PLANS), default="full",
                        help="full: every row; auto: only the rows --align auto's one-gauge rule moves (no mergekit); "
                             "ties-do-no-harm: ties on (ft1, ft2) with --align auto and off; ties-gauge: ties --align auto on "
                             "(ft1, ft2) and (ft1, random gauge of ft2)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_merge.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    load_before = load_average()
    walls: dict[str, float] = {}
    root = Path(tempfile.mkdtemp(prefix="bench-merge-"))
    t0 = time.perf_counter()
    base_sd = llama_from_checkpoint(open_checkpoint(None)).state_dict()
    tied = write_folder({k: v for k, v in base_sd.items() if k != "lm_head.weight"}, root / "base-tied", tie=True)
    base = write_folder(base_sd, root / "base")
    tokenizer = tokenizer_for(base)
    corpus = load_corpus(None)
    lib = Path(json.__file__).parent.parent
    code = "\n\n".join((lib / m).read_text(encoding="utf-8") for m in CODE_MODULES)
    docs_ids, code_ids = encode_ids(tokenizer, corpus.train), encode_ids(tokenizer, code)
    windows = eval_windows(encode_ids(tokenizer, corpus.valid), 128, args.eval_windows)
    calibration = eval_windows(docs_ids, 128, 16)
    del base_sd
    folders = {}
    for name, ids, seed in (("ft1", docs_ids, 1), ("ft2", code_ids, 2)):
        folders[name] = write_folder(fine_tune(tied, ids, args.steps, args.lr, seed), root / name)
        release()
    walls["fine-tuning"] = time.perf_counter() - t0
    ft2 = load_file(str(folders["ft2"] / "model.safetensors"))
    for kind in (k for k in GAUGES if any(k in partners for partners in PLANS[args.plan].values())):
        folders[kind] = write_folder(gauged(kind, ft2, calibration), root / kind.split()[0])
        release()
    del ft2
    release()
    nll = {name: geodrift_nll(folder, windows) for name, folder in [("base", base), *folders.items()]}
    lines = ["## The models", "",
             f"Base: the embedded SmolLM2-135M-Instruct (Q4_1, dequantised). Fine-tunes: {args.steps} steps of full "
             f"fine-tuning through transformers (AdamW, lr {args.lr:g}, 2 x 128 tokens per step): ft1 on the offline "
             f"corpus's training split (standard-library documentation), ft2 on standard-library source code "
             f"({len(CODE_MODULES)} modules). Held-out NLL: {windows.shape[0]} windows of 128 tokens of the corpus's "
             "held-out split (nats per token).", "", "| model | held-out NLL |", "|---|---|"]
    lines += [f"| {name} | {value:.4f} |" for name, value in nll.items()]
    lines += ["", "Each gauged copy computes ft2's function: |ΔNLL| " + ", ".join(
        f"{kind} {abs(nll[kind] - nll['ft2']):.1e}" for kind in GAUGES if kind in nll) + ".", ""]

    t1 = time.perf_counter()
    results: dict[tuple[str, str, str], Any] = {}
    checks: dict[tuple[str, str], Any] = {}
    plan = PLANS[args.plan]
    for method, partners in plan.items():
        for partner, modes in partners.items():
            for align in (m for m in modes if m != "mergekit"):
                out = root / f"m-{method}-{partner.split()[0]}-{align}"
                start = time.perf_counter()
                report = geodrift_merge([folders["ft1"], folders[partner]], out, method, align,
                                        base if method == "ties" else None)
                results[method, partner, align] = (geodrift_nll(out, windows), time.perf_counter() - start, out)
                checks[method, partner] = report["checks"]
                release()
            if "mergekit" in modes:
                out = root / f"mk-{method}-{partner.split()[0]}"
                error = mergekit(args.mergekit, method, base, [folders["ft1"], folders[partner]], out)
                results[method, partner, "mergekit"] = (geodrift_nll(out, windows) if error is None else error, 0.0,
                                                        out)
                release()
    walls["merges"] = time.perf_counter() - t1

    lines += ["## Gauge robustness: merge(ft1, g·ft2) against merge(ft1, ft2)", "",
              "`geodrift merge ft1 X --method linear` and `geodrift merge --base base ft1 X --method ties` (density "
              "0.5); X = ft2 or a gauged copy. ΔNLL = NLL(merge with X) − NLL(merge with ft2) under the same tool and "
              "options; the acceptance bound is 0.005 nats. mergekit 0.1.4 (`mergekit-yaml`, its `linear` and "
              "`ties` with the same weights and density) on the same folders, for the record. Each geodrift merge runs "
              "as the command (`geodrift merge ... --json`) in its own process. " + PLAN_NOTES[args.plan],
              "",
              "| method | X | geodrift --align auto | ΔNLL | --align off | ΔNLL | mergekit | ΔNLL | within 0.005 (auto) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for method, partners in plan.items():
        plain = {tool: results.get((method, "ft2", tool), ("not run",))[0] for tool in ("auto", "off", "mergekit")}
        for partner in partners:
            row = [method, partner]
            for tool in ("auto", "off", "mergekit"):
                if (method, partner, tool) not in results:
                    row += ["not run", "—"]
                    continue
                value = results[method, partner, tool][0]
                if isinstance(value, str) or isinstance(plain[tool], str):
                    row += [f"failed: {value}" if isinstance(value, str) else f"{value:.4f}", "—"]
                else:
                    row += [f"{value:.4f}", f"{value - plain[tool]:+.4f}"]
            auto = results[method, partner, "auto"][0] - plain["auto"]
            row.append("yes" if abs(auto) < 0.005 else "**no**")
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "The pre-merge check of each pair (`geodrift merge`'s report, geodrift/merging/identity.py): the recovered "
              "maps - the lowest share over layers of hidden units kept at their index, the highest share of sign "
              "flips, `||M - I||_F / sqrt(n)` of the residual rotation, of the V/O and Q/K maps (largest over heads), "
              "the median `|log s|` of the Up/Down scales (largest over layers) -, one gauge when at least half is kept "
              "and every map is within 0.1 of the identity; the weight distance before → after alignment and its ratio "
              "(the rule this replaced: one gauge when ≥ 0.9), matched cosine:", "",
              "| method | X | model checked | units kept | sign flips | rotation | V/O | Q/K | Up/Down | one gauge | "
              "distance | ratio | matched cosine | head maps | aligned |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (method, partner), found in checks.items():
        for c in found:
            m = c["maps"]
            lines.append(f"| {method} | {partner} | {Path(c['label']).name} | {100 * m['units_kept']:.1f}% | "
                         f"{100 * m['sign_flips']:.1f}% | {m['rotation']:.3g} | {m['vo']:.3g} | {m['qk']:.3g} | "
                         f"{m['updown']:.3g} | {'yes' if c['one_gauge'] else 'no'} | {c['naive_distance']:.4g} → "
                         f"{c['aligned_distance']:.4g} | {c['ratio']:.3g} | {c['matched_cosine']:.5f} | "
                         f"{c['head_maps']} | {'yes' if c['applied'] else 'no'} |")
    lines += ["", "## Do no harm: two fine-tunes of one base", "",
              "| method | --align auto | --align off | --align on | auto − off | on − off | auto bit-identical to off |",
              "|---|---|---|---|---|---|---|"]
    for method in (m for m in ("linear", "ties") if (m, "ft2", "off") in results):
        auto, off = (results[method, "ft2", a] for a in ("auto", "off"))
        on = results.get((method, "ft2", "on"))
        same = load_file(str(auto[2] / "model.safetensors")), load_file(str(off[2] / "model.safetensors"))
        identical = same[0].keys() == same[1].keys() and all(torch.equal(same[0][k], same[1][k]) for k in same[1])
        forced = ("not run", "—") if on is None else (f"{on[0]:.4f}", f"{on[0] - off[0]:+.5f}")
        lines.append(f"| {method} | {auto[0]:.4f} | {off[0]:.4f} | {forced[0]} | {auto[0] - off[0]:+.5f} | "
                     f"{forced[1]} | {'yes' if identical else 'no'} |")
    lines += ["", "## The merged folder in transformers", "",
              "| folder | transformers AutoModelForCausalLM NLL | geodrift NLL | difference |", "|---|---|---|---|"]
    for key in (("linear", "random exact gauge", "auto"), ("ties", "random exact gauge", "auto"), ("ties", "ft2", "auto")):
        if key not in results:
            continue
        out = results[key][2]
        theirs, ours = transformers_nll(out, windows), results[key][0]
        lines.append(f"| {key[0]} (ft1, {key[1]}), --align {key[2]} | {theirs:.5f} | {ours:.5f} | {theirs - ours:+.1e} |")
    lines += ["", "Merge wall times (one thread, reading, the pre-merge check's two alignment fits per model, merging, "
              "writing): " + ", ".join(f"{m} {p.split()[0]} {a} {results[m, p, a][1]:.0f} s" for m, p, a in results
                                       if a in ("auto",)) + ".", ""]
    shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))
    s = stamp(command_line(), load_before=load_before, wall_s=walls)
    print(f"wrote {write_results(args.out, 'geodrift merge on SmolLM2-135M: gauge robustness, do no harm, loading', chr(10).join(lines), s)}")


if __name__ == "__main__":
    sys.exit(main())
