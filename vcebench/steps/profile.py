"""`vcebench profile` as a library (its arguments and printing: :mod:`vcebench.cli.profile`):
FLOPs, NFE, time and memory per counterfactual.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..config.load import ConfigError


def ratio_table(reports: dict[str, dict[str, Any]], ref: str) -> str:
    """Markdown table of every profiled method against ``ref`` (the first --method): how many times
    more seconds and FLOPs per CF it needs, with each flip rate (the speed claim holds at equal FR)."""
    r = reports[ref]
    lines = [f"| method | s/CF | TFLOPs/CF | FR (%) | s/CF vs {ref} | FLOPs vs {ref} |",
             "|---|---:|---:|---:|---:|---:|"]
    for m, d in reports.items():
        lines.append(f"| {m} | {d['sec_per_cf']:.4f} | {d['tflops_per_cf']:.3g} | {100 * d['flip_rate']:.1f} | "
                     f"{d['sec_per_cf'] / r['sec_per_cf']:.2f}x | {d['flops_per_cf'] / r['flops_per_cf']:.2f}x |")
    return "\n".join(lines)


def mean_steps_from(path: str) -> tuple[str, float]:
    try:
        d = json.loads(Path(path).read_text())
        return f"measured: {d.get('task', '?')}/{d.get('method', '?')} (n = {d.get('n', '?')})", float(d["mean_steps"])
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise ConfigError(f"--fire-steps-from {path}: expected a vcebench profile.json with `mean_steps` ({e})") from e

