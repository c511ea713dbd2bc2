#!/bin/bash
# On a GPU machine (e.g. the `device` tool's H100), from the project root: train the synthetic benchmark's
# generators with their training curves (scripts/gpu_networks.py) within BUDGET seconds of training.
#   OUT=<folder> bash scripts/gpu_networks.sh [BUDGET]
# Expects .gpu/whl/ (the wheels the machine's Python lacks: diffusers, jsonschema and their needs) and
# .gpu/data/<dataset>/{train,val}.npz (rendered here: `vcebench data render <dataset>`).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-runs/gpu-networks}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
  >"$OUT/pip.log" 2>&1 || { tail -5 "$OUT/pip.log"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L; nproc
python3 -c "import torch, diffusers, numpy, scipy; print('torch', torch.__version__, 'diffusers', diffusers.__version__, 'numpy', numpy.__version__, 'scipy', scipy.__version__, torch.cuda.get_device_name())"
python3 scripts/gpu_networks.py --budget "${1:-300}" --out "$OUT" "${@:2}" 2>&1 | grep -v "it/s" | tee "$OUT/driver.log"
exit "${PIPESTATUS[0]}"
