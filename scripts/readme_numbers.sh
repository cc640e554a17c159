#!/usr/bin/env bash
# The commands behind every number in README.md. Run from the repository root after
# `bash scripts/setup.sh --test`. Times are for the shared 2-core CPU.
#
# Every results file is generated and stamped (commit, CPU, threads, load, versions, wall times; see
# geodrift/io/provenance.py): `geodrift reproduce --quick` writes docs/results/ (committed; the numbers
# README.md and docs/*.md quote), the full `geodrift reproduce` writes out/reproduction/ (every
# simulator and compression section at full length: many hours on 2 cores), and each benchmark
# writes its own benchmarks/RESULTS_*.md. --resume reuses finished runs, so the script can be
# stopped and started again.
set -euo pipefail
cd "$(dirname "$0")/.."
G=.venv/bin/geodrift
PY=.venv/bin/python
mkdir -p out
# The committed results: docs/results/ (9-15 min on 2 cores; --force replaces the previous report)
OMP_NUM_THREADS=1 $G reproduce --quick --out docs/results --force --workers 2
# Everything the paper claims at full length, in one report (hours; resumable)
OMP_NUM_THREADS=1 $G reproduce --out out/reproduction --resume --workers 2
# The scan's files and figure, and the proofs' Markdown appendix (seconds)
$G scan --json-out out/scan.json --csv out/scan.csv --plot out/scan.png
$G prove --markdown docs/proofs.md --plot out/proofs.png
# Benchmarks: each writes its benchmarks/RESULTS_*.md (minutes; the memory one writes a 4.6 GB checkpoint to a temp folder)
flock /tmp/geodrift-bench.lock $PY benchmarks/bench_scan_speed.py --repeats 1
# 8B shapes (writes 3.7 + 0.9 GB to a temp folder; needs `pip install weightwatcher`, a benchmark-only dependency)
$PY benchmarks/bench_scan_8b.py --layers 8 --ww-layers 2 --lock /tmp/geodrift-bench.lock
OMP_NUM_THREADS=1 $PY benchmarks/bench_scan_memory.py --layers 10 --write-results benchmarks/RESULTS_memory.md
OMP_NUM_THREADS=1 $PY benchmarks/bench_sim_mlp.py
OMP_NUM_THREADS=1 $PY benchmarks/bench_sim_transformer.py --preset cpu --steps 100 --rounds 3
flock /tmp/geodrift-bench.lock $PY benchmarks/bench_sweep.py
# SmolLM2-135M held-out perplexity on the same held-out text, with its own tokenizer (built from the GGUF metadata)
OMP_NUM_THREADS=1 $PY -c "from geodrift.lm.text import load_corpus; from geodrift.pretrained import smollm2_perplexity; print(smollm2_perplexity(load_corpus().valid, 128, 32))"
# A training series and a model pair (about a minute): HF folders saved by the simulator, drift, compare
$G simulate transformer --preset tiny --out runs/series --save-hf-every 10 --no-smollm2 --resume > /dev/null
S=runs/series/tiny/seed42/hf
$G drift $S/step-000000 $S/step-000010 $S/step-000020 $S/step-000030 --plot out/drift.png --csv out/drift.csv --json-out out/drift.json
$G compare $S/step-000000 $S/step-000030 --k 4 --plot out/compare.png --json-out out/compare.json
# Verdict calibration (random-init models of every architecture, layer-shuffled SmolLM2; about 30 min at load 10)
nice -n 10 $PY benchmarks/bench_verdicts.py --seeds 2 --shuffles 4
# Series cost against the number of checkpoints (timing: under the shared lock)
flock /tmp/geodrift-bench.lock $PY benchmarks/bench_series.py
# CLI start-up (--help / --version vs import typer)
flock /tmp/geodrift-bench.lock $PY benchmarks/bench_cli_startup.py
flock /tmp/geodrift-bench.lock $PY benchmarks/bench_test_command.py
# Compression: the default prune and share runs on the embedded SmolLM2, timed, with their tables
flock /tmp/geodrift-bench.lock $PY benchmarks/bench_compress.py --out runs/compress
# Fuzzing the readers (6,000 mutated files)
nice -n 10 $PY benchmarks/fuzz_readers.py --cases 6000 --seed 2026
