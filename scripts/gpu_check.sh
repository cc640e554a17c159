#!/usr/bin/env bash
# The GPU route in under 5 minutes, for the day a device is lent (issue 22). Checks, each against the CPU:
#   1. the batched MLP ensemble on CUDA vs the CPU ensemble (member-steps/s; target >= 5x),
#   2. the `paper` transformer preset for a fixed number of steps on CUDA (training tokens/s),
#   3. a scan with --device cuda (the embedded SmolLM2's SVD stage and one 8B-shaped 14336 x 4096 matrix:
#      wall time and the agreement of the two devices' top-8 vectors),
#   and `geodrift scan --device cuda` end to end through the command line.
# Writes benchmarks/RESULTS_gpu.md (one file, stamped with commit, CPU, GPU, threads, load). Needs a CUDA
# build of torch in .venv (install it before scripts/setup.sh, which keeps an installed torch).
# Status: written without a GPU in the session that wrote it - NOT RUN yet.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
start=$(date +%s)
timeout 240 "$PY" benchmarks/bench_gpu.py --members 16 --ens-steps 300 --tf-steps 200 --out benchmarks/RESULTS_gpu.md
timeout 50 "$PY" -m geodrift scan --device cuda --brief -q > /dev/null
echo "- \`geodrift scan --device cuda --brief -q\` (embedded SmolLM2, end to end): exit 0" >> benchmarks/RESULTS_gpu.md
echo "gpu_check: done in $(( $(date +%s) - start )) s; results in benchmarks/RESULTS_gpu.md"
