"""Issue 38's Done-when on the embedded SmolLM2: drift and compare in the default view move like the raw view,
an exact gauge of the perturbed copy changes no number, and alignment recovers a random exact gauge.

Writes the embedded SmolLM2-135M as a Hugging Face folder (float32, all 30 layers, through
``geodrift.lm.hf.save_hf``), and beside it: a copy with Gaussian noise of 1e-3 (relative to each matrix's own
standard deviation) on every matrix, a copy with that noise on the token embedding alone, and the first copy put
through a random exact gauge of every generator (``random_gauge``: a residual rotation, V/O maps of condition
100, Q/K and signed Up/Down log-scales of sigma 1, hidden and head permutations). Then, side by side in one
run:

1. ``drift base copy`` and ``compare base copy`` in the default view, ``--view raw`` and ``--view folded``:
   the mean and largest angle (drift: v1/u1 rotation; compare: principal angles of the top-k subspaces);
2. the default view's numbers of ``base`` against the gauged copy beside those against the plain copy: the
   largest difference of any ``|cos|`` (and of the overlaps);
3. ``geodrift.gauge.align.align`` of the embedded model against its random exact gauge (signed scales, head
   permutations, V/O condition 100, RoPE pair maps), the gauge applied in float32 and in float64: the relative
   weight error left and the share of hidden units matched as mutual best.

Usage (writes ``--out``, default benchmarks/RESULTS_series_gauge.md, stamped):
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_series_gauge.py
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from geodrift.continuity import MeasureSpec
from geodrift.gauge.align import align, shape_of
from geodrift.gauge.orbit import random_gauge
from geodrift.io.provenance import check_results_path, command_line, load_average, stamp, write_results
from geodrift.lm.hf import save_hf
from geodrift.pretrained import llama_from_checkpoint, open_llama
from geodrift.scanner.aligned import checkpoint_state_dict
from geodrift.scanner.readers import open_checkpoint
from geodrift.scanner.series import compare, drift

VIEWS = (None, "raw", "folded")


def perturbed(sd: dict[str, torch.Tensor], eps: float, embedding_only: bool, seed: int) -> dict[str, torch.Tensor]:
    """Every matrix (or the token embedding alone) plus Gaussian noise of ``eps`` times its own std."""
    g = torch.Generator().manual_seed(seed)
    return {k: v + eps * v.std() * torch.randn(v.shape, generator=g)
            if v.ndim == 2 and (not embedding_only or k == "model.embed_tokens.weight") else v.clone()
            for k, v in sd.items()}


def write(folder: Path, sd: dict[str, torch.Tensor], config: str) -> str:
    folder.mkdir(parents=True)
    save_file({k: v.to(torch.float32).contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(config.replace('"tie_word_embeddings": true', '"tie_word_embeddings": '
                                                       + ("false" if "lm_head.weight" in sd else "true")))
    return str(folder)


def angles(a: str, b: str, view: str | None, spec: MeasureSpec) -> tuple[list[float], list[float], float]:
    t0 = time.perf_counter()
    d = [r.angle_deg for r in drift([a, b], spec, view=view).rotation]
    c = [x for r in compare(a, b, spec, view=view).subspaces for x in r.principal_angles_deg]
    return d, c, time.perf_counter() - t0


def numbers(a: str, b: str, spec: MeasureSpec) -> dict[tuple[str, ...], float]:
    out = {("drift", r.role, r.space, str(r.layer)): r.abs_cos for r in drift([a, b], spec).rotation}
    for s in compare(a, b, spec).subspaces:
        out[("overlap", s.role, s.space, str(s.layer))] = s.overlap
        for i, angle in enumerate(s.principal_angles_deg):
            out[("compare", s.role, s.space, str(s.layer), str(i))] = math.cos(math.radians(angle))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--eps", type=float, default=1e-3)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--null-draws", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/RESULTS_series_gauge.md"))
    args = parser.parse_args()
    check_results_path(args.out)
    torch.set_num_threads(1)
    t_start, load_before = time.perf_counter(), load_average()
    spec = MeasureSpec(k=args.k, null_draws=args.null_draws)
    lines = [f"The embedded SmolLM2-135M written as a Hugging Face folder (float32, 30 layers); noise {args.eps:g} of "
             f"each matrix's std; k = {args.k}, {args.null_draws} null draws, seed 0; 1 torch thread.", "",
             "| copy | view | drift mean angle | drift max | compare mean angle | compare max | seconds |",
             "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = save_hf(llama_from_checkpoint(open_llama(None)), root / "base")
        config = (base / "config.json").read_text()
        sd = load_file(base / "model.safetensors")
        noisy = perturbed(sd, args.eps, False, 1)
        copies = {f"noise {args.eps:g} on every matrix": write(root / "all", noisy, config),
                  f"noise {args.eps:g} on the embedding only": write(root / "embed", perturbed(sd, args.eps, True, 2),
                                                                     config)}
        for name, path in copies.items():
            for view in VIEWS:
                d, c, seconds = angles(str(base), path, view, spec)
                lines.append(f"| {name} | {view or 'default'} | {sum(d) / len(d):.4f} | {max(d):.3f} | "
                             f"{sum(c) / len(c):.4f} | {max(c):.3f} | {seconds:.1f} |")
                print(lines[-1], flush=True)
        shape = shape_of(sd, 9, 3)
        gauged = random_gauge({k: v.double() for k, v in noisy.items()}, shape, torch.Generator().manual_seed(2026),
                              condition=100.0, sigma=1.0)
        plain = numbers(str(base), copies[f"noise {args.eps:g} on every matrix"], spec)
        other = numbers(str(base), write(root / "gauged", gauged, config), spec)
        worst = max(plain, key=lambda key: abs(plain[key] - other[key]))
        lines += ["", f"Default view, base against the noisy copy and against the same copy under a random exact gauge "
                      f"(every generator, V/O condition 100, signed log-scales sigma 1): {len(plain)} numbers, largest "
                      f"difference {abs(plain[worst] - other[worst]):.2e} ({' '.join(worst)}).", "",
                  "| alignment of the embedded model to its random exact gauge | relative weight error left | units "
                  "matched as mutual best | units with a sign flip | seconds |", "|---|---|---|---|---|"]
        print(lines[-3], flush=True)
    model = checkpoint_state_dict(open_checkpoint(None))
    shape = shape_of(model, 9, 3)
    for dtype in (torch.float32, torch.float64):
        wide = {k: v.to(torch.float64) for k, v in model.items()}
        moved = {k: v.to(dtype) for k, v in random_gauge(wide, shape, torch.Generator().manual_seed(0),
                                                             condition=100.0, sigma=1.0).items()}
        t0 = time.perf_counter()
        _, _, rep = align(wide, moved, shape)
        seconds = time.perf_counter() - t0
        mutual = min(x.mutual_best_share for x in rep.layers)
        flips = sum(x.sign_flip_share for x in rep.layers) / len(rep.layers)
        lines.append(f"| gauge applied in {str(dtype).removeprefix('torch.')} | {rep.aligned_weight_error:.2e} | "
                     f"{100 * mutual:.1f} % (least over 30 layers) | {100 * flips:.1f} % | {seconds:.1f} |")
        print(lines[-1], flush=True)
    s = stamp(command_line(), load_before=load_before, wall_s={"total": time.perf_counter() - t_start})
    title = "Drift and compare in the default view: exact and continuous (issue 38)"
    print(f"wrote {write_results(args.out, title, chr(10).join(lines), s)}")


if __name__ == "__main__":
    main()
