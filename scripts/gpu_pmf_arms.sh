#!/bin/bash
# Issue #61 on a GPU machine (the `device` tool's H100 / H200): scripts/pmf_cpu_arms.sh's two arms (each set's
# shipped faces pmf continued with pMF's perceptual loss, config/presets/pmf_ablation/ft_long_perceptual.yaml)
# resumed from their CPU resume states, and the other ARMS of both sets from the shipped weights, all at once,
# until they finish or SECONDS have passed. Measured on an H200 (2026-12-04): two arms at once, CUDA graphs,
# 12,800 steps each in about 355 s (about 39 steps/s each); four at once share the GPU (estimated 8 min in all).
#   here:  bash scripts/gpu_pmf_arms.sh send      the wheels the machine's Python lacks into .whl/ (git-ignored), and
#                                                 the arms' latest resume states in the place of the committed ones
#                                                 (training-states/pmf-ablation: they travel as tracked files)
#   there: bash scripts/gpu_pmf_arms.sh SECONDS   (run with carry [".whl"]; again on the same warm machine: it goes
#                                                 on from its own states)
#   here:  bash scripts/gpu_pmf_arms.sh unpack DIR   the committed states back (git checkout), DIR/<set>_<arm>.tar
#                                                 into runs/pmf-ablation/<set>/<arm>; then score each finished
#                                                 arm (`SET=S bash scripts/pmf_ablation.sh ARM --score-only`)
# The faces are rendered there and must be the bytes the states were trained on (the resume fingerprint checks
# them): the project's pinned render and MKL's AVX2 branch are tried, and the one whose training images hash to
# TRAIN_SHA256 is used; neither -> no training. $OUT (the device tool's output folder) gets <set>_<arm>.tar (the
# finished network folder, or the unfinished run's resume state) and the log; the arms run in runs/pmf-ablation
# (scripts/pmf_ablation.sh is called with its own OUT, never the tool's).
set -u
T0=$(date +%s)
RUNS=runs/pmf-ablation ARM=ft_long_perceptual SETS="ref1 ref2"
# the arms trained there: the CPU arm (resumed from its state) and, by default, the same at a third of its lr
ARMS=${ARMS:-ft_long_perceptual ft_long_perceptual_lowlr}
KEEP=training-states/pmf-ablation
state() { echo "$1/$2/$ARM/train-012800/checkpoint/state.pt"; }
case "${1:?usage: scripts/gpu_pmf_arms.sh send | SECONDS | unpack DIR}" in
  send)
    grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
    rm -rf .whl; mkdir -p .whl
    # the image has torch, numpy, safetensors, huggingface-hub 1.x (its transformers needs < 2: not carried)
    for p in diffusers importlib-metadata jsonschema jsonschema-specifications referencing rpds-py; do
      v=$(.venv/bin/pip show "$p" | sed -n 's/^Version: //p')
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$p==$v" 2>&1 | grep -v '^WARNING' || true
    done
    for set in $SETS; do [ -f "$(state "$RUNS" "$set")" ] && cp "$(state "$RUNS" "$set")" "$(state "$KEEP" "$set")"; done
    du -sh .whl; git status --short "$KEEP"; exit 0 ;;
  unpack)
    git checkout -- "$KEEP"
    ls "${2:?unpack DIR}"/ref*_*.tar >/dev/null || exit 1
    pkill -f "models curve" && sleep 3  # the CPU arms, if running: the GPU's states are the later ones
    for f in "$2"/ref*_*.tar; do  # <set>_<arm>.tar (logs.tar: the logs)
      b=$(basename "$f" .tar); set=${b%%_*}; arm=${b#*_}
      mkdir -p "$RUNS/$set/$arm" && tar xf "$f" -C "$RUNS/$set/$arm" && echo "$set/$arm: unpacked"
    done
    exit 0 ;;
  *[!0-9]*) echo "usage: scripts/gpu_pmf_arms.sh send | SECONDS | unpack DIR" >&2; exit 2 ;;
esac
secs=$1
export PYTHONUNBUFFERED=1
DEST=${OUT:-runs/gpu-pmf-arms}; mkdir -p "$DEST/logs"
unset OUT
L=$DEST/logs  # packed into one logs.tar at the end (the tool brings back 8 files at most)
TRAIN_SHA256=${TRAIN_SHA256:-fea25e1f1e161f8817fe85090f91c9cb9da06e82d9ac831271b1880d2c935201}
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$DEST/gpu_pmf_arms.log"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >"$L/pip.log" 2>&1 || { tail -5 "$L/pip.log"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/site/bin
printf '#!/bin/sh\nexec python3 -c "import sys; from vcebench.cli import main; sys.exit(main())" "$@"\n' >/tmp/site/bin/vcebench
chmod +x /tmp/site/bin/vcebench
export PATH=/tmp/site/bin:$PATH
log "$(nvidia-smi -L | head -1); $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(nproc) cores"
RUNS=$RUNS KEEP=$KEEP bash scripts/training_states.sh restore >>"$L/restore.log" 2>&1

data=$RUNS/ref1/data/synthfaces
images_sha() { python3 -c "import hashlib, numpy, sys; print(hashlib.sha256(numpy.load(sys.argv[1])['images'].tobytes()).hexdigest())" "$1"; }
if [ ! -f "$data/train.npz" ] || [ "$(images_sha "$data/train.npz")" != "$TRAIN_SHA256" ]; then
  vcebench data render synthfaces --out /tmp/render/pinned --config config/config.yaml >"$L/render_pinned.log" 2>&1 &
  VCEBENCH_CPU_ISA=native MKL_CBWR=AVX2 vcebench data render synthfaces --out /tmp/render/avx2 \
    --config config/config.yaml >"$L/render_avx2.log" 2>&1 &
  wait
  found=
  for v in pinned avx2; do
    [ -f "/tmp/render/$v/train.npz" ] && [ "$(images_sha "/tmp/render/$v/train.npz")" = "$TRAIN_SHA256" ] && { found=$v; break; }
  done
  [ -n "$found" ] || { log "no render matches the states' training images: not training"; exit 4; }
  log "render '$found' matches the states' training images"
  for set in $SETS; do mkdir -p "$RUNS/$set/data"; rm -rf "$RUNS/$set/data/synthfaces"; cp -r "/tmp/render/$found" "$RUNS/$set/data/synthfaces"; done
fi
for set in $SETS; do
  OUT=$RUNS SET=$set bash scripts/pmf_ablation.sh prepare >"$L/prepare_$set.log" 2>&1 || { log "prepare $set failed"; tail -20 "$L/prepare_$set.log"; exit 5; }
done
log "prepared"

overlay() { printf 'device: cuda\nthreads: 4\ntrain_threads: 4\ncuda: {train_graphs: %s}\n' "$1" >"/tmp/gpu_$1.yaml"; }
overlay true; overlay false
declare -A pid mode
jobs=()
for set in $SETS; do for arm in $ARMS; do jobs+=("$set/$arm"); done; done
launch() {  # set/arm, graphs true|false
  OUT=$RUNS SET=${1%/*} EXTRA=/tmp/gpu_$2.yaml bash scripts/pmf_ablation.sh "${1#*/}" --train-only \
    >>"$L/train_${1/\//_}.log" 2>&1 &
  pid[$1]=$!; mode[$1]=$2
  log "$1: training (CUDA graphs $2)"
}
finished() { [ -f "$RUNS/$1/train-012800/metrics.json" ]; }
for j in "${jobs[@]}"; do finished "$j" || launch "$j" true; done
while [ $(( $(date +%s) - T0 )) -lt "$secs" ]; do
  running=0
  for j in "${jobs[@]}"; do
    [ -n "${pid[$j]:-}" ] || continue
    if kill -0 "${pid[$j]}" 2>/dev/null; then running=1; continue; fi
    wait "${pid[$j]}"; rc=$?; unset "pid[$j]"
    if [ "$rc" != 0 ] && [ "${mode[$j]}" = true ]; then  # a graphed run that failed goes on eagerly
      log "$j: exit $rc with CUDA graphs; eager from its last state"; tail -5 "$L/train_${j/\//_}.log"; launch "$j" false
      running=1
    else log "$j: exit $rc"; fi
  done
  [ "$running" = 1 ] || break
  sleep 5
done
pkill -f "models curve" && sleep 3  # an unfinished arm resumes from its last state (every 100 steps)
for j in "${jobs[@]}"; do
  step=$(tr '\r' '\n' <"$L/train_${j/\//_}.log" 2>/dev/null | grep -o 'train pmf: .* [0-9]*/12800' | tail -1 | grep -o '[0-9]*/12800')
  log "$j: $(finished "$j" && echo finished || echo "stopped at $step")"
  if finished "$j"; then tar cf "$DEST/${j/\//_}.tar" -C "$RUNS/$j" --exclude=checkpoint train-012800
  else tar cf "$DEST/${j/\//_}.tar" -C "$RUNS/$j" --exclude='*.stale' train-012800/checkpoint; fi
done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader | head -1
tar cf "$DEST/logs.tar" -C "$DEST" logs && rm -rf "$L"
log "packed"
