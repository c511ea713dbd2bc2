"""The footer of a task table, one function per paragraph: what ± means, the n behind each column, the
protocol, where the cost columns come from, the reference rows (no edit, the truth), warnings (the
metric-validity sentences: :mod:`.validity`) and the rows' provenance (:mod:`vcebench.core.provenance`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..config.kernels import describe
from ..config.tasks import external_name, is_baseline, is_truth
from ..protocol import fair
from .tables import display_columns, format_value, method_label

if TYPE_CHECKING:
    from .pairs import MarkNote

SUBSET_WORDS = {"all": "all inputs", "successful": "successful CFs", "correct": "correctly classified inputs",
                "correct_successful": "correct and successful"}
COSTS_LINE = ("Costs, all from the explain run that made the n CFs: NFE/CF and steps are means over all n "
              "(counterfactuals.npz); TFLOPs/CF = each network's FLOPs per call (counted at batch 1) × each CF's "
              "calls; s/CF: generation time over all n; Mem: peak during generation.")
PAPER_DEFAULTS = "paper defaults + config (`method_defaults`, `tasks.<task>.params`, variants)"


def _per_method_json(results: Path, task: str, methods: list[str], name: str) -> dict[str, dict]:
    """``{method: results/<task>/<method>/<name>}`` of the rows that have one."""
    paths = {m: results / task / m / name for m in methods}
    return {m: json.loads(p.read_text()) for m, p in paths.items() if p.exists()}


def load_metrics_json(results: Path, task: str, methods: list[str]) -> dict[str, dict]:
    """``{method: metrics.json}`` of the rows that have one."""
    return _per_method_json(results, task, methods, "metrics.json")


def _per_row(values: dict[str, object]) -> str:
    """``16 for every row`` or ``FiRe 13, DiME 16, ...``."""
    uniq = set(values.values())
    if len(uniq) == 1:
        return f"{format_value(next(iter(uniq)))} for every row"
    return ", ".join(f"{method_label(m)} {format_value(v)}" for m, v in values.items())


def load_profiles(results: Path, task: str, methods: list[str]) -> dict[str, dict]:
    """``{method: profile.json}`` (the explain run's merged record) of the rows that have one."""
    return _per_method_json(results, task, methods, "profile.json")


def task_footer(df: pd.DataFrame, metas: dict[str, dict], tuned: dict | None = None,
                feature_dim: int | None = None, profiles: dict[str, dict] | None = None,
                marks: MarkNote | None = None, task: str = "") -> list[str]:
    """Footer lines of a task table (markdown; ``to_latex`` turns them into a table note): what ± means, what the
    marks rest on (``marks``: :func:`.pairs.marks`' note; None: no paired tests, no marks), the n behind each
    column, the protocol (noise rule, selection rule, n, seeds, feature extractor), where the cost columns come
    from, and warnings (a DDPM row whose every sample flipped at its first guidance scale). Reads what the rows'
    metrics.json hold and leaves out what they do not."""
    boot = next((mj.get("bootstrap") for mj in metas.values() if mj.get("bootstrap")), None)
    lines = [_interval_line(boot)] if boot else []
    lines.append(marks_line(marks, task))
    lines += _n_per_column_lines(df, metas)
    lines.append(_protocol_line(metas, tuned, feature_dim, boot))
    lines.append(COSTS_LINE)
    lines += _baseline_lines(df)
    lines += _imported_lines(df)
    lines += _warning_lines(metas)
    lines += gate_lines(profiles or {})
    lines += provenance_lines(metas)
    return lines


def provenance_lines(metas: dict[str, dict]) -> list[str]:
    """One line over the rows' provenance records (:func:`vcebench.core.provenance.summary`): the commit(s) and
    whether any was dirty, torch, the CPU, the threads, the settings hash(es); none when no row has a record."""
    from ..core.provenance import summary

    line = summary({m: mj.get("provenance") for m, mj in metas.items() if mj.get("provenance")})
    return [line] if line else []


def resolution_lines(metas: dict[str, dict], dataset: str, attribute: str | None = None) -> list[str]:
    """What the resolution rule scaled in the rows that run untuned settings (the paper rows): each paper pixel
    value and the value the row ran (its metrics.json protocol record; a value other than the rule's is said).
    None for tuned rows (the rule only centres their search) or a dataset the papers ran on."""
    parts, scales = [], set()
    for m, mj in metas.items():
        p = mj.get("protocol") or {}
        if p.get("tuned") or not p.get("params") or not p.get("resolution"):
            continue
        bits = []
        for k, pv in fair.pixel_values(dataset, p.get("base_method") or m, attribute).items():
            if k not in p["params"]:
                continue
            ran, rule = p["params"][k], fair.carried(pv, int(p["resolution"]))
            said = "" if ran == rule else f" (config; the rule: {rule})"
            bits.append(f"{k} {pv.value} → {format_value(ran)}{said}")
            scales.add(f"{p['resolution']} / {pv.resolution}")
        if bits:
            parts.append(f"{method_label(m)} {', '.join(bits)}")
    if not parts:
        return []
    return ["Resolution rule (docs/protocol.md, \"The fair protocol\"): the rows on untuned settings run the papers' "
            f"pixel radii and dilation kernels × task px / paper px ({', '.join(sorted(scales))}), rounded half "
            f"up: {'; '.join(parts)}; fractions (rho, k, mask thresholds) and strengths as published."]


def _interval_line(boot: dict) -> str:
    return (f"± = half-width of the 95 % percentile bootstrap interval over the n inputs ({boot['resamples']} "
            f"resamples, FID/sFID/KID {boot['feature_resamples']}, seed {boot['seed']}; subsets follow the drawn "
            "inputs); bounds in the csv (`<column>_lo`, `<column>_hi`). A resample repeats inputs, which adds to "
            "FID's small-n bias: FID/sFID intervals can lie above the value; KID is unbiased at any n.")


def marks_line(note: MarkNote | None, task: str = "") -> str:
    """What bold and underline mean (the paired tests of :mod:`.pairs`), or why the table has none: never marks
    from point values alone, whose differences the intervals often cannot separate."""
    where = 'docs/protocol.md, "Paired comparisons"'
    if note is None or not note.marked:
        why = (f"no per-input record (samples.npz) for {', '.join(method_label(m) for m in note.no_record)}"
               if note is not None and note.no_record else "no paired tests were run for this table")
        return (f"No marks (bold / underline): {why}; marks come only from paired tests over the same inputs "
                f"({where}), never from the point values alone.")
    pairs = f"`{task}_pairs.md`" if task else "the task's `_pairs.md`"
    line = (f"**Bold**: better than every other ranked row, each paired test significant at 0.05 family-wise per "
            f"column (Holm over the column's pairs of ranked rows; exact McNemar on the discordant inputs for the "
            f"0 / 1 columns, e.g. FR, else the paired bootstrap over the shared resamples); underlined: the best "
            f"point value and every ranked row that no test separates from it (not separable from the best). "
            f"Differences, intervals, p-values: {pairs} ({where}). The cost columns carry no marks (measured "
            f"once, no test over the inputs).")
    if note.unmarked:
        line += " No marks in " + "; ".join(f"{c} ({why})" for c, why in note.unmarked.items()) + "."
    return line


def _n_per_column_lines(df: pd.DataFrame, metas: dict[str, dict]) -> list[str]:
    """The n per column, grouped by subset and counts (none when no metrics.json counts any)."""
    groups: dict[tuple, list[str]] = {}
    for c in display_columns(df)[1:]:
        counts = {m: (mj.get("n") or {}).get(c) for m, mj in metas.items()}
        if not any(v is not None for v in counts.values()):
            continue
        subset = next((mj.get("subsets", {}).get(c) for mj in metas.values() if mj.get("subsets", {}).get(c)), None)
        key = (subset, tuple(counts.items()))
        groups.setdefault(key, []).append(c)
    if not groups:
        return []
    parts = []
    for (subset, counts), cols in groups.items():
        where = SUBSET_WORDS.get(subset, subset or "")
        extra = " vs all n originals" if {"FID", "sFID", "KID"} & set(cols) else ""
        parts.append(f"{', '.join(cols)} ({where}{extra}): {_per_row(dict(counts))}")
    return ["n per column: " + "; ".join(parts) + "."]


def _protocol_line(metas: dict[str, dict], tuned: dict | None, feature_dim: int | None, boot: dict | None) -> str:
    """Noise rule, selection rule, n inputs, seeds, feature extractor."""
    protos = {m: mj.get("protocol") for m, mj in metas.items() if mj.get("protocol")}
    if protos:
        bits = [_noise_rule_bit(protos), _selection_bit(protos, tuned)]
    else:
        bits = ["selection: paper defaults + config (no protocol record in metrics.json)"]
    any_mj = next(iter(metas.values()), {})
    n_inputs = {m: mj.get("n_inputs") for m, mj in metas.items()}
    split = (any_mj.get("inputs") or {}).get("eval_split")
    bits.append(f"n inputs: {_per_row(n_inputs)}" + (f" (the first n of the `{split}` split)" if split else ""))
    seed_bits = [f"generation seed {any_mj.get('seed')}"] if any_mj.get("seed") is not None else []
    if any_mj.get("seeds"):
        seed_bits.append(f"sFID split seeds {any_mj['seeds']}")
    if boot:
        seed_bits.append(f"bootstrap seed {boot['seed']}")
    if seed_bits:
        bits.append(", ".join(seed_bits))
    extractor = (any_mj.get("models") or {}).get("fid_features")
    if extractor:
        dim = f", {feature_dim}-d" if feature_dim and f"{feature_dim}-d" not in extractor else ""
        kid = any_mj.get("kid") or {}
        bits.append(f"FID/sFID/KID features: {extractor}{dim}" + (
            f"; KID kernel {kid.get('kernel')}" if kid.get("kernel") else ""))
    kernels = _kernels_bit(metas)
    if kernels:
        bits.append(kernels)
    return "Protocol: " + "; ".join(bits) + "."


def _kernels_bit(metas: dict[str, dict]) -> str | None:
    """The CPU kernels the evaluations ran (``vcebench.config.kernels``), per row where they differ."""
    phrases = {m: describe(mj.get("kernels")) for m, mj in metas.items() if mj.get("kernels")}
    uniq = set(phrases.values())
    if not uniq:
        return None
    if len(uniq) == 1:
        return next(iter(uniq))
    return "CPU kernels differ between rows: " + ", ".join(f"{method_label(m)} {p}" for m, p in phrases.items())


def _noise_rule_bit(protos: dict[str, dict]) -> str:
    """The rows grouped by the noise rule that set their starting log-SNR."""
    rules: dict[str, list[str]] = {}
    for m, p in protos.items():
        if p.get("log_snr") is None:
            continue
        rule = p.get("noise_rule", "?")
        if rule == "snr_matched":
            rule += (f" (log-SNR {p.get('log_snr_shift', 0):+.2f}: {p.get('reference_resolution')} px → "
                     f"{p.get('resolution')} px)")
        rules.setdefault(rule, []).append(method_label(m))
    return "noise rule " + "; ".join(f"{r}: {', '.join(ms)}" for r, ms in rules.items())


def _selection_bit(protos: dict[str, dict], tuned: dict | None) -> str:
    """Which rows run tuned settings (and the tuning rule), which the paper defaults."""
    tuned_rows = [method_label(m) for m, p in protos.items() if p.get("tuned")]
    if not tuned_rows:
        return f"selection: {PAPER_DEFAULTS}; no tuned settings"
    how = f"tuned settings ({next(p['tuned_file'] for p in protos.values() if p.get('tuned'))}"
    if tuned and tuned.get("rule"):
        r = tuned["rule"]
        req = ", ".join(f"{k} ≥ {v}" for k, v in (r.get("require") or {}).items())
        how += f"; lowest {r.get('minimize')}" + (f" subject to {req}" if req else "")
        val = tuned.get("validation") or {}
        if val:
            how += f", on {val.get('n')} `{val.get('split')}` inputs never evaluated"
    return f"selection: {how}) for {', '.join(tuned_rows)}; the other rows: {PAPER_DEFAULTS}"


def _baseline_lines(df: pd.DataFrame) -> list[str]:
    """What the reference rows are: the do-nothing rows and the truth rows (none when the table has none)."""
    lines = []
    base = [method_label(m) for m in df["method"] if is_baseline(m) and not is_truth(m)]
    if base:
        lines.append(f"{', '.join(base)}: the input as its own CF, not ranked: FR = 0 by construction (target = "
                     "1 − f(x)), FR_oracle = share of inputs whose oracle query bit already disagrees with f(x) "
                     "(the floor of every row's FR_oracle); columns over successful CFs are empty (--).")
    truth = [method_label(m) for m in df["method"] if is_truth(m)]
    if truth:
        lines.append(f"{', '.join(truth)}: the renderer's true counterfactual, not ranked: each input with only "
                     "the query attribute set to the target 1 − f(x), i.e. the true label flipped where f(x) is "
                     "right (GT_L1 = 0 there) and the input unedited where f(x) is wrong (the classifier's "
                     "mistake, counted as not flipped in FR); cost columns empty: rendered by the dataset, not "
                     "computed by a method.")
    return lines


def _imported_lines(df: pd.DataFrame) -> list[str]:
    """What the imported rows (``external_<name>``) are (none when the table has none)."""
    rows = [method_label(m) for m in df["method"] if external_name(m)]
    if not rows:
        return []
    return [f"{', '.join(rows)}: counterfactuals of another code base (`vcebench import`), scored on the same "
            "inputs with the same networks; no protocol record and no cost columns (vcebench did not run them)."]


def _warning_lines(metas: dict[str, dict]) -> list[str]:
    """A warning per DDPM row whose every sample flipped at its first guidance scale."""
    lines = []
    for m, mj in metas.items():
        g = mj.get("guidance") or {}
        if g.get("all_flipped_at_first_scale"):
            scales = ((mj.get("protocol") or {}).get("params") or {}).get("scales")
            lines.append(f"**Warning** {method_label(m)}: every sample flipped at its first guidance scale "
                         f"({format_value(g.get('first_scale'))}); the retry schedule"
                         + (f" {list(scales)}" if scales else "") + " was never exercised.")
    return lines


def gate_lines(profiles: dict[str, dict]) -> list[str]:
    """A warning per generator that ran a row and fails its quality gate (docs/protocol.md section 5): the
    pmf's one-step prediction worse than the DDPM's Tweedie estimate is not the predictor FiRe's premise needs."""
    from ..costs.columns import NFE_ROLES

    failing: dict[str, tuple[list[str], dict]] = {}
    for m, pj in profiles.items():
        ran = {NFE_ROLES.get(net, net) for net in pj.get("flops_per_call") or {}}  # the roles the row called
        for role, gate in (pj.get("gates") or {}).items():
            if role in ran and not gate.get("passed", True):
                failing.setdefault(role, ([], gate))[0].append(method_label(m))
    return [f"**Warning** {', '.join(rows)}: the {role} fails its quality gate ("
            + (f"failed: {', '.join(gate['failed'])}; " if gate.get("failed") else "")
            + "docs/protocol.md section 5): its one-step prediction is worse than the DDPM's Tweedie estimate"
            + _gate_margin(gate) + ", so these rows measure the method on a weaker predictor than its paper assumes."
            for role, (rows, gate) in sorted(failing.items())]


def _gate_margin(gate: dict) -> str:
    """By how much a pmf fails its gate, and on what budgets (``gate``: ``models.task_models.quality_gate_of``)."""
    out = ""
    if "fid_pmf" in gate and "fid_tweedie" in gate:
        a, b = gate["fid_pmf"], gate["fid_tweedie"]
        out += (f" (one-step FID {format_value(a)} against the DDPM's Tweedie FID {format_value(b)} at t 0.4: it fails "
                f"its gate by {format_value(a - b)}, {100 * (a - b) / b:.0f} %)")
    if gate.get("steps") and gate.get("ddpm_steps"):
        s, d = int(gate["steps"]), int(gate["ddpm_steps"])
        out += (f"; PMF and DDPM at equal training steps ({s:,})" if s == d
                else f"; the PMF trained {s:,} steps, the DDPM {d:,}")
    return out
