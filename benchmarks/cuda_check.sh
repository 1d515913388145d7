#!/usr/bin/env bash
# On a machine with a CUDA GPU: the tests that need one, a short training run per mixer family on the GPU
# (--device auto), the zoo benchmark on cuda, stacked runs against sequential ones, and the whole suite with CUDA
# visible (on every core, with pytest-xdist). Run from a checkout: bash benchmarks/cuda_check.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
store=$(mktemp -d)/cuda_check.db
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: nothing to check')" || exit 2
"$PYTHON" -m pytest -q -rs tests/test_zoo.py tests/test_group.py -k cuda
for model in transformer lstm mamba; do
  "$PYTHON" -m sepbench run --task index_lookup --model "$model" --layers 1 --width 64 --length 20 --steps 1500 \
    --seed 0 --device auto --store "$store" --no-progress | tail -3
done
"$PYTHON" -m sepbench results --store "$store" --by-seed
"$PYTHON" benchmarks/zoo.py --device cuda
"$PYTHON" benchmarks/throughput.py --only _throughput_group
"$PYTHON" -m pytest -q -rs -n "$(nproc)" -p no:cacheprovider
