"""`vcebench explain` as a library (its arguments and printing: :mod:`vcebench.cli.explain`): counterfactuals
for one shard of a task's evaluation set, or the shards merged into one file.

The contract:

- **Which inputs a shard explains.** The evaluation inputs are the first ``n_eval`` (config key) sample ids
  of the task's evaluation split, sorted; shard ``i`` of ``n`` takes ``sorted_ids[i::n]`` (:func:`shard_ids`).
  Every sample draws its noise from its own stream, seeded by config ``seed``, its sample id and the method
  (``vcebench.core.rng.SampleGenerators``), so a counterfactual depends neither on the sharding nor on
  ``batch_size``, and merging the shards of any ``n`` gives the same file.
- **The shard file** ``shard-<i>-of-<n>.npz`` (:func:`explain_shard`) holds one row per input of the shard
  (docs/internals.md "Counterfactual files"): ``sample_id``, ``cf`` (uint8), ``target`` (1 - the
  classifier's prediction), ``pred``, ``flipped``, ``steps``, ``failed``, ``input_hash`` (the uint8 input and
  CF fingerprinted, which `vcebench evaluate` checks against the dataset) and the ``info_<key>`` arrays the
  method records, ``info_fail_reason`` among them (a row the method could not start from keeps its input:
  an unreadable image, a non-finite input or logit).
- **The timing file** ``timing-<i>-of-<n>.json`` beside it (:func:`timing_path`) holds the shard's costs:
  ``seconds`` spent in generation only (no data loading or I/O), ``n``, ``batch_size``, ``sec_per_cf``, the
  peak memory during generation (``peak_mem_mb``, ``peak_mem_kind``), the FLOPs of one call of each network
  the method called (``flops_per_call``; counted after generation), the machine (device, threads, torch,
  CPU kernels) and the unreadable inputs by sample id.
- **Merging** (:func:`merge_shards`) needs every shard of one ``-of-<n>`` once and no sample id twice, and
  writes the rows sorted by sample id; :func:`merge_timings` merges the timing files into the method's
  ``profile.json`` (``vcebench.costs.columns.explain_profile``).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import UserError
from ..core.io import load_npz, save_npz, to_uint8, write_json
from ..registry import builtin_method_names  # noqa: F401 (the CLI's help names them)
from .batches import BatchStore, SavedBatch, batch_key

if TYPE_CHECKING:
    import torch

    from ..protocol.run_settings import RunSettings


SHARD_RE = re.compile(r"shard-(\d+)-of-(\d+)\.npz$")


class ShardError(UserError, ValueError):
    """Bad shard arguments or an inconsistent set of shard files; the message says which."""


def shard_settings(config: list[str] | None, task: str, method: str, *, seed: int | None = None,
                   n_eval: int | None = None, data_dir: str | None = None,
                   model_dir: str = "resources/models") -> RunSettings:
    """The settings one explain job runs: the config files ``config`` checked for ``task`` and ``method``;
    ``seed`` (generation seed, the networks unchanged) and ``n_eval`` in place of the config's."""
    from ..protocol.run_settings import RunSettings
    from ..protocol.settings import load_settings

    cfg = load_settings(config, only=(task, method))  # the settings this job runs
    if seed is not None:  # in the config too: the loaders read the whole of it
        cfg["seed"] = int(seed)
    if n_eval is not None:
        cfg["n_eval"] = int(n_eval)
    return RunSettings.resolve(cfg, task, method, data_dir=data_dir, model_dir=model_dir)


def timing_path(out: Path) -> Path:
    """``.../shard-i-of-n.npz`` -> ``.../timing-i-of-n.json``."""
    name = out.name
    return out.with_name(name.replace("shard-", "timing-", 1).rsplit(".npz", 1)[0] + ".json")


def shard_ids(all_ids: torch.Tensor, n_eval: int, shard: int, n_shards: int) -> torch.Tensor:
    """Shard ``shard`` of ``n_shards`` of the first ``n_eval`` sorted sample ids."""
    import torch

    ids = torch.sort(torch.as_tensor(all_ids, dtype=torch.int64)).values[:n_eval]
    return ids[shard::n_shards]


def explain_shard(settings: RunSettings, shard: int, n_shards: int, out: Path,
                  config_paths: list[str] | None = None) -> dict:
    """Load the task's networks and evaluation split, generate this shard's counterfactuals, write them
    (``config_paths``: the config files the job was given, for the timing file's provenance record).

    The loaders read whole sections of the configuration (datasets, the model zoo, the DDPM schedule): they
    get ``settings.config``, the read-only view of it."""
    from ..core.io import check_writable
    from ..core.runtime import setup_torch
    from ..data import load_split
    from ..models import load_task_models
    from ..models.accelerate import accelerate_from_config
    from ..protocol.noise import check_ddpm_schedule
    from ..protocol.provenance import job_record

    check_writable(Path(out).parent, "the counterfactuals")  # before any work, not after generation
    rt, task, cfg = settings.runtime, settings.task, settings.config
    device = setup_torch(rt.threads, rt.device, rt.cuda)
    provenance = job_record(settings, config_paths)  # a changed split file fails here, before any work
    method = settings.build_method()
    split = load_split(cfg, task.dataset, settings.split, data_dir=settings.data_dir)
    ids = shard_ids(split.sample_ids, settings.n_eval, shard, n_shards)
    models = load_task_models(cfg, task, roles=method.roles, device=str(device), model_dir=settings.model_dir)
    if "ddpm" in method.roles:  # the start step was derived from this schedule
        check_ddpm_schedule(cfg, task.dataset, models.ddpm.alphas_cumprod.cpu().numpy())
    models = accelerate_from_config(models, rt.cuda, device)
    rows = split.index_of(ids)

    def load_images(idx):  # an unreadable image fails its sample, not the shard
        errors: dict[int, str] = {}
        return split.float_images(rows[idx], errors=errors), errors

    return generate(method, load_images, ids, models, settings, out, device, provenance=provenance,
                    store=BatchStore(out, batch_key(settings, models)))


def _start_rows(x: torch.Tensor, logits: torch.Tensor, errors: dict[int, str], row_ids: torch.Tensor,
                unreadable: dict[int, str], target: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fail reason, prediction, target) of a batch: 0 for the rows a method can start from, else the code of
    why not (an unreadable image, listed into ``unreadable`` by sample id; a non-finite input or logit). The
    target is ``target`` where given (the Python API's), else 1 - prediction."""
    import torch

    from methods.base import FAIL_NONFINITE_INPUT, FAIL_NONFINITE_INPUT_LOGITS, FAIL_UNREADABLE_INPUT, nonfinite

    reason = torch.zeros(len(row_ids), dtype=torch.int64)
    reason[nonfinite(logits).cpu()] = FAIL_NONFINITE_INPUT_LOGITS
    reason[nonfinite(x).cpu()] = FAIL_NONFINITE_INPUT
    for k, why in errors.items():
        reason[k] = FAIL_UNREADABLE_INPUT
        unreadable[int(row_ids[k])] = why
    pred = torch.where(reason == 0, logits.argmax(1).cpu(), torch.full_like(reason, -1))
    wanted = 1 - pred if target is None else target.to(torch.int64).cpu()
    target = torch.where(reason == 0, wanted, torch.ones_like(pred))
    return reason, pred, target


def _shard_arrays(parts: list, ids: torch.Tensor, preds: list, targets: list, inputs_u8: list) -> dict:
    """The shard npz's arrays from the batches' counterfactuals, predictions, targets and uint8 inputs."""
    import torch

    from methods.base import cat_counterfactuals

    from ..core.io import input_fingerprint

    cf = cat_counterfactuals(parts)
    cf_u8 = to_uint8(cf.images)
    arrays = {"sample_id": ids.numpy().astype(np.int64), "cf": cf_u8,
              "target": torch.cat(targets).numpy().astype(np.int64),
              "pred": torch.cat(preds).numpy().astype(np.int64),
              "flipped": cf.flipped.numpy().astype(bool), "steps": cf.steps.numpy().astype(np.int64),
              "failed": cf.info.get("failed", torch.zeros(len(ids), dtype=torch.bool)).numpy().astype(bool),
              "input_hash": input_fingerprint(np.concatenate(inputs_u8), cf_u8)}
    arrays.update({f"info_{k}": v.cpu().numpy() for k, v in cf.info.items() if k != "failed"})
    return arrays


def generate(method, load_images, ids: torch.Tensor, models, settings: RunSettings, out: Path,
             device: torch.device | str = "cpu", provenance: dict | None = None,
             store: BatchStore | None = None) -> dict:
    """Run ``method`` over ``ids`` in batches of ``settings.batch_size``; write the shard npz + timing json.

    Each sample's noise comes from its own stream (``vcebench.core.rng``) of ``settings.seed`` and
    ``settings.method``, on the device of ``settings.runtime.cuda`` (``vcebench.core.runtime.noise_device``).

    ``load_images(idx)`` returns the [-1, 1] images of positions ``idx`` of ``ids``, or (those images,
    {position in the batch: reason} of images that could not be read). Target = 1 - classifier
    prediction. Samples the method cannot start from fail with their own code and keep their input as
    CF: an unreadable image (``FAIL_UNREADABLE_INPUT``, also listed in the timing json) and a non-finite
    classifier output on the input (``FAIL_NONFINITE_INPUT_LOGITS``, ``pred`` = -1). ``input_hash``
    (``vcebench.core.io.input_fingerprint`` of the uint8 input and CF) lets ``vcebench evaluate`` check each
    row against the dataset. ``provenance`` (:func:`vcebench.protocol.provenance.job_record`) goes into the timing
    record as it is. ``store``: each finished batch saved, and the saved ones of an interrupted run taken
    (:class:`BatchStore`; the timing record says how many). Returns the timing record.
    """
    from ..core.runtime import noise_device

    run = run_batches(method, load_images, ids, models, batch_size=settings.batch_size, seed=settings.seed,
                      stream=settings.method, device=device,
                      gen_device=noise_device(settings.runtime.cuda, device), desc=f"{method.name} {out.name}",
                      store=store)
    parts, preds, targets, inputs_u8, seconds, unreadable, memory = run
    bs = settings.batch_size
    record = {"seconds": seconds, "n": len(ids), "batch_size": bs, "method": method.name,
              "sec_per_cf": seconds / max(1, len(ids)), "peak_mem_mb": memory.peak_mb, "peak_mem_kind": memory.kind,
              **_run_record(models, parts, device), "unreadable": {str(k): v for k, v in unreadable.items()}}
    if provenance is not None:
        record["provenance"] = provenance
    if store is not None and store.resumed:  # their seconds are the run's that made them; the peak is this run's
        record["resumed_batches"] = store.resumed
    save_npz(out, **(_shard_arrays(parts, ids, preds, targets, inputs_u8) if parts else _empty_shard()))
    write_json(timing_path(out), record)
    if store is not None:
        store.clear()
    return record


def run_batches(method, load_images, ids: torch.Tensor, models, *, batch_size: int, seed: int, stream: str,
                device: torch.device | str = "cpu", gen_device: torch.device | str = "cpu", desc: str = "",
                target: torch.Tensor | None = None, progress: bool = True, store: BatchStore | None = None) -> tuple:
    """The generation loop of :func:`generate` (and of the Python API, ``vcebench.explain``): ``method`` over
    ``ids`` in batches, each sample's noise from stream ``stream`` of ``seed`` and its id. ``target``: the
    target class of every position of ``ids`` (None: 1 - the classifier's prediction). Returns (the batches'
    Counterfactuals with the failed rows filled in, predictions, targets, uint8 inputs, seconds of
    generation, unreadable images by sample id, the PeakMemory record). ``store`` (:class:`BatchStore`): each
    finished batch saved; a batch it holds is taken, not generated."""
    import torch
    from tqdm import tqdm

    from ..core.rng import SampleGenerators
    from ..costs.measure import PeakMemory

    parts, preds, targets, inputs_u8, seconds = [], [], [], [], 0.0
    unreadable: dict[int, str] = {}
    # peak memory of generation: the kernel's high-water mark where it can be reset (no overhead)
    with PeakMemory(device, interval=0.01) as memory:
        for start in tqdm(range(0, len(ids), batch_size), desc=desc, unit="batch", disable=not progress):
            idx = torch.arange(start, min(start + batch_size, len(ids)))
            loaded = load_images(idx)
            x, errors = loaded if isinstance(loaded, tuple) else (loaded, {})
            x_u8 = to_uint8(x)  # on the host, before the copy to the device
            x = x.to(device)
            saved = store.load(start, ids[idx], x_u8) if store is not None else None
            if saved is not None:
                for out, v in zip((parts, preds, targets, inputs_u8), saved.batch):
                    out.append(v)
                seconds += saved.seconds
                unreadable.update(saved.unreadable)
                continue
            inputs_u8.append(x_u8)
            t0 = time.perf_counter()
            with torch.no_grad():
                logits = models.classifier(x)
            reason, pred, tgt = _start_rows(x, logits, errors, ids[idx], unreadable,
                                            None if target is None else target[idx])
            ok = reason == 0
            cf = None
            if bool(ok.any()):
                sel = ok.nonzero().squeeze(1)
                cf = method(x[sel.to(x.device)], tgt[sel].to(x.device), models,
                            SampleGenerators(seed, ids[idx][sel], stream=stream, device=gen_device))
            if torch.cuda.is_available() and str(device).startswith("cuda"):
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            seconds += dt
            parts.append(_with_failed_rows(cf, ok, reason, x))
            preds.append(pred)
            targets.append(tgt)
            if store is not None:
                store.save(start, ids[idx], SavedBatch((parts[-1], pred, tgt, inputs_u8[-1]), dt,
                                                       {int(i): unreadable[int(i)] for i in ids[idx]
                                                        if int(i) in unreadable}))
    if unreadable:
        from methods.base import FAIL_UNREADABLE_INPUT

        print(f"vcebench explain: {len(unreadable)} unreadable input image(s) failed (fail_reason "
              f"{FAIL_UNREADABLE_INPUT}): " + "; ".join(f"{k}: {v}" for k, v in list(unreadable.items())[:5]),
              file=sys.stderr)
    return parts, preds, targets, inputs_u8, seconds, unreadable, memory


def _run_record(models, parts: list, device: torch.device | str) -> dict:
    """The timing record's machine fields and ``flops_per_call`` of every network the shard's counterfactuals
    called (counted after generation, outside its time)."""
    import torch

    from ..config.kernels import record as kernel_record
    from ..costs.columns import network_call_flops
    from ..costs.measure import FLOP_CONVENTION, cat_info, device_name, nfe_by_network

    out = {"device": device_name(device), "threads": torch.get_num_threads(), "torch": torch.__version__,
           "kernels": kernel_record(), "models": dict(getattr(models, "names", {}) or {}),
           "gates": dict(getattr(models, "gates", {}) or {}), "flop_convention": FLOP_CONVENTION,
           "flops_per_call": {}}
    if parts:
        info, _ = cat_info(parts)
        example = parts[0].images[:1]  # its shape: per_call_flops runs each network on zeros
        try:
            out["flops_per_call"] = network_call_flops(models, example, nfe_by_network(info))["flops_per_call"]
        except Exception as e:  # noqa: BLE001 (the counterfactuals are made: a counting failure must not lose them)
            out["flops_error"] = f"{type(e).__name__}: {e}"
            print(f"vcebench explain: warning: FLOPs per network call not counted ({out['flops_error']}); "
                  "the table's TFLOPs/CF will be empty", file=sys.stderr)
    return out


def _with_failed_rows(cf, ok, reason, x):
    """The batch's Counterfactuals: the method's rows where ``ok``, the input (failed, ``reason``) elsewhere."""
    import torch

    from methods.base import NFE, Counterfactuals

    n = len(ok)
    if bool(ok.all()):
        return Counterfactuals(images=cf.images.cpu(), flipped=cf.flipped.cpu(), steps=cf.steps.cpu(),
                               info={k: v.cpu() for k, v in cf.info.items()})
    sel = ok.nonzero().squeeze(1)
    info: dict[str, torch.Tensor] = {k: torch.zeros(n, dtype=torch.float64) for k in NFE(0).counts}
    if cf is not None:
        for k, v in cf.info.items():
            full = torch.zeros((n, *v.shape[1:]), dtype=v.dtype)
            full[sel] = v.cpu()
            info[k] = full
    failed = info.get("failed", torch.zeros(n, dtype=torch.bool)).bool() | ~ok
    old = info.get("fail_reason", torch.zeros(n, dtype=torch.int64)).to(torch.int64)
    info["failed"], info["fail_reason"] = failed, torch.where(ok, old, reason)
    images = torch.nan_to_num(x.detach().cpu().clamp(-1, 1))
    flipped = torch.zeros(n, dtype=torch.bool)
    steps = torch.zeros(n, dtype=torch.int64)
    if cf is not None:
        images[sel], flipped[sel], steps[sel] = cf.images.cpu(), cf.flipped.cpu(), cf.steps.cpu()
    return Counterfactuals(images=images, flipped=flipped, steps=steps, info=info)


def _empty_shard() -> dict:
    return {"sample_id": np.zeros(0, np.int64), "cf": np.zeros((0, 1, 1, 1), np.uint8),
            "target": np.zeros(0, np.int64), "pred": np.zeros(0, np.int64), "flipped": np.zeros(0, bool),
            "steps": np.zeros(0, np.int64), "failed": np.zeros(0, bool), "input_hash": np.zeros(0, np.int64)}


def merge_timings(paths: list[Path], out: Path) -> dict:
    """The shards' timing records (``timing-<i>-of-<n>.json``) merged into one ``profile.json`` at ``out``."""
    from ..costs.columns import CostRecordError, read_explain_profile

    try:
        profile = read_explain_profile(paths)
    except CostRecordError as e:
        raise ShardError(f"{e}; rerun the shard(s)") from e
    write_json(out, profile)
    return profile


def merge_shards(paths: list[Path], out: Path) -> None:
    """Concatenate shard files sorted by sample id; every shard of ``-of-n`` present, no id twice."""
    if not paths:
        raise ShardError("no shard files to merge")
    found: dict[int, Path] = {}
    n_total = None
    for p in paths:
        m = SHARD_RE.search(p.name)
        if not m:
            raise ShardError(f"{p}: not a shard file name (expected shard-<i>-of-<n>.npz)")
        i, n = int(m.group(1)), int(m.group(2))
        if n_total is not None and n != n_total:
            raise ShardError(f"{p}: shard of {n}, but other shards are of {n_total}")
        if i in found:
            raise ShardError(f"shard {i} given twice: {found[i]} and {p}")
        n_total, found[i] = n, p
    missing = sorted(set(range(n_total)) - set(found))
    if missing:
        raise ShardError(f"missing shard(s) {missing} of {n_total} (expected shard-<i>-of-{n_total}.npz)")
    shards = [load_npz(found[i]) for i in range(n_total)]
    shards = [s for s in shards if len(s["sample_id"])]
    if not shards:
        save_npz(out, **_empty_shard())
        return
    keys = set.intersection(*(set(s) for s in shards))
    merged = {k: np.concatenate([s[k] for s in shards]) for k in sorted(keys)}
    ids = merged["sample_id"]
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise ShardError(f"sample id(s) {uniq[counts > 1][:10].tolist()} appear in more than one shard")
    order = np.argsort(ids, kind="stable")
    save_npz(out, **{k: v[order] for k, v in merged.items()})

