#!/bin/bash
# Ship the generators trained by scripts/cpu_networks.sh into a network set (issue #24), after their budgets were
# chosen by the plateau rule and written as `steps` into config/config.yaml (or a preset given with CONFIGS):
#   [CONFIGS="--config A.yaml --config B.yaml"] [OUT=folder] bash scripts/ship_cpu_networks.sh SET [DATASET/ROLE ...]
# SET: ref1 | ref2 (ref2 adds config/presets/ref2.yaml); CONFIGS defaults to config/config.yaml, OUT to networks/SET.
# DATASET/ROLE defaults to the four generators. For each, the run of the config's `steps`
# (runs/cpu-networks/SET/DATASET/ROLE/train-<steps>/) replaces the set's network in a copy of networks/SET/
# (runs/cpu-networks/SET/models/); `vcebench models check` re-measures that whole copy (the generators' FID and
# the pmf gate against the new DDPM; the embedding judges' truth vs regenerate level, which the DDPM draws), and
# `vcebench models ship` writes it back into networks/SET/ with new cards (the judges keep their weights: their
# metrics.json gets the new regenerate level). A budget not trained yet, or a run trained with another recipe,
# stops it before anything in networks/SET changes.
# FROM=<run folder> with one DATASET/ROLE: ship that run instead (e.g. a continued arm of scripts/pmf_cpu_arms.sh);
# CURVES=<folder>: the training curves, <folder>/DATASET/ROLE/curve.json (default the runs' own).
set -eu
SET=${1:?usage: scripts/ship_cpu_networks.sh ref1|ref2 [DATASET/ROLE ...]}; shift
PAIRS=${*:-synthfaces/ddpm synthfaces/pmf synthxray/ddpm synthxray/pmf}
case "$SET" in
  ref1) EXTRA=() ;;
  ref2) EXTRA=(--config config/presets/ref2.yaml) ;;
  *) echo "unknown set '$SET' (ref1 or ref2)" >&2; exit 2 ;;
esac
RUNS=runs/cpu-networks/$SET
OUT=${OUT:-networks/$SET}   # OUT=<folder>: ship there instead (a trial run, checked in a folder of its own)
MODELS=$RUNS/models; [ "$OUT" = "networks/$SET" ] || MODELS=$RUNS/models-trial
read -r -a CONFIGS <<< "${CONFIGS:---config config/config.yaml}"
CONFIGS+=("${EXTRA[@]}")
[ -d "networks/$SET" ] || { echo "no networks/$SET to start from" >&2; exit 2; }

rm -rf "$MODELS.tmp"; mkdir -p "$MODELS.tmp"
cp -r "networks/$SET/." "$MODELS.tmp/"
for pair in $PAIRS; do
  ds=${pair%/*}; role=${pair#*/}
  case "$ds/$role" in
    synthfaces/ddpm|synthfaces/pmf|synthxray/ddpm|synthxray/pmf) ;;
    *) echo "unknown DATASET/ROLE '$pair' (synthfaces or synthxray / ddpm or pmf)" >&2; exit 2 ;;
  esac
  steps=$(.venv/bin/python scripts/recipe_steps.py "$ds" "$role" "${CONFIGS[@]}")
  run=$RUNS/$ds/$role/train-$(printf %06d "$steps")
  if [ -n "${FROM:-}" ]; then
    [ "$(echo $PAIRS | wc -w)" = 1 ] || { echo "FROM ships one run: name one DATASET/ROLE" >&2; exit 2; }
    run=$FROM
  fi
  [ -f "$run/metrics.json" ] || { echo "$run is not trained (the config's $ds/$role steps: $steps): run" \
    "scripts/cpu_networks.sh $SET $ds/$role first" >&2; exit 1; }
  rm -rf "${MODELS:?}.tmp/$ds/$role"; cp -r "$run" "$MODELS.tmp/$ds/$role"  # ship leaves its snapshots out
  echo "$ds/$role: $run"
done
rm -rf "$MODELS"; mv "$MODELS.tmp" "$MODELS"

DATA=(); [ -d resources/data/synthfaces ] && DATA=(--data-root resources/data)
.venv/bin/vcebench models check --models "$MODELS" "${DATA[@]}" "${CONFIGS[@]}"
TORCH=$(.venv/bin/python -c 'import torch; print(torch.__version__)')
# WHERE=<text>: where the generators were trained, when not all on this machine (e.g. a GPU's first steps)
WHERE=${WHERE:-"$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, torch $TORCH (CPU), 1 thread, cpu_isa native, $(date -u +%F), scripts/cpu_networks.sh"}
.venv/bin/vcebench models ship --models "$MODELS" --set "$SET" --out "$OUT" --curves "${CURVES:-$RUNS}" \
  --roles $PAIRS --where "$WHERE" "${CONFIGS[@]}"
# the judges: their weights and where they trained unchanged (their cards say it), their metrics.json re-measured
.venv/bin/vcebench models ship --models "$MODELS" --set "$SET" --out "$OUT" \
  --roles classifier oracle identity simsiam perceptual fid_features "${CONFIGS[@]}"
echo "shipped into $OUT: $PAIRS (and the judges' re-measured metrics)"
