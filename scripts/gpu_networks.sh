#!/bin/bash
# On a GPU machine (the `device` tool's H100 / H200), from the project root: the generators' plateau runs of
# scripts/gpu_networks.py (both network sets, in the background) within a lease of a few minutes.
#   bash scripts/gpu_networks.sh start SECONDS   install, check CUDA-graph training against eager training
#                                                (tests/test_step_graphs.py), start the runs, pack what finished
#                                                after SECONDS into $OUT; the runs go on (setsid)
#   bash scripts/gpu_networks.sh finish SECONDS  (a later call on the same machine) wait up to SECONDS, stop the
#                                                runs, pack again
# Expects .gpu/whl/ (the wheels the machine's Python lacks: diffusers less its pipelines, jsonschema and their
# needs) and .gpu/data/<dataset>/{train,val}.npz (rendered here: `vcebench data render <dataset>`). Back here:
# python scripts/gpu_networks.py unpack <files_at>/networks.tar.part* --into runs/gpu-networks
# PLAN=ablation: the faces pmf recipe ablation instead (scripts/pmf_ablation.sh's arms of both sets, 8 at once;
# docs/networks.md "The pmf recipe ablation"); unpacked, each arm is scored here with
# `SET=ref1 OUT=runs/gpu-networks/ablation bash scripts/pmf_ablation.sh <arm> --score-only`.
set -u
PLAN=${PLAN:-plateau}
export PYTHONUNBUFFERED=1
OUT=${OUT:-runs/gpu-networks}; mkdir -p "$OUT"
WORK=/tmp/gpunets; mkdir -p "$WORK"
T0=$(date +%s)
verb=${1:?start|finish}; secs=${2:?seconds}
if [ "$verb" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpu/whl/*.whl >"$OUT/pip.log" 2>&1 || { tail -5 "$OUT/pip.log"; exit 3; }
fi
export PYTHONPATH=/tmp/site:$PWD
if [ "$verb" = start ]; then
  nvidia-smi -L; nproc
  python3 -c "import torch, diffusers, numpy; print('torch', torch.__version__, 'diffusers', diffusers.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name())"
  graphs=1
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_step_graphs.py 2>&1 | tail -15 | tee "$OUT/graphs_test.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { graphs=0; echo "CUDA-graph training check failed: the runs train eagerly"; }
  # one graphed process alone: if it runs more than twice the ~110 steps/s that 8 processes sharing an H200 ran
  # together, 2 jobs at a time (one computes while the other writes or evaluates), else all 8 at once
  rate=$(timeout 90 python3 scripts/gpu_networks.py probe --graphs "$graphs" --work "$WORK" 2>"$OUT/probe.log" || echo 0)
  parallel=8; awk "BEGIN{exit !($rate > 220)}" && parallel=2
  echo "graphs=$graphs, one process alone $rate steps/s: $parallel jobs at a time, after $(( $(date +%s) - T0 )) s"
  setsid nohup python3 scripts/gpu_networks.py train --plan "$PLAN" --graphs "$graphs" --parallel "$parallel" --work "$WORK" \
    >"$WORK/driver.log" 2>&1 &
  # this machine's CPU against the committed fingerprints (docs/internals.md: which kernels round differently)
  timeout 90 python3 scripts/kernel_fingerprint.py --out "$OUT/kernels.json" $(printf -- '--compare %s ' docs/kernels/*.json) \
    >"$OUT/kernels.log" 2>&1 || true
fi
while [ $(( $(date +%s) - T0 )) -lt "$secs" ] && [ ! -f "$WORK/done.json" ]; do sleep 5; done
[ "$verb" = finish ] && python3 scripts/gpu_networks.py stop --work "$WORK"
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
python3 scripts/gpu_networks.py pack --plan "$PLAN" --work "$WORK" --out "$OUT"
echo "packed after $(( $(date +%s) - T0 )) s"
