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
# (default 3 x 14 min, Pareto 41, paper 11, ref2 19, sets 1).
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
    [ -z "$(git status --porcelain -- config networks vcebench methods workflow)" ] \
      || { echo "commit config/, networks/ and the code first: the tables are made from a clone of HEAD" >&2; exit 1; }
    SHA=$(git rev-parse --short HEAD); DIR=$ROOT/runs/refresh/$SHA
    [ -d "$DIR" ] || git clone -q "$ROOT" "$DIR"
    cd "$DIR"; TIMES=$DIR/times.tsv
    [ -x .venv/bin/python ] || make install
    export PATH="$DIR/.venv/bin:$PATH"
    # the default run REPEATS times from a clean tree (make clean: no rendered data, no installed networks), for
    # the README's median; an interrupted run does not count and starts over
    runs_done() { local n; n=$(grep -c '^default' "$TIMES" 2>/dev/null) || true; echo "${n:-0}"; }
    while [ "$(runs_done)" -lt "${REPEATS:-3}" ]; do
      make clean >/dev/null
      timed default snakemake --cores "$CORES"
    done
    timed pareto snakemake --cores "$CORES" pareto
    timed paper snakemake --cores "$CORES" paper
    timed ref2 snakemake --cores "$CORES" --configfile config/presets/ref2.yaml
    for csv in results/*.csv; do
      case "$csv" in *_pareto.csv) continue ;; esac
      task=$(basename "$csv" .csv)
      timed "sets $task" vcebench report sets --task "$task" --a results --b runs/ref2/results --out "results/${task}_sets.md"
    done
    OUT=$ROOT/results/reference/default
    cp results/*.md results/*.csv results/*.tex results/*.png results/*.json "$OUT/"
    mkdir -p "$OUT/paper"; cp results/paper/tables.md results/paper/figure2.png "$OUT/paper/"
    echo "copied into $OUT (made by $SHA; wall times: $TIMES). Update its README.md and docs/results.md."
    cat "$TIMES" ;;
  *) echo "unknown phase '$PHASE' (tune or tables)" >&2; exit 2 ;;
esac
