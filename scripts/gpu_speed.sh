#!/usr/bin/env bash
# The GPU speed measurement in one command (under 8 minutes on one H100 / H200); docs/internals.md
# ("GPU speed check") says what it measures.
#   scripts/gpu_speed.sh [--tiny]     logs in $OUT (default results/speed_gpu)
# 1. vcebench profile gpu (vcebench/paper/timing.py) on the plan scripts/gpu_speed_plan.json, FiRe with its
#    released PMF backbone (DiT-B/8 at 128 px): FiRe with all 15, 10 and 3 updates (early stopping off) and
#    MaskDiME (one scale, 60 of 200 steps), at batch 5 and larger batches, with the workflow's GPU defaults,
#    bf16 UNets and every network call compiled; 3 timed passes a row (median), achieved TFLOP/s and share
#    of the GPU's peak. It writes results/reference/gpu/<date>_<gpu>.{md,json} (--tiny: $OUT/gpu/).
# 2. the quick DAG with device: cuda (its own workdir), and its s/CF per method beside the CPU
#    reference (results/reference/quick).
# --tiny: the same code paths on the CPU in a few minutes (small networks and plan, DAG dry run).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-results/speed_gpu}"
TINY=0
[[ "${1:-}" == "--tiny" ]] && TINY=1
mkdir -p "$OUT"
{ date -u; command -v nvidia-smi >/dev/null && nvidia-smi -L || true
  python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
} > "$OUT/machine.txt" 2>&1

# <date>_<gpu>: the GPU's name as nvidia-smi gives it, lower case, non-alphanumerics as "-" (a CPU: "cpu")
GPU=cpu
if [[ $TINY == 0 ]] && command -v nvidia-smi >/dev/null; then
  GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-$//')
fi
NAME="$(date -u +%F)_${GPU:-gpu}"
if [[ $TINY == 1 ]]; then
  SPEED_OUT="$OUT/gpu"
  vcebench profile gpu --tiny --device cpu --plan scripts/gpu_speed_plan.json --repeats 1 \
    --compile-backend aot_eager --out "$SPEED_OUT" --name "$NAME"
  snakemake -n --quiet --configfile config/presets/quick.yaml --config device=cuda workdir=runs/quick_cuda \
    > "$OUT/quick_cuda_dryrun.txt"
  WORK=results/reference/quick  # compares the reference with itself: exercises the table code
else
  SPEED_OUT=results/reference/gpu
  timeout 330 vcebench profile gpu --plan scripts/gpu_speed_plan.json --repeats 3 \
    --time-limit 240 --out "$SPEED_OUT" --name "$NAME" 2>&1 | tee "$OUT/profile_gpu.log" || echo "profile gpu stopped: $?"
  timeout 120 snakemake --cores 16 --resources gpu=1 --configfile config/presets/quick.yaml \
    --config device=cuda workdir=runs/quick_cuda > "$OUT/quick_cuda.log" 2>&1 || echo "quick DAG stopped: $?"
  WORK=runs/quick_cuda/results
fi
python - "$WORK" results/reference/quick "$OUT/quick_cuda_vs_cpu.md" <<'PY'
import csv, sys
from pathlib import Path
gpu, cpu, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
lines = ["| task | method | s/CF GPU | s/CF CPU (reference) | GPU faster |", "|---|---|---:|---:|---|"]
for ref in sorted(cpu.glob("*.csv")):
    mine = gpu / ref.name
    if not mine.exists():
        lines.append(f"| {ref.stem} | (no GPU result) | | | |")
        continue
    sec = lambda r: float(r["sec_per_cf"] or "nan")  # the reference rows (ground truth) have no time
    c = {r["method"]: sec(r) for r in csv.DictReader(ref.open())}
    for r in csv.DictReader(mine.open()):
        g = sec(r)
        lines.append(f"| {ref.stem} | {r['method']} | {g:.4f} | {c.get(r['method'], float('nan')):.4f} | "
                     f"{'yes' if g < c.get(r['method'], 0) else 'no'} |")
out.write_text("\n".join(lines) + "\n")
print(out.read_text())
PY
cat "$SPEED_OUT/$NAME.md"
