#!/bin/bash
# Issue #61's CPU path: each set's shipped faces pmf continued to the DDPM's budget (25,600 steps in all) with pMF's
# perceptual loss (config/presets/pmf_ablation/ft_long_perceptual.yaml), ref1 and ref2 side by side, one thread
# each, niced, in the background; a resume state every 100 steps. On 2 idle cores an arm is ~2.2 s per step.
#   bash scripts/pmf_cpu_arms.sh start   restore the committed states (training-states/pmf-ablation) where runs/ has
#                                        none, render the data and install the gate's networks, start both arms
#   bash scripts/pmf_cpu_arms.sh status  each arm's last logged step
#   bash scripts/pmf_cpu_arms.sh save    stop both arms and copy their resume states to training-states/pmf-ablation
#                                        (about 10 MB per arm; commit it at most once a day)
#   bash scripts/pmf_cpu_arms.sh score   once an arm has finished: score it (vcebench models curve --score-only,
#                                        the gate's numbers) and print the ablation table of its set
#   bash scripts/pmf_cpu_arms.sh ship S  ship set S's finished arm as its faces pmf (scripts/ship_cpu_networks.sh:
#                                        `models check` on the whole set, then a new card; the replaced network ships
#                                        beside it as start.safetensors and is named in the card's history). The
#                                        config's faces pmf recipe must be the arm's first (docs/networks.md)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ARM=${ARM:-ft_long_perceptual}  # `ship` of another scored arm: ARM=<arm> WHERE="<where it trained>"
SETS="ref1 ref2"
RUNS=runs/pmf-ablation
KEEP=training-states/pmf-ablation
export EXTRA=config/presets/pmf_ablation/one_thread.yaml OMP_NUM_THREADS=1
[ -d .venv ] && PATH="$ROOT/.venv/bin:$PATH"
case "${1:?usage: scripts/pmf_cpu_arms.sh start|status|save|score|ship SET}" in
  start)
    mkdir -p "$RUNS"
    [ -d "$KEEP" ] && RUNS=$RUNS KEEP=$KEEP bash scripts/training_states.sh restore
    for set in $SETS; do
      if pgrep -f "pmf-ablation/$set/$ARM" >/dev/null; then echo "$set: already running"; continue; fi
      # The committed states were trained on the faces rendered on a 2-core AMD EPYC. The render goes through MKL,
      # and the project's pin (MKL_CBWR=COMPATIBLE) renders 46 of its 25.8 M training pixel values (in 45 of 8,400 images) 1 apart on an
      # Intel Xeon, so the resume fingerprint rejects the states there; MKL's AVX2 branch renders the AMD bytes on
      # the Intel CPU (both states' fingerprints match; on the AMD CPU this render is not yet checked against them).
      # Rendered here so, before `prepare` finds the split.
      data=$RUNS/$set/data/synthfaces
      [ -f "$data/train.npz" ] || VCEBENCH_CPU_ISA=native MKL_CBWR=AVX2 vcebench data render synthfaces --out "$data" \
        --config config/config.yaml >"$RUNS/render_$set.log" 2>&1
      ( SET=$set bash scripts/pmf_ablation.sh prepare >"$RUNS/prepare_$set.log" 2>&1 \
        && SET=$set nice -n 15 bash scripts/pmf_ablation.sh "$ARM" --train-only >"$RUNS/${ARM}_$set.log" 2>&1 ) &
      echo "$set: started (log $RUNS/${ARM}_$set.log)"
    done ;;
  status)
    for set in $SETS; do
      printf '%s: ' "$set"; tail -c 400 "$RUNS/${ARM}_$set.log" 2>/dev/null | tr '\r' '\n' | grep 'train pmf' | tail -1 || echo "no log"
      echo
    done ;;
  save)
    pkill -f "models curve" || true
    sleep 2
    RUNS=$RUNS KEEP=$KEEP bash scripts/training_states.sh save ;;
  score)
    for set in $SETS; do
      SET=$set bash scripts/pmf_ablation.sh "$ARM" --score-only && SET=$set bash scripts/pmf_ablation.sh table
    done ;;
  ship)
    set=${2:?usage: scripts/pmf_cpu_arms.sh ship ref1|ref2}
    arm=$RUNS/$set/$ARM
    [ -f "$arm/train-012800/metrics.json" ] || { echo "$arm has not finished (bash scripts/pmf_cpu_arms.sh status)" >&2; exit 1; }
    [ -f "$arm/curve.json" ] || { echo "$arm is not scored: bash scripts/pmf_cpu_arms.sh score" >&2; exit 1; }
    curves=$RUNS/$set/curves/synthfaces/pmf; mkdir -p "$curves"; cp "$arm/curve.json" "$curves/"
    unset EXTRA
    cpu_where="$(lscpu | sed -n 's/^Model name: *//p' | head -1), one thread of 2 cores, niced, the set's shipped 12,800-step pmf continued 12,800 steps (scripts/pmf_cpu_arms.sh, 2026-12-03 to $(date -u +%F))"
    FROM=$arm/train-012800 CURVES=$RUNS/$set/curves \
      WHERE="${WHERE:-$cpu_where}" \
      bash scripts/ship_cpu_networks.sh "$set" synthfaces/pmf ;;
  *) echo "usage: scripts/pmf_cpu_arms.sh start|status|save|score|ship SET" >&2; exit 2 ;;
esac
