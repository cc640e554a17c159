"""Rotation drift during real fine-tuning (issue 38 item 6): the embedded SmolLM2 fine-tuned for a few dozen steps
through ``transformers``, and each projection's v1/u1 rotation from the base in the raw, folded and default views.

The embedded SmolLM2-135M-Instruct is written as a Hugging Face folder (float32, ``geodrift.lm.hf.save_hf``),
loaded by ``transformers.AutoModelForCausalLM`` and fine-tuned in full (float32, AdamW, constant ``--lr``, no
weight decay) on random windows of ``--batch`` x ``--seq-len`` tokens of the stdlib-docs corpus
(``geodrift.lm.text.load_corpus``, SmolLM2's own tokenizer), saved with ``save_pretrained`` at ``--save``
steps. ``geodrift drift BASE STEP...`` then measures, in each view, every layer's rotation from the base
``arccos |cos(x_t, x_0)|`` of v1 (input space) and u1 (output space); the table gives, per projection and space,
the mean over layers at each saved step, beside the angle of its null (the permutation null in raw and folded;
the rotation null on the residual side of the default view) and of the random floor ``sqrt(2/(pi d))``. The
figure (``--figure``) draws the mean over the predicted spaces against the step, one line per view, with the null
and floor angles.

Usage (writes ``--out``, default benchmarks/RESULTS_finetune_drift.md, stamped, and the figure):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_finetune_drift.py
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from geodrift.continuity import MeasureSpec
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.hf import save_hf
from geodrift.lm.text import encode_ids, load_corpus
from geodrift.pretrained import llama_from_checkpoint, open_llama, smollm2_tokenizer
from geodrift.render.figures import save_figure
from geodrift.scanner.series import drift
from geodrift.weights import predicted_space

VIEWS = (("raw", "raw"), ("folded", "folded"), ("default", None))


def fine_tune(base: Path, root: Path, steps: int, save: list[int], lr: float, batch: int, seq_len: int
              ) -> tuple[list[str], list[float], float]:
    """Fine-tune the folder ``base`` through transformers; the folders saved at ``save``, the losses, CPU seconds."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32, local_files_only=True)
    model.train()
    ids = encode_ids(smollm2_tokenizer(), load_corpus().train[:400_000])
    g = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    folders, losses, cpu = [], [], time.process_time()
    for step in range(1, steps + 1):
        starts = torch.randint(0, ids.numel() - seq_len - 1, (batch,), generator=g)
        x = torch.stack([ids[s:s + seq_len] for s in starts.tolist()])
        loss = model(input_ids=x, labels=x).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if step in save:
            folder = root / f"step-{step:03d}"
            model.save_pretrained(str(folder), safe_serialization=True)
            folders.append(str(folder))
    return folders, losses, time.process_time() - cpu


def relative_change(base: Path, folder: str) -> float:
    """``||W_t - W_0|| / ||W_0||`` over every projection."""
    from safetensors.torch import load_file

    a, b = load_file(base / "model.safetensors"), load_file(Path(folder) / "model.safetensors")
    keys = [k for k in a if k.endswith("proj.weight")]
    return math.sqrt(sum(float((b[k] - a[k]).pow(2).sum()) for k in keys) / sum(float(a[k].pow(2).sum()) for k in keys))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--save", default="4,8,16,24")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--null-draws", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_finetune_drift.md"))
    parser.add_argument("--figure", type=Path, default=Path("docs/img/finetune_drift.png"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    t_start, load_before = time.perf_counter(), load_average()
    save = [int(s) for s in args.save.split(",")]
    spec = MeasureSpec(k=4, null_draws=args.null_draws)
    table: dict[str, dict[tuple[str, str], dict[int, tuple[float, float, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = save_hf(llama_from_checkpoint(open_llama(None)), root / "base")
        folders, losses, train_cpu = fine_tune(base, root, args.steps, save, args.lr, args.batch, args.seq_len)
        changes = [relative_change(base, f) for f in folders]
        seconds = {}
        for name, view in VIEWS:
            t0 = time.process_time()
            report = drift([str(base), *folders], spec, view=view)
            seconds[name] = time.process_time() - t0
            rows: dict[tuple[str, str], dict[int, list[tuple[float, float, float]]]] = defaultdict(
                lambda: defaultdict(list))
            for r in report.rotation:
                rows[(r.label, r.space)][r.checkpoint].append((r.angle_deg, r.null_angle_deg,
                                                              math.degrees(math.acos(r.random_floor))))
            table[name] = {key: {t: tuple(sum(x[i] for x in v) / len(v) for i in range(3))  # type: ignore[misc]
                                 for t, v in by_t.items()} for key, by_t in rows.items()}
            print(name, seconds[name], flush=True)
    lines = [f"The embedded SmolLM2-135M-Instruct (float32) fine-tuned in full through transformers: AdamW, lr "
             f"{args.lr:g}, batch {args.batch} x {args.seq_len} tokens of the stdlib-docs corpus, {args.steps} steps "
             f"({train_cpu:.0f} CPU s, {train_cpu / args.steps:.1f} per step); loss {losses[0]:.3f} at step 1, "
             f"{losses[-1]:.3f} at step {args.steps}. Relative change of every projection from the base: "
             + ", ".join(f"{c:.2%} at step {s}" for c, s in zip(changes, save, strict=True)) + ". "
             f"`geodrift drift` over the base and the saved steps, k = 4, {args.null_draws} null draws, seed 0; CPU "
             "seconds per view: " + ", ".join(f"{n} {s:.0f}" for n, s in seconds.items()) + ".", "",
             "Mean over layers of the rotation from the base (degrees) at each saved step; in brackets the angle of "
             "the null at the last step (raw, folded: permutation null; default: the rotation null on the residual "
             "side, the permutation null on the head/hidden side) and of the random floor. Predicted spaces in bold.",
             "", "| projection | space | " + " | ".join(f"{n} step {s}" for n, _ in VIEWS for s in save)
             + " | null (raw · folded · default) | floor |", "|---" * (4 + len(VIEWS) * len(save)) + "|"]
    for key in sorted(table["raw"], key=lambda k: (list(dict.fromkeys(x[0] for x in table["raw"])).index(k[0]), k[1])):
        label, space = key
        known, predicted = predicted_space({"Q": "attn_q", "K": "attn_k", "V": "attn_v", "O": "attn_o",
                                            "Gate": "mlp_gate", "Up": "mlp_up", "Down": "mlp_down",
                                            "OV": "attn_ov"}.get(label, label))
        cell = (lambda x: f"**{x}**") if known and predicted == space else (lambda x: x)
        values = [cell(f"{table[n][key][t][0]:.3f}") for n, _ in VIEWS for t in range(1, len(save) + 1)]
        last = len(save)
        nulls = " · ".join(f"{table[n][key][last][1]:.1f}" for n, _ in VIEWS)
        lines.append(f"| {label} | {space} | " + " | ".join(values) + f" | {nulls} | {table['raw'][key][last][2]:.1f} |")
    means = {n: [sum(v[t][0] for v in table[n].values()) / len(table[n]) for t in range(1, len(save) + 1)]
             for n, _ in VIEWS}
    lines += ["", "Mean over every projection and space: " + "; ".join(
        f"{n} " + ", ".join(f"{m:.3f}" for m in means[n]) for n, _ in VIEWS) + f" (steps {args.save}). At step "
        f"{save[0]} the default view reads {means['default'][0] / means['folded'][0]:.2f} times the folded view."]
    _figure(table, save, args.figure)
    lines += ["", f"Figure: [{args.figure.name}](../docs/img/{args.figure.name})."]
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t_start})
    title = "Rotation drift during fine-tuning: raw, folded and default views"
    print(f"wrote {write_results(args.out, title, chr(10).join(lines), s)}")


def _figure(table: dict[str, dict[tuple[str, str], dict[int, tuple[float, float, float]]]], save: list[int],
            path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    for (name, _), style in zip(VIEWS, ("-o", "-s", "-^"), strict=True):
        rows = table[name]
        ax.plot(save, [sum(v[t][0] for v in rows.values()) / len(rows) for t in range(1, len(save) + 1)], style,
                label=f"{name} view")
    last = len(save)
    nulls = [v[last][1] for v in table["raw"].values()]
    ax.axhline(sum(nulls) / len(nulls), color="k", ls="--", lw=0.8, label="null (unrelated vectors)")
    ax.axhline(sum(v[last][2] for v in table["raw"].values()) / len(table["raw"]), color="k", ls=":", lw=0.8,
               label="random floor")
    ax.set_yscale("log")
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("rotation from the base (deg, mean)")
    ax.set_title("SmolLM2-135M fine-tuned: v1/u1 rotation from the base")
    ax.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
