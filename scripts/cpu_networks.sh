#!/bin/bash
# Train the faces generators' plateau curves on the CPU (issue #24), in the background and resumable:
#   bash scripts/cpu_networks.sh SET [ROLE ...]      SET: ref1 | ref2 (ref2: config/presets/ref2.yaml's seeds)
# Each ROLE (default: ddpm pmf) trains in its own process with one thread (two at once on 2 cores), the budgets
# 1600 3200 6400 12800 of the wsd recipes in config/presets/plateau.yaml, one run per budget on a shared trunk,
# into runs/cpu-networks/SET/synthfaces/ROLE/ (log: ROLE.log there). The CPU's own kernels (cpu_isa: native):
# the weights are trained once and shipped; the default run loads them on any machine.
# After an interruption rerun the same command: each budget resumes from its checkpoint or the shared trunk.
# Stop them with: pkill -f 'models curve'
# Score the curves afterwards (the same command without --train-only): docs/networks.md "Training curves".
set -eu
SET=${1:?usage: scripts/cpu_networks.sh ref1|ref2 [ROLE ...]}; shift
ROLES=${*:-ddpm pmf}
case "$SET" in
  ref1) EXTRA=() ;;
  ref2) EXTRA=(--config config/presets/ref2.yaml) ;;
  *) echo "unknown set '$SET' (ref1 or ref2)" >&2; exit 2 ;;
esac
OUT=runs/cpu-networks/$SET/synthfaces; mkdir -p "$OUT"
printf 'train_threads: 1\ncpu_isa: native\n' > "$OUT/cpu.yaml"
DATA=(); [ -d resources/data/synthfaces ] && DATA=(--data resources/data/synthfaces)
for role in $ROLES; do
  case "$role" in ddpm|pmf) ;; *) echo "unknown role '$role' (ddpm or pmf)" >&2; exit 2 ;; esac
  setsid nohup .venv/bin/vcebench models curve --task synthfaces_smile --role "$role" --steps 12800 \
    --at 1600 3200 6400 --train-only "${DATA[@]}" --config config/config.yaml "${EXTRA[@]}" \
    --config config/presets/plateau.yaml --config "$OUT/cpu.yaml" --out "$OUT/$role" >> "$OUT/$role.log" 2>&1 &
  echo "training $SET synthfaces/$role in the background (pid $!): $OUT/$role.log"
done
