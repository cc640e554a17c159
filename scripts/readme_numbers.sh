#!/usr/bin/env bash
# The commands behind every number in README.md, in the order the README shows them.
# Run from the repository root after `bash scripts/setup.sh --test`. Times are for a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
G=.venv/bin/geodrift
PY=.venv/bin/python
mkdir -p out
# Scan table (seconds): JSON, summary CSV + per-pair CSV (out/scan.pairs.csv), figure
$G scan --json-out out/scan.json --csv out/scan.csv --plot out/scan.png
# Proofs (seconds), their Markdown appendix and the figure of the numeric cross-checks
$G prove --markdown docs/proofs.md --plot out/proofs.png
# Benchmarks (minutes; the memory one writes a 4.6 GB checkpoint to a temp folder)
uptime; flock /tmp/geodrift-bench.lock $PY benchmarks/bench_scan_speed.py --repeats 1; uptime
# 8B shapes (writes 3.7 + 0.9 GB to a temp folder; needs `pip install weightwatcher`, a benchmark-only dependency)
uptime; $PY benchmarks/bench_scan_8b.py --layers 8 --ww-layers 2 --lock /tmp/geodrift-bench.lock --write-results benchmarks/RESULTS_scan.md
OMP_NUM_THREADS=1 $PY benchmarks/bench_scan_memory.py --layers 10 --write-results benchmarks/RESULTS_memory.md
OMP_NUM_THREADS=1 $PY benchmarks/bench_sim_mlp.py
OMP_NUM_THREADS=1 $PY benchmarks/bench_sim_transformer.py --preset cpu --steps 100 --rounds 3
# MLP reproductions (table1 at 938 steps x 3 seeds: ~20 min on a free 2-core CPU; table3; drift)
OMP_NUM_THREADS=1 $G simulate mlp --preset table1 --steps 938 --out runs/t1 --resume --threads 1
OMP_NUM_THREADS=1 $G simulate mlp --preset table1 --seeds 42 --out runs/t1full --resume --threads 1
OMP_NUM_THREADS=1 $G simulate mlp --preset table3 --seeds 42 --steps 938 --out runs/t3 --resume --threads 1
OMP_NUM_THREADS=1 $G simulate mlp --preset drift --seeds 42 --steps 4690 --out runs/drift --resume --threads 1 --plot runs/drift/plots
# Transformer (cpu preset, ~3-5 min per run on a free CPU): baseline and the three ablations, 2 seeds
for abl in "" "--ablation none" "--ablation linear_attn" "--ablation v_silu"; do
  for seed in 42 43; do
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 $G simulate transformer --preset cpu $abl --seeds $seed --out runs/transformer --resume --json --no-smollm2 > /dev/null
  done
  # shellcheck disable=SC2086
  COLUMNS=230 $G simulate transformer --preset cpu $abl --seeds 42,43 --out runs/transformer --resume --plot runs/transformer/plots
done
# SmolLM2-135M held-out perplexity on the same held-out text, with its own tokenizer (built from the GGUF metadata)
OMP_NUM_THREADS=1 $PY -c "from geodrift.sim.text import load_corpus; from geodrift.pretrained import smollm2_perplexity; print(smollm2_perplexity(load_corpus().valid, 128, 32))"
# CLI start-up (--help / --version vs import typer)
$PY benchmarks/bench_cli_startup.py
