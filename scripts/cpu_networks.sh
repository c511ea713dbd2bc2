#!/bin/bash
# Train generators' plateau curves on the CPU (issue #24), in the background and resumable:
#   bash scripts/cpu_networks.sh SET [DATASET/ROLE ...]     SET: ref1 | ref2 (ref2: config/presets/ref2.yaml's seeds)
# DATASET/ROLE defaults to synthfaces/ddpm synthfaces/pmf. Each trains in its own process with one thread (two at
# once on 2 cores) the wsd recipe of config/config.yaml at four budgets, its `steps` and the three halvings
# below it, one run per budget on a shared trunk (vcebench/steps/curves.py), into
# runs/cpu-networks/SET/DATASET/ROLE/ (log: ROLE.log beside it). The CPU's own kernels (cpu_isa: native): the
# weights are trained once and shipped; the default run loads them on any machine.
# FINAL_ONLY=1: only the recipe's `steps`, no halvings (the second set, once the budgets are chosen on the first).
# AT_STEPS="12800": these budgets below the recipe's `steps` instead of the three halvings.
# After an interruption rerun the same command: each budget resumes from its checkpoint or the shared trunk.
# Stop them with: pkill -f 'models curve'. Score afterwards: docs/networks.md "Training curves".
set -eu
SET=${1:?usage: scripts/cpu_networks.sh ref1|ref2 [DATASET/ROLE ...]}; shift
PAIRS=${*:-synthfaces/ddpm synthfaces/pmf}
case "$SET" in
  ref1) EXTRA=() ;;
  ref2) EXTRA=(--config config/presets/ref2.yaml) ;;
  *) echo "unknown set '$SET' (ref1 or ref2)" >&2; exit 2 ;;
esac
OUT=runs/cpu-networks/$SET; mkdir -p "$OUT"
printf 'train_threads: 1\ncpu_isa: native\n' > "$OUT/cpu.yaml"
CONFIGS=(--config config/config.yaml "${EXTRA[@]}" --config "$OUT/cpu.yaml")
for pair in $PAIRS; do
  ds=${pair%/*}; role=${pair#*/}
  case "$ds/$role" in
    synthfaces/ddpm|synthfaces/pmf) task=synthfaces_smile ;;
    synthxray/ddpm|synthxray/pmf) task=synthxray_pacemaker ;;
    *) echo "unknown DATASET/ROLE '$pair' (synthfaces or synthxray / ddpm or pmf)" >&2; exit 2 ;;
  esac
  steps=$(.venv/bin/python scripts/recipe_steps.py "$ds" "$role" "${CONFIGS[@]}")
  AT=(--at $((steps / 8)) $((steps / 4)) $((steps / 2))); [ "${FINAL_ONLY:-0}" = 1 ] && AT=()
  [ -n "${AT_STEPS:-}" ] && read -r -a AT <<< "--at $AT_STEPS"
  DATA=(); [ -d "resources/data/$ds" ] && DATA=(--data "resources/data/$ds")
  mkdir -p "$OUT/$ds"
  setsid nohup .venv/bin/vcebench models curve --task "$task" --role "$role" \
    "${AT[@]}" --train-only "${DATA[@]}" "${CONFIGS[@]}" \
    --out "$OUT/$ds/$role" >> "$OUT/$ds/$role.log" 2>&1 &
  echo "training $SET $ds/$role ($steps steps${AT[*]:+ and its halvings}) in the background (pid $!): $OUT/$ds/$role.log"
done
