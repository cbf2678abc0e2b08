#!/usr/bin/env bash
# GPU checks, run by hand on a machine with an NVIDIA GPU whose python3 has
# torch (CUDA), click, psutil, nvidia-ml-py and rich: the GPU-marked tests
# (including the transfer-bound scenario and a 2-rank CUDA sweep), a default
# (adaptive) sweep with --device cuda, the transfer-bound scenario,
# `dataprof inspect`, `dataprof run` of examples/train.py on the GPU with a
# GPU-utilisation gate, and a short `dataprof tune` of the same training (where
# the pin-memory thread and kernel launches compete with the workers).
# Results go to $OUT (default /tmp/dataprof-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=100
out="${OUT:-/tmp/dataprof-gpu}"
mkdir -p "$out"
status=0
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0))" || exit 1
python3 -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tee "$out/gpu-tests.log" || status=1
(cd examples && timeout 150 python3 -m dataprof sweep latency.py:RemoteReadDataset --device cuda --batch-size 64 \
    --step-ms 20 --trial-seconds 2 --json "$out/sweep-cuda.json") 2>&1 | tee "$out/sweep-cuda.txt" || status=1
(cd examples/scenarios && timeout 90 python3 -m dataprof sweep transfer_bound.py:FloatImages --workers 4 \
    --prefetch-factor 2 --pin-memory on,off --batch-size 64 --step-ms 2 --device cuda --trial-seconds 2 \
    --json "$out/transfer.json") 2>&1 | tee "$out/transfer.txt" || status=1
(cd examples && timeout 45 python3 -m dataprof inspect latency.py:RemoteReadDataset --samples 100 \
    --json "$out/inspect.json") 2>&1 | tee "$out/inspect.txt" || status=1
timeout 150 python3 -m dataprof run --max-steps 40 --min-gpu-util 1 --json "$out/run-cuda.json" \
    examples/train.py --device cuda --workers 2 2>&1 | tee "$out/run-cuda.txt" || status=1
timeout 180 python3 -m dataprof tune --budget 90 --trial-seconds 4 --json "$out/tune-cuda.json" \
    examples/train.py --device cuda --epochs 1000 --images 256 2>&1 | tee "$out/tune-cuda.txt" || status=1
exit $status
