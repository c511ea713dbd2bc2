#!/bin/bash
# The faces pmf recipe ablation (issue #48, docs/networks.md "The pmf recipe ablation"): one command per arm, each
# arm a config override in config/presets/pmf_ablation/<arm>.yaml, trained and scored by `vcebench models curve`
# (the same gate numbers as training's metrics.json: one-step FID at t 0.2 / 0.4 against the DDPM's Tweedie,
# the MSE ratio, the labels kept at each task's FiRe t), then one table of all arms.
#   bash scripts/pmf_ablation.sh prepare        render the faces splits, install (or, where no shipped network has
#                                               the recipe, train) the networks the gate and the losses use
#   bash scripts/pmf_ablation.sh ARM [FLAG]     train and score one arm (base, perceptual, perceptual_features,
#                                               exact_jvp, wide, full; ft_base, ft_perceptual: 1,000 steps more
#                                               of the set's shipped pmf, without / with the perceptual loss); FLAG --train-only (e.g. on a GPU) or
#                                               --score-only (later, where the judges are); resumable
#   bash scripts/pmf_ablation.sh shipped        score the set's shipped faces pmf the same way (the arms' reference)
#   bash scripts/pmf_ablation.sh table          $OUT/$SET/ablation.md and .json: every scored arm at its budget
# Environment: SET ref1 | ref2 (default ref1; ref2 adds config/presets/ref2.yaml's seeds), STEPS (default the
# recipe's, 12,800), AT (smaller budgets scored on the way, e.g. "3200 6400": wsd decays from the shared trunk), PRESET (a config merged before the arm, e.g. config/presets/quick.yaml for a smoke test),
# EXTRA (a config merged last, e.g. the GPU's device overlay), N_VAL (256: the gate's images), SAMPLES (1000),
# OUT (runs/pmf-ablation), MODELS ($OUT/$SET/models), DATA ($OUT/$SET/data).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SET=${SET:-ref1}
OUT=${OUT:-runs/pmf-ablation}
MODELS=${MODELS:-$OUT/$SET/models}
DATA=${DATA:-$OUT/$SET/data}
TASK=synthfaces_smile
ARMS="base perceptual perceptual_features exact_jvp wide full ft_base ft_perceptual ft_long_perceptual ft_long_perceptual_jvp ft_long_perceptual_lowlr"
case "$SET" in
  ref1) CONFIGS=(--config config/config.yaml) ;;
  ref2) CONFIGS=(--config config/config.yaml --config config/presets/ref2.yaml) ;;
  *) echo "SET must be ref1 or ref2, got '$SET'" >&2; exit 2 ;;
esac
[ -z "${PRESET:-}" ] || CONFIGS+=(--config "$PRESET")
vce() {  # the CLI: the installed command, else the package on PYTHONPATH (the GPU machine)
  if command -v vcebench >/dev/null; then vcebench "$@"
  else python3 -c "import sys; from vcebench.cli import main; sys.exit(main())" "$@"; fi
}
verb=${1:?usage: scripts/pmf_ablation.sh prepare|table|<arm> [--train-only|--score-only] (arms: $ARMS)}
case "$verb" in
  prepare)
    [ -f "$DATA/synthfaces/train.npz" ] && [ -f "$DATA/synthfaces/val.npz" ] \
      || vce data render synthfaces --out "$DATA/synthfaces" "${CONFIGS[@]}"
    # the pmf gate's networks and the losses' (registry.roles GATE_ROLES, LOSS_ROLES), the DDPM last
    for role in classifier fid_features perceptual ddpm; do
      vce train "$role" --task "$TASK" --data "$DATA/synthfaces" --model-dir "$MODELS" --no-progress \
        "${CONFIGS[@]}"
    done ;;
  shipped)
    steps=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['recipe']['settings']['steps'])" \
      "networks/$SET/synthfaces/pmf/card.json")
    run=$OUT/$SET/shipped/train-$(printf %06d "$steps")
    mkdir -p "$run/snapshots"
    cp "networks/$SET/synthfaces/pmf/"{model.safetensors,config.json,metrics.json} "$run/"
    cp "networks/$SET/synthfaces/pmf/model.safetensors" "$run/snapshots/step-$(printf %06d "$steps").safetensors"
    vce models curve --task "$TASK" --role pmf --steps "$steps" --n-val "${N_VAL:-256}" --samples "${SAMPLES:-1000}" \
      --data "$DATA/synthfaces" --models "$MODELS" --out "$OUT/$SET/shipped" --score-only "${CONFIGS[@]}" ;;
  table)
    python3 - "$OUT/$SET" shipped $ARMS <<'EOF'
import json, sys
from pathlib import Path

out, arms = Path(sys.argv[1]), sys.argv[2:]
last = {}
for arm in arms:
    p = out / arm / "curve.json"
    if p.is_file() and json.loads(p.read_text()).get("rows"):
        last[arm] = json.loads(p.read_text())
# every flow time an arm was scored at (0.2, 0.4 and each task's FiRe level): the PMF's one-step FID and the
# DDPM's Tweedie FID side by side
levels = sorted({k[len("predict_clean_t"):-len("_fid")] for c in last.values() for k in c["rows"][-1]
                 if k.startswith("predict_clean_t") and k.endswith("_fid")}, key=float)
# (column names without spaces: docs quote the table as an excerpt, `cols=FID_t0.4,Tweedie_t0.4`)
cols = [c for t in levels for c in ((f"predict_clean_t{t}_fid", f"FID_t{float(t):.3g}"),
                                    (f"ddpm_tweedie_t{t}_fid", f"Tweedie_t{float(t):.3g}"))]
cols += [("gate_mse_ratio_vs_tweedie", "MSE_vs_Tweedie_t0.4"), ("sample_fid", "sample_FID")]
rows, found = [], {}
for arm, curve in last.items():
    r = curve["rows"][-1]
    found[arm] = {"step": r["step"], "n_val": curve["scoring"]["n_val"], **r}
    kept = "; ".join(f"{a} {v['pmf']:.3f} vs {v['tweedie']:.3f} (t {v['t']:.3g})"
                     for a, v in (r.get("gate_label_kept_at_fire_t") or {}).items())
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else "-" if v is None else str(v)
    steps = f"+{r['step']}" if arm.startswith("ft_") else str(r["step"])  # ft_*: steps after the shipped pmf's
    rows.append(f"| {arm} | {steps} | " + " | ".join(fmt(r.get(k)) for k, _ in cols)
                + f" | {kept or '-'} | {'yes' if r.get('gate_passed') else 'no: ' + ', '.join(r.get('gate_failed') or [])} |")
if not rows:
    sys.exit(f"no arm scored in {out} yet (bash scripts/pmf_ablation.sh <arm>)")
n_val = {v["n_val"] for v in found.values()}
md = (f"pmf recipe ablation ({out.name}; {', '.join(map(str, sorted(n_val)))} validation images; steps: +N continues "
      "the shipped pmf N steps; labels_kept: the pmf's vs the Tweedie's at each task's FiRe t)\n\n"
      "| arm | steps | " + " | ".join(c for _, c in cols) + " | labels_kept | gate |\n"
      "|---|---:|" + "---:|" * len(cols) + "---|---|\n" + "\n".join(rows) + "\n")
(out / "ablation.md").write_text(md)
(out / "ablation.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
print(md, end="")
EOF
    ;;
  *)
    case " $ARMS " in *" $verb "*) ;; *) echo "unknown arm '$verb' (arms: $ARMS)" >&2; exit 2 ;; esac
    flag=${2:-}
    case "$flag" in ""|--train-only|--score-only) ;; *) echo "unknown flag '$flag'" >&2; exit 2 ;; esac
    CONFIGS+=(--config "config/presets/pmf_ablation/$verb.yaml")
    # the continued-training arms start from the set's shipped pmf (pinned by sha256)
    case "$verb" in ft_*) CONFIGS+=(--config "config/presets/pmf_ablation/init_$SET.yaml") ;; esac
    [ -z "${EXTRA:-}" ] || CONFIGS+=(--config "$EXTRA")
    read -ra at <<< "${AT:-}"
    for a in "${at[@]}"; do
      case "$a" in *[!0-9]*) echo "AT must be step counts, got '$a'" >&2; exit 2 ;; esac
    done
    vce models curve --task "$TASK" --role pmf ${STEPS:+--steps "$STEPS"} --n-val "${N_VAL:-256}" \
      --samples "${SAMPLES:-1000}" --data "$DATA/synthfaces" --models "$MODELS" --out "$OUT/$SET/$verb" \
      ${at[0]:+--at "${at[@]}"} ${flag:+"$flag"} "${CONFIGS[@]}" ;;
esac
