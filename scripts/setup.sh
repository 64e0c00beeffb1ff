#!/usr/bin/env bash
# Set up a virtual environment in .venv with perfscope and its test dependencies.
# The CPU build of torch is installed first, pinned: an unpinned `torch` would pull a multi-GB CUDA build.
# On a GPU machine, install your CUDA torch build into .venv first and set PERFSCOPE_KEEP_TORCH=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
if [ -z "${PERFSCOPE_KEEP_TORCH:-}" ]; then
    python -m pip install --quiet "torch==2.13.0"
fi
# The frameworks perfscope adapts to (Lightning, transformers, HTA) are installed too: their tests run against the
# real libraries. The constraint keeps the installed torch: a framework asking for torch must not replace it.
python -c "import torch; print('torch==' + torch.__version__)" > .venv/torch-constraint.txt
python -m pip install --quiet -c .venv/torch-constraint.txt -e ".[test,integrations]"
python -c "import torch, perfscope; print(f'perfscope {perfscope.__version__} ready (torch {torch.__version__})')"
