"""``compress share``'s sharing evidence, side by side: this checkout's ``sharing_evidence`` against an earlier commit's.

The sharing evidence (``geodrift.compress.penalty``) was 160 s of the default ``compress share`` run's 1029 s
(benchmarks/RESULTS_compress_share.md). In output space it now uses spectra only: an unweighted output
basis's whitened error at rank r is the sum of its matrix's eigenvalues beyond r, and rotating a layer's
weights in output space leaves its private spectrum unchanged, so neither the factors, nor the error
products, nor the rotated layers' private units are computed there. This script loads the embedded
SmolLM2's default compress setup and first-draw calibration moments (cached in ``--cache``), then runs,
alternating, the previous implementation (``geodrift/compress/penalty.py`` at ``--baseline``, loaded from
git) and the current one on the same Compressor, for ``--roles`` (default every projection) at ratio 0.3,
and prints the seconds of each and the largest difference of every reported value, with the verdicts
(with ``--roles``, the rotations are seeded by each role's place in that list, the same in both).

Run::

    uptime; flock /tmp/geodrift-bench.lock python benchmarks/bench_sharing_evidence.py [--roles attn_o,mlp_gate] \\
        [--baseline f28ceb2] [--write-results benchmarks/RESULTS_sharing_evidence.md]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def previous_penalty(revision: str) -> types.ModuleType:
    """``geodrift.compress.penalty`` as it was at ``revision`` (a module of its own)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:geodrift/compress/penalty.py"], check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("penalty_previous")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{revision}:geodrift/compress/penalty.py", "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roles", default=None, help="comma-separated projections (default: all)")
    parser.add_argument("--baseline", default="f28ceb2", help="the commit whose sharing_evidence is compared")
    parser.add_argument("--cache", default="/tmp/geodrift-moments", help="calibration-moment cache folder")
    parser.add_argument("--ratio", type=float, default=0.3)
    parser.add_argument("--alternations", type=int, default=2, help="previous, now pairs (the faster of each kept)")
    parser.add_argument("--write-results", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from geodrift.compress import penalty
    from geodrift.compress.calibrate import cached_moments
    from geodrift.compress.methods import Compressor
    from geodrift.compress.sources import load_compress_setup

    old = previous_penalty(args.baseline)
    setup, texts = load_compress_setup(None, eval_count=8)
    moments, _ = cached_moments(setup.model, texts.draws[0], args.cache)
    roles = tuple(args.roles.split(",")) if args.roles else penalty.TRANSFORMER_ROLES
    # Each implementation gets a fresh Compressor (its unit cache starts empty, as in a run).
    results, seconds = {}, {}
    for name, module in [("previous", old), ("now", penalty)] * args.alternations:
        comp = Compressor(setup.model, moments, 2, {}, seed=0)
        start = time.perf_counter()
        out = [p for p in module.sharing_evidence(comp, args.ratio) if p.role in roles] if roles == \
            penalty.TRANSFORMER_ROLES else _some_roles(module, comp, args.ratio, roles)
        seconds.setdefault(name, []).append(time.perf_counter() - start)
        results[name] = out
    print(f"embedded SmolLM2-135M, default compress setup, first draw's moments; ratio {args.ratio:.0%}; roles "
          f"{', '.join(roles)}; 1 torch thread; {args.alternations} alternation(s)")
    print(f"previous ({args.baseline}): {min(seconds['previous']):.1f} s;  now: {min(seconds['now']):.1f} s;  "
          f"ratio {min(seconds['previous']) / min(seconds['now']):.2f}x")
    worst = 0.0
    same_verdicts = True
    for before, after in zip(results["previous"], results["now"], strict=True):
        for space in ("input", "output"):
            a, b = vars(before.spaces[space]), vars(after.spaces[space])
            for field, values in a.items():
                if isinstance(values, list):
                    diff = max((abs(x - y) for x, y in zip(values, b[field], strict=True)), default=0.0)
                    worst = max(worst, diff)
                    print(f"  {before.role:<9} {space:<6} {field:<17} largest difference {diff:.2e}")
        verdicts = ([v.verdict for v in before.verdicts], [v.verdict for v in after.verdicts])
        same_verdicts &= verdicts[0] == verdicts[1]
        print(f"  {before.role:<9} verdicts previous {verdicts[0]}, now {verdicts[1]}")
    print(f"largest difference of any value: {worst:.2e} (values are relative whitened errors and alignments); "
          f"verdicts {'identical' if same_verdicts else 'DIFFER'}")


def _some_roles(module: types.ModuleType, comp: object, ratio: float, roles: tuple[str, ...]) -> list[object]:
    # sharing_evidence over a subset of roles (their rotation seeds then follow the subset's order: the same in
    # both implementations, not the full run's).
    everything = module.TRANSFORMER_ROLES
    module.TRANSFORMER_ROLES = roles
    try:
        return list(module.sharing_evidence(comp, ratio))
    finally:
        module.TRANSFORMER_ROLES = everything


if __name__ == "__main__":
    from _stamp import run_main

    run_main(main, "compress share: the sharing evidence, before and after")
