"""`vcebench report pairs` as a library: a task's paired comparisons (``<task>_pairs.{csv,md}``) and their summary
over tasks (``summary_pairs.md``, ``summary_cd.png``); the methods: :mod:`vcebench.report.pairs`,
:mod:`vcebench.report.pair_summary`."""

from __future__ import annotations

from pathlib import Path


def pairs_report(cfg: dict, task_name: str, methods: list[str], results: Path, out_dir: Path) -> Path:
    """Writes ``<out_dir>/<task>_pairs.{csv,md}`` from the rows' metrics.json and samples.npz; returns the .md."""
    from .. import report
    from ..config.tasks import get_task
    from ..report import pairs

    task = get_task(cfg, task_name)
    df, higher = report.load_task_table(results, task_name, methods, task.kind, task.synthetic)
    unranked = report.regenerating_rows(report.load_metrics_json(results, task_name, methods))
    table, _, _ = pairs.task_pairs(results, task_name, df, higher, unranked)
    pairs.write_pairs(out_dir, task_name, table)
    return Path(out_dir) / f"{task_name}_pairs.md"


def pairs_summary(tasks: list[str], out_dir: Path) -> str:
    """Writes ``<out_dir>/summary_pairs.md`` and ``summary_cd.png`` from the tasks' ``<task>_pairs.csv``."""
    from .. import registry
    from ..report.pair_summary import summarize

    return summarize(out_dir, tasks, registry.column_directions())
