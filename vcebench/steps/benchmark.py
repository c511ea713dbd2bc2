"""`vcebench benchmark` as a library (its arguments and printing: :mod:`vcebench.cli.benchmark`): the time of
`vcebench evaluate` on N stand-in counterfactuals (a benchmark, not a test).

Counterfactuals are stand-ins: each original with a random 8 x 8 patch brightened, so the timing covers
every metric of the task on realistic shapes; the networks are random (the synthetic zoo's architectures,
or tiny ones) or the trained ones. Loading the splits and the FID reference are timed apart.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any


def benchmark(config: list[str] | None, task: str, n: int, *, trained: bool = False, tiny: bool = False,
              model_dir: str = "resources/models", data_dir: str | None = None) -> dict[str, Any]:
    """The metrics.json of `vcebench evaluate` on ``n`` stand-in counterfactuals of ``task`` with its
    ``benchmark`` record: the seconds of loading the data, of the FID reference and of the evaluation."""
    import torch

    from metrics.fid import compute_reference

    from ..config.load import ConfigError, load_config
    from ..config.tasks import get_task
    from ..core.runtime import setup_torch
    from ..costs.standins import arch_standin_models, fake_counterfactuals, standin_models
    from ..data import eval_split_name, load_split
    from ..protocol.run_settings import EvalSettings
    from .evaluate import evaluate_task

    cfg = load_config(config)
    setup_torch(cfg.get("threads"))
    task = get_task(cfg, task)
    t0 = time.perf_counter()
    split = load_split(cfg, task.dataset, eval_split_name(task.dataset), data_dir)
    load_split(cfg, task.dataset, "train", data_dir)  # memoised for CD
    t_data = time.perf_counter() - t0
    if len(split) < n:
        raise ConfigError(f"--n {n}: the evaluation split has only {len(split)} images")
    if trained:
        from metrics import required_roles

        from ..models import load_task_models

        models = load_task_models(cfg, task, roles=required_roles(task), model_dir=model_dir)
    x = split.float_images(slice(0, n))
    if not trained:
        build = standin_models if tiny else arch_standin_models
        models = build(split.attribute_names, split.images.shape[1], threshold=float(x.flatten(1).mean(1).median()))
    with tempfile.TemporaryDirectory() as tmp:
        cfs, ref = Path(tmp) / "counterfactuals.npz", Path(tmp) / "fid_ref.npz"
        fake_counterfactuals(x, split.sample_ids[:n], models.classifier, cfs)
        t1 = time.perf_counter()
        bs = int(cfg["metrics"]["batch_size"])
        compute_reference((split.float_images(slice(s, s + bs)) for s in range(0, len(split), bs)),
                          split.sample_ids, models.fid_features, models.names["fid_features"]).save(ref)
        t_ref = time.perf_counter() - t1
        t2, c2 = time.perf_counter(), time.process_time()
        result = evaluate_task(EvalSettings.resolve(cfg, task, "benchmark", data_dir=data_dir), str(cfs),
                               fid_ref=str(ref), models=models)
        t_eval, c_eval = time.perf_counter() - t2, time.process_time() - c2
    result["benchmark"] = {"n": n, "seconds_data": t_data, "seconds_reference": t_ref,
                           "n_reference": len(split), "seconds_evaluate": t_eval,
                           "cpu_seconds_evaluate": c_eval, "threads": torch.get_num_threads(),
                           "models": "trained" if trained else ("tiny" if tiny else "arch") + " stand-ins"}
    return result
