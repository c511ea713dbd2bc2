#!/bin/bash
# Refresh results/reference/default once, on the shipped network sets (issue #24, docs/networks.md), in two phases:
#   bash scripts/refresh_reference.sh tune      every method's settings re-picked on networks/ref1 (config/tuned/;
#                                               the same rule, space and n): review and commit them, then
#   bash scripts/refresh_reference.sh tables    a fresh clone of HEAD (runs/refresh/<commit>/): the default run,
#                                               timed REPEATS (3) times from a clean tree for the README's median
#                                               (`make benchmark`), the Pareto fronts, the paper
#                                               tables, the same default run on networks/ref2 and the two sets
#                                               compared; the outputs copied into results/reference/default/
# Each step is a snakemake target, so an interrupted phase resumes where it stopped when run again (the clone is
# kept). Wall times go to runs/refresh/<commit>/times.tsv. On 2 cores: tune about 35 min; tables about 2.5 h
# (default 3 x 10-14 min, Pareto 41 (65 on one core), paper 11-24, ref2 11-19, sets 1).
# STEPS (default "default pareto paper ref2 sets") runs some of the tables' steps only, e.g. across sessions that
# lose runs/: each step's outputs are copied as soon as it ends. The jobs are 1-thread (config `threads: 1`), so
# CORES=1 gives the same tables, slower; only REPEATS x `default` on free cores gives the README's timing.
# BATCHES=DIR: counterfactual batches saved ahead (DIR/results/<task>/<method>/shards/*.batches/, e.g. the paper
# rows explained in a worktree of the same config) are put into the clone before the paper step; each is taken
# only where its key (settings, networks, torch, machine kind) and its inputs match, else made again
# (vcebench.steps.batches), and the timing record counts the batches resumed.
set -eu
PHASE=${1:?usage: scripts/refresh_reference.sh tune|tables}
CORES=${CORES:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
timed() {  # timed NAME COMMAND...: run it, append its wall time to $TIMES
  local name=$1 t0; shift; t0=$(date +%s)
  "$@"
  printf '%s\t%s\t%s\n' "$name" "$(( $(date +%s) - t0 ))" "$(date -u +%FT%TZ)" >> "$TIMES"
}
case "$PHASE" in
  tune)
    cd "$ROOT"; mkdir -p runs/refresh; TIMES=$ROOT/runs/refresh/tune-times.tsv
    export PATH="$ROOT/.venv/bin:$PATH"
    timed tune snakemake --cores "$CORES" tune
    git status --short config/tuned
    echo "re-tuned: review config/tuned/ (git diff config/tuned), commit, then: bash scripts/refresh_reference.sh tables" ;;
  tables)
    cd "$ROOT"
    STEPS=" ${STEPS:-default pareto paper ref2 sets} "; OUT=$ROOT/results/reference/default
    for step in $STEPS; do
      case "$step" in default|pareto|paper|ref2|sets) ;; *) echo "unknown step '$step' in STEPS" >&2; exit 2 ;; esac
    done
    [ -z "$(git status --porcelain -- config networks vcebench methods metrics workflows Snakefile pyproject.toml)" ] \
      || { echo "commit config/, networks/ and the code first: the tables are made from a clone of HEAD" >&2; exit 1; }
    SHA=$(git rev-parse --short HEAD); DIR=$ROOT/runs/refresh/$SHA
    [ -d "$DIR" ] || git clone -q "$ROOT" "$DIR"
    cd "$DIR"; TIMES=$DIR/times.tsv
    [ -x .venv/bin/python ] || make install
    export PATH="$DIR/.venv/bin:$PATH"
    want() { case "$STEPS" in *" $1 "*) return 0 ;; esac; return 1; }
    # the default run REPEATS times from a clean tree (make clean: no rendered data, no installed networks), for
    # the README's median; an interrupted run does not count and starts over
    runs_done() { local n; n=$(grep -c '^default' "$TIMES" 2>/dev/null) || true; echo "${n:-0}"; }
    if want default; then
      while [ "$(runs_done)" -lt "${REPEATS:-3}" ]; do
        make clean >/dev/null
        timed default snakemake --cores "$CORES"
      done
      for csv in results/*.csv; do
        task=$(basename "$csv" .csv)
        case "$task" in *_pareto|*_sets|*_pairs) continue ;; esac
        cp "results/$task".{md,csv,tex} "results/${task}"_{qualitative,efficiency}.png "results/${task}_validity.json" \
          "results/${task}"_pairs.{md,csv} "$OUT/"
      done
      cp results/summary_pairs.md results/summary_cd.png "$OUT/"
    fi
    if want pareto; then
      timed pareto snakemake --cores "$CORES" pareto
      cp results/*_pareto.csv results/*_pareto.png results/*_pareto_snr.png "$OUT/"
    fi
    if want paper; then
      if [ -n "${BATCHES:-}" ]; then
        ( cd "$BATCHES" && find results -path '*/shards/*.batches/batch-*.pt' ) | while read -r f; do
          [ -e "$f" ] || { mkdir -p "$(dirname "$f")"; cp "$BATCHES/$f" "$f"; }
        done
      fi
      timed paper snakemake --cores "$CORES" paper
      mkdir -p "$OUT/paper"; cp results/paper/tables.md results/paper/*_pairs.md results/paper/figure2.png "$OUT/paper/"
    fi
    if want ref2; then timed ref2 snakemake --cores "$CORES" --configfile config/presets/ref2.yaml; fi
    if want sets; then
      for csv in runs/ref2/results/*.csv; do
        task=$(basename "$csv" .csv)
        case "$task" in *_pareto|*_sets|*_pairs) continue ;; esac
        timed "sets $task" vcebench report sets --task "$task" --a "$OUT" --b runs/ref2/results \
          --out "results/${task}_sets.md"
        cp "results/${task}_sets.md" "results/${task}_sets.json" "$OUT/"
      done
    fi
    echo "copied into $OUT (made by $SHA, steps:$STEPS; wall times: $TIMES). Update its README.md and docs/results.md."
    cat "$TIMES" ;;
  *) echo "unknown phase '$PHASE' (tune or tables)" >&2; exit 2 ;;
esac
