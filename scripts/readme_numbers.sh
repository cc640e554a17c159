#!/usr/bin/env bash
# The commands behind every number in README.md. Run from the repository root after
# `bash scripts/setup.sh --test`. Times are for the shared 2-core CPU.
#
# `geodrift reproduce` runs the proofs, the embedded scan, every simulator preset (MLP tables 1/3/4,
# drift, App. F at 938 and 9,380 steps, the data-size experiment, the transformer ablations and the
# `mid` preset at full length) through the sweep runner, then `compress prune` and `compress share`,
# and writes out/reproduction/report.md (+ figures/, report.json). Each README table quotes the
# section command it came from (the same runs, bitwise). Full length is many hours on 2 cores;
# `--quick` is the reduced version. --resume reuses finished runs, so the script can be stopped and
# started again.
set -euo pipefail
cd "$(dirname "$0")/.."
G=.venv/bin/geodrift
PY=.venv/bin/python
mkdir -p out
# Everything the paper claims, in one report (hours; resumable)
OMP_NUM_THREADS=1 $G reproduce --out out/reproduction --resume --workers 2
# The scan's files and figure, and the proofs' Markdown appendix (seconds)
$G scan --json-out out/scan.json --csv out/scan.csv --plot out/scan.png
$G prove --markdown docs/proofs.md --plot out/proofs.png
# The quick reproduction (the README's timing row)
OMP_NUM_THREADS=1 $G reproduce --quick --out out/reproduction-quick --workers 2
# Benchmarks (minutes; the memory one writes a 4.6 GB checkpoint to a temp folder)
uptime; flock /tmp/geodrift-bench.lock $PY benchmarks/bench_scan_speed.py --repeats 1; uptime
# 8B shapes (writes 3.7 + 0.9 GB to a temp folder; needs `pip install weightwatcher`, a benchmark-only dependency)
uptime; $PY benchmarks/bench_scan_8b.py --layers 8 --ww-layers 2 --lock /tmp/geodrift-bench.lock --write-results benchmarks/RESULTS_scan.md
OMP_NUM_THREADS=1 $PY benchmarks/bench_scan_memory.py --layers 10 --write-results benchmarks/RESULTS_memory.md
OMP_NUM_THREADS=1 $PY benchmarks/bench_sim_mlp.py
OMP_NUM_THREADS=1 $PY benchmarks/bench_sim_transformer.py --preset cpu --steps 100 --rounds 3
OMP_NUM_THREADS=1 $PY benchmarks/bench_sweep.py --write-results benchmarks/RESULTS_sweep.md
# SmolLM2-135M held-out perplexity on the same held-out text, with its own tokenizer (built from the GGUF metadata)
OMP_NUM_THREADS=1 $PY -c "from geodrift.lm.text import load_corpus; from geodrift.pretrained import smollm2_perplexity; print(smollm2_perplexity(load_corpus().valid, 128, 32))"
# A training series and a model pair (about a minute): HF folders saved by the simulator, drift, compare
$G simulate transformer --preset tiny --out runs/series --save-hf-every 10 --no-smollm2 --resume > /dev/null
S=runs/series/tiny/seed42/hf
$G drift $S/step-000000 $S/step-000010 $S/step-000020 $S/step-000030 --plot out/drift.png --csv out/drift.csv --json-out out/drift.json
$G compare $S/step-000000 $S/step-000030 --k 4 --plot out/compare.png --json-out out/compare.json
# Verdict calibration (random-init models of every architecture, layer-shuffled SmolLM2; about 30 min at load 10)
nice -n 10 $PY benchmarks/bench_verdicts.py --seeds 2 --shuffles 4 --out benchmarks/RESULTS_verdicts.md
# Series cost against the number of checkpoints (timing: under the shared lock)
flock /tmp/geodrift-bench.lock $PY benchmarks/bench_series.py --out benchmarks/RESULTS_series.md
# CLI start-up (--help / --version vs import typer)
$PY benchmarks/bench_cli_startup.py
# Compression (issue 9): the default prune and share runs on the embedded SmolLM2, timed (each ~11 min
# of CPU with 1 thread; ~28 min wall at load 10-18), then their Markdown tables
flock /tmp/geodrift-bench.lock $PY benchmarks/bench_compress.py --out runs/compress
$PY benchmarks/compress_tables.py runs/compress/prune.json runs/compress/share.json
