"""Comparison tables (CSV / Markdown / LaTeX) and their footers, Pareto figures, and the metric-regression
check used by CI (the paper's figures: :mod:`vcebench.report.figures`).

- :mod:`.tables`: one row per method from the results, cell formatting, ranking marks, the writers;
- :mod:`.footer`: the footer paragraphs of a task table;
- :mod:`.pairs`: paired tests between a task's rows (from their ``samples.npz``) and the marks they decide;
- :mod:`.pareto`: quality-vs-cost fronts of the budget / noise-level sweeps;
- :mod:`.regression`: a table against its reference within tolerances (the seeds' band, the CPU-kind drift);
- :mod:`.paired`: a rerun's per-input records against the reference's, input by input (CI's default);
- :mod:`.plants`: faults planted on a run's counterfactuals (scripts/plant_regression.py, their tests);
- :mod:`.validity`: each metric column against the true counterfactual and the unedited input.
"""

from ..core.io import atomic_path
from .footer import load_metrics_json, load_profiles, resolution_lines, task_footer
from .pareto import pareto_figures, pareto_front
from .regression import regression_check, regression_markdown
from .tables import load_task_table, method_label, to_latex, to_markdown, write_task_tables, write_text
from .validity import (
    attack_lines,
    check_attacks,
    check_columns,
    marked_columns,
    regenerating_rows,
    regeneration_lines,
    validity_lines,
    write_validity,
)

__all__ = [
    "atomic_path", "attack_lines", "check_attacks", "check_columns", "load_metrics_json", "load_profiles",
    "load_task_table", "marked_columns", "method_label", "pareto_figures", "pareto_front", "regenerating_rows",
    "regeneration_lines", "regression_check", "regression_markdown", "resolution_lines", "task_footer", "to_latex",
    "to_markdown", "validity_lines", "write_task_tables", "write_text", "write_validity",
]
