#!/bin/bash
# Resume states of the generators' plateau runs that outlive a session (issue #24). runs/ is not in git, and a new
# checkout of the project starts without it; these states are what a run needs to go on where it stopped:
#   bash scripts/training_states.sh save      runs/cpu-networks/ -> training-states/ (then commit training-states/)
#   bash scripts/training_states.sh restore   training-states/ -> runs/cpu-networks/ (then scripts/cpu_networks.sh)
# Kept: each unfinished budget's checkpoint/state.pt and the latest shared-trunk state of each run (about 10 MB
# each: weights, EMA and AdamW moments), each finished budget's network folder (its snapshot, the same weights,
# is written back on restore) and the scored curves (curve.json / curve.md). Delete a finished budget's folder
# from runs/ before `save` once it is shipped or no longer needed. `save` replaces the folder,
# so a state whose run finished leaves it. Stop the training first (pkill -f 'models curve'): a state is written
# atomically, but the copy should be of the last one.
set -eu
RUNS=${RUNS:-runs/cpu-networks}
KEEP=${KEEP:-training-states}
case "${1:?usage: scripts/training_states.sh save|restore}" in
  save)
    rm -rf "$KEEP.tmp"; mkdir -p "$KEEP.tmp"
    ( cd "$RUNS" && find . -path '*/train-*/checkpoint/state.pt' ) | while read -r f; do
      mkdir -p "$KEEP.tmp/$(dirname "$f")"; cp "$RUNS/$f" "$KEEP.tmp/$f"
    done
    for d in "$RUNS"/*/*/*/train-*/; do  # finished budgets not shipped yet: the network folder less its snapshots
      [ -f "$d/metrics.json" ] || continue
      rel=${d#"$RUNS"/}; mkdir -p "$KEEP.tmp/$rel"
      ( cd "$d" && find . -type f ! -path './snapshots/*' ! -path './checkpoint/*' ) | while read -r f; do
        mkdir -p "$KEEP.tmp/$rel/$(dirname "$f")"; cp "$d/$f" "$KEEP.tmp/$rel/$f"
      done
    done
    for f in "$RUNS"/*/*/*/curve.json "$RUNS"/*/*/*/curve.md; do  # the scored curves
      [ -f "$f" ] || continue
      rel=${f#"$RUNS"/}; mkdir -p "$KEEP.tmp/$(dirname "$rel")"; cp "$f" "$KEEP.tmp/$rel"
    done
    for d in "$RUNS"/*/*/*/trunk/*/; do  # the latest trunk state of each recipe, if no budget of it finished past it
      [ -d "$d" ] || continue
      last=$(ls "$d" | grep -E '^step-[0-9]+\.pt$' | sort | tail -1)
      [ -n "$last" ] || continue
      rel=${d#"$RUNS"/}; mkdir -p "$KEEP.tmp/$rel"; cp "$d$last" "$KEEP.tmp/$rel$last"
    done
    printf '%s\n' "# Resume states of unfinished training runs (scripts/training_states.sh; docs/networks.md)." \
      "# Restore with: bash scripts/training_states.sh restore" > "$KEEP.tmp/README.md"
    rm -rf "$KEEP"; mv "$KEEP.tmp" "$KEEP"
    find "$KEEP" -name '*.pt' -exec du -h {} + ;;
  restore)
    [ -d "$KEEP" ] || { echo "no $KEEP/ to restore" >&2; exit 1; }
    ( cd "$KEEP" && find . -type f ! -name README.md ) | while read -r f; do
      if [ -e "$RUNS/$f" ]; then echo "kept $RUNS/$f (already there)"; continue; fi
      mkdir -p "$RUNS/$(dirname "$f")"; cp "$KEEP/$f" "$RUNS/$f"; echo "restored $RUNS/$f"
    done
    "$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)" scripts/gpu_networks.py unpack --into "$RUNS" ;;  # each finished budget's snapshot
  *) echo "usage: scripts/training_states.sh save|restore" >&2; exit 2 ;;
esac
