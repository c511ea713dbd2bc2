"""Shipping a trained network set (``vcebench models ship``): copy each trained role folder of a model
directory into ``networks/<set>/<dataset>/<role>/`` with its card (``vcebench.models.shipping.cards``).

The card's recipe is the config's; a folder whose recorded training settings disagree with it is refused
(the card would lie). Quality numbers are the ones its trainer measured (gates, accuracy, agreement with
the true counterfactuals, FID of the generators once re-evaluated), and for the generators the training
curve of ``vcebench models curve`` when ``curves`` holds one.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from ..config.load import ConfigError
from ..models.shipping.cards import START, replaced_entry, same_recipe_keys, start_entry, write_card

SKIP_PARTS = ("checkpoint", "snapshots")
QUALITY_KEYS = ("gates", "truth_vs_regenerate", "test_accuracy", "test_mean_accuracy", "truth", "verification",
                "fooling",
                "knn10_test_accuracy", "fid_train_vs_test", "distance_sanity", "eval", "eval_fid", "quality_gate",
                "test_cos_two_views_same_image", "test_cos_two_views_different_images",
                "test_cos_clean_different_images", "collapse_check_std_x_sqrt_dim")


def install(cfg: dict, role: str, task: str, *, out_dir: str | None, model_dir: str, networks: str | None,
            progress: bool) -> dict[str, Any] | None:
    """The shipped network of ``role`` installed without starting torch (a file copy; ``train_role`` does the
    same when called as a library) when its card has the config's recipe (``cfg``: validated against the
    schema; the role's settings are the card's, checked when it was trained); returns its metrics, or None
    (train it). Not under torchrun: there every process takes the training path, and only its writer copies."""
    import os

    from ..config.tasks import get_task
    from ..models.shipping.cards import install_shipped, shipped_folder

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return None
    ds = get_task(cfg, task).dataset
    out = Path(out_dir) if out_dir else Path(model_dir) / ds / role
    # say_why=False: the training path checks the settings first, then says why it trains
    return install_shipped(cfg, ds, role, shipped_folder(networks, cfg), out, progress=progress, say_why=False)


def parity(cfg: dict, dataset: str, model_dir: str, data_dir: str | None, n: int, out: Path) -> str:
    """`models parity` (``vcebench.protocol.parity``) on the CPU: writes ``out`` (JSON) and the table beside it
    (.md); returns the table."""
    from ..core.io import write_json, write_text
    from ..core.runtime import setup_torch
    from ..protocol.parity import measure, to_markdown

    setup_torch(cfg["threads"], "cpu")
    res = measure(cfg, dataset, model_dir, data_dir, n)
    write_json(out, res)
    md = to_markdown(res)
    write_text(out.with_suffix(".md"), md)
    return md


def recorded_settings(folder: Path) -> dict[str, Any]:
    """The training settings a trained folder's ``config.json`` recorded (``config`` for ddpm / pmf,
    ``train`` for the small roles)."""
    c = json.loads((folder / "config.json").read_text())
    return c.get("config") or c.get("train") or {}


def check_recipe(cfg: dict, dataset: str, role: str, folder: Path) -> None:
    """Every key of the config's recipe for ``dataset``/``role`` equals what ``folder`` was trained with."""
    spec = ((cfg.get("models") or {}).get(dataset) or {}).get(role) or {}
    have = json.loads(json.dumps(same_recipe_keys(recorded_settings(folder)), default=str))
    want = json.loads(json.dumps(same_recipe_keys(spec), default=str))
    bad = [f"{k}: config {want[k]!r}, trained {have.get(k)!r}" for k in sorted(want) if have.get(k) != want[k]]
    if bad:
        raise ConfigError(f"{folder} was not trained with the config's recipe `models.{dataset}.{role}` "
                          f"({'; '.join(bad[:4])}); ship it with the config it was trained with")


def trained_info(metrics: dict[str, Any], where: str) -> dict[str, Any]:
    t = metrics.get("training", metrics)
    keys = ("steps", "batch_size", "train_seconds", "images_per_second", "device", "threads", "amp",
            "peak_gpu_memory_mib", "loss_last")
    return {"where": where, **{k: t[k] for k in keys if t.get(k) is not None}}


GENERATIVE_ROLES = ("ddpm", "pmf")  # the roles with a training budget (their objectives: ddpm_objective, pmf_training)


def generative_budget(cfg: dict, dataset: str, role: str, model_dir: str | Path) -> dict[str, Any]:
    """The training budget of the config's ``dataset``/``role`` recipe (``ddpm`` or ``pmf``): steps x batch and
    FLOPs, one step of each of its objective's modes counted (``vcebench.costs.budget``). The networks
    a pmf's losses train against are read from ``model_dir`` (their weights do not change the count)."""
    import torch

    from ..config.tasks import get_task, task_for_dataset
    from ..costs.budget import run_budget
    from ..data.registry import get_synthetic
    from ..models.generative.ddpm import build_ddpm, ddpm_objective
    from ..models.generative.pmf import pmf_training
    from ..models.training.settings import require
    from .train import loss_networks

    spec = cfg["models"][dataset][role]
    steps, bs = int(require(spec, "steps", role)), int(require(spec, "batch_size", role))
    ds = get_synthetic(cfg, dataset)
    x = torch.zeros((bs, ds.channels, ds.resolution, ds.resolution))
    torch.manual_seed(0)
    if role == "ddpm":
        ddpm = build_ddpm(spec, ds.channels, ds.resolution)
        model, loss_fn = ddpm.unet, ddpm_objective(ddpm)
    elif role == "pmf":
        task = get_task(cfg, task_for_dataset(cfg, dataset))
        model, loss_fn, _, _ = pmf_training(spec, ds.channels, ds.resolution,
                                            loss_networks(cfg, task, role, Path(model_dir)))
    else:
        raise ConfigError(f"a training budget is counted for the generative roles ({', '.join(GENERATIVE_ROLES)}), "
                          f"not {role!r}")
    return run_budget(model, loss_fn, steps, x)


def ship(cfg: dict, models: str | Path, out: str | Path, set_name: str, where: str | None,
         curves: str | Path | None = None, roles: list[str] | None = None) -> list[dict[str, Any]]:
    """Copy every trained ``models/<dataset>/<role>`` (of the config's synthetic datasets) into
    ``out/<dataset>/<role>`` with a card; returns the cards. ``roles``: only these (``role`` for every dataset,
    ``dataset/role`` for one). ``where=None`` keeps the ``trained.where`` of the
    card already in each folder (a shipped network re-measured, not retrained)."""
    from ..config.tasks import SYNTHETIC_DATASETS
    from ..core.io import copy_file

    cards = []
    for ds in SYNTHETIC_DATASETS:
        for folder in sorted(Path(models, ds).glob("*/metrics.json")):
            src, role = folder.parent, folder.parent.name
            if roles and role not in roles and f"{ds}/{role}" not in roles:
                continue
            check_recipe(cfg, ds, role, src)
            metrics = json.loads(folder.read_text())
            quality = {k: metrics[k] for k in QUALITY_KEYS if k in metrics}
            curve = _finished_curve(Path(curves, ds, role, "curve.json") if curves else None)
            dst = Path(out) / ds / role
            tmp = dst.with_name(dst.name + ".shipping")  # built aside, then swapped: a failure leaves dst as it was
            if tmp.exists():
                shutil.rmtree(tmp)
            for f in sorted(src.rglob("*")):
                if f.is_file() and not any(p in SKIP_PARTS for p in f.relative_to(src).parts):
                    copy_file(f, tmp / f.relative_to(src))
            spec = cfg["models"][ds][role]
            if spec.get("init_sha256"):  # a continued run ships the weights it started from beside its own
                copy_file(_start_weights(spec, src, dst), tmp / START)
            history = _history(src, dst, tmp)
            budget = None
            if role in GENERATIVE_ROLES:
                budget = with_start(generative_budget(cfg, ds, role, models), spec, history, dst)
            card = write_card(tmp, cfg, ds, role, set_name, trained_info(metrics, where or _shipped_where(src)),
                              quality, curve, budget, history)
            if dst.exists():
                shutil.rmtree(dst)
            tmp.rename(dst)
            cards.append(card)
    return cards


def count_budgets(cfg: dict, networks: str | Path) -> list[dict[str, Any]]:
    """Count the training budget of every shipped generator of ``networks`` (``<set>/<dataset>/<ddpm|pmf>``)
    and write it into its card (``card.json`` and ``card.md``; the files the card hashes are unchanged);
    returns the cards. The config's recipe must be the card's (what is counted is the config's)."""
    from ..config.tasks import SYNTHETIC_DATASETS
    from ..models.shipping.cards import read_card, recipe_differences, rewrite_card

    cards = []
    for ds in SYNTHETIC_DATASETS:
        for role in GENERATIVE_ROLES:
            card = read_card(networks, ds, role)
            if card is None:
                continue
            diff = recipe_differences(card, cfg, ds, role)
            if diff:
                raise ConfigError(f"{networks}/{ds}/{role}: the config's recipe is not the card's "
                                  f"({'; '.join(diff[:3])}): count it with the config it was shipped with")
            folder = Path(networks) / ds / role
            card["budget"] = with_start(generative_budget(cfg, ds, role, networks), cfg["models"][ds][role],
                                        card.get("history", []), folder)
            rewrite_card(folder, card)
            cards.append(card)
    return cards


def budgets_text(cards: list[dict[str, Any]]) -> str:
    """What :func:`count_budgets` counted, for a reader: the generators' budgets side by side (the table
    docs/networks.md carries) and the FLOP convention."""
    from ..models.shipping.cards import budgets_table

    return budgets_table(cards) + "\n" + (cards[0]["budget"]["convention"] if cards else "no shipped generator") + "\n"


def with_start(budget: dict[str, Any], spec: dict[str, Any], history: list[dict[str, Any]],
               dst: Path) -> dict[str, Any]:
    """A run's ``budget`` with its start's (``spec``: its recipe; a continued recipe's start is the network of
    ``history`` with its ``init_sha256`` weights): a start without a counted budget is an error."""
    from ..costs.budget import total_budget

    if not spec.get("init_sha256"):
        return budget
    start = start_entry(history, spec["init_sha256"])
    if start is None or "budget" not in start:
        why = "no network of its card history has them" if start is None else "their card has no budget"
        raise ConfigError(f"{dst}: the recipe continues weights with sha256 {spec['init_sha256']}, and {why}: "
                          f"count the budgets of the set it continues first (`vcebench models budget --models "
                          f"{dst.parent.parent}`)")
    return total_budget(budget, start["budget"])


def _start_weights(spec: dict[str, Any], src: Path, dst: Path) -> Path:
    """The file of the weights a continued recipe started from (``init_sha256``): where its run read them
    (``config.json``), where the config names them, or the shipped network it replaces (``dst``)."""
    from ..core.io import sha256

    want = spec["init_sha256"]
    places = [recorded_settings(src).get("init_from"), spec.get("init_from"), src / START, dst / START,
              dst / "model.safetensors"]
    for p in [Path(p) for p in places if p]:
        if p.is_file() and sha256(p) == want:
            return p
    raise ConfigError(f"{src} continued weights with sha256 {want} (`init_sha256`), and none of "
                      f"{', '.join(str(p) for p in places if p)} has them: ship it where its start is")


def _history(src: Path, dst: Path, new: Path) -> list[dict[str, Any]]:
    """The history of the card for ``new`` (``src`` shipped, about to replace ``dst``): ``dst``'s card's history
    and ``dst``'s network itself when ``new`` has other weights; where ``dst`` has no card, ``src``'s history (a
    shipped set re-measured into another folder)."""
    import datetime

    from ..core.io import sha256
    from ..models.shipping.cards import CARD

    if not (dst / CARD).is_file():
        return list(json.loads((src / CARD).read_text()).get("history", [])) if (src / CARD).is_file() else []
    old = json.loads((dst / CARD).read_text())
    history = list(old.get("history", []))
    weights = {f: d for f, d in old["files"].items() if f.endswith(".safetensors") and f != START}
    if any(not (new / f).is_file() or sha256(new / f) != d for f, d in weights.items()):
        history.append(replaced_entry(dst, datetime.date.today().isoformat()))
    return history


def _shipped_where(folder: Path) -> str:
    """Where the network in ``folder`` was trained, from the card it was shipped with."""
    from ..models.shipping.cards import CARD

    try:
        return json.loads((folder / CARD).read_text())["trained"]["where"]
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"{folder} has no shipped card saying where it was trained ({e}); "
                          f"give it with --where") from None


def _finished_curve(path: Path | None) -> dict[str, Any] | None:
    """The card's ``curve`` from a finished ``vcebench models curve`` output (None: none, or still being scored:
    a note says so)."""
    if path is None or not path.is_file():
        return None
    c = json.loads(path.read_text())
    if "plateau" not in c or c.get("pending"):
        print(f"vcebench models ship: {path} is still being scored (no plateau yet, or budgets "
              f"{c.get('pending')} not trained yet): the card gets no curve", file=sys.stderr)
        return None
    from .curves import plateau, to_markdown

    # the verdicts again from the rows, by today's rule (a curve scored before the budget cap has no `at_cap`)
    c["plateau"], c["plateau_samples_kid"] = (plateau(c["rows"], c[k]["key"])
                                              for k in ("plateau", "plateau_samples_kid"))
    return {"rows": c["rows"], "plateau": c["plateau"], "plateau_samples_kid": c["plateau_samples_kid"],
            "scoring": c["scoring"], "markdown": to_markdown(c)}


def truth_vs_regenerate(cfg: dict, task, model_dir: str | Path, data_dir: str | Path | None, n: int = 100,
                        seed: int = 0) -> dict[str, Any]:
    """How close the dataset's embedding judge (identity on faces, SimSiam on x-rays) puts the true
    counterfactual, against the do-nothing-but-regenerate level: the input noised to the DDPM rows' starting
    step (the noise rule, DiME's settings for ``task``) and denoised again without guidance by the dataset's
    DDPM. On the first ``n`` test inputs; mean cosine of the embeddings (S^3 / FS) and the share above 0.5
    (FVA's threshold). A judge fit for the protocol puts the truth at least as close as a regeneration."""
    import torch
    import torch.nn.functional as F

    from methods.ddpm import Schedule, denoise

    from ..core.io import from_uint8, quantize
    from ..data import load_split
    from ..data.registry import get_synthetic
    from ..models.task_models import load_role
    from ..protocol.noise import resolve_method

    role = "identity" if task.kind == "faces" else "simsiam"
    test = load_split(cfg, task.dataset, "test", data_dir)
    ids = test.sample_ids[:n]
    x = from_uint8(test.images[:n])
    truth = from_uint8(quantize(get_synthetic(cfg, task.dataset).gt_counterfactuals(ids, task.attribute)))
    ddpm = load_role(cfg, task, "ddpm", model_dir)[0]
    params = resolve_method(cfg, task, "dime")[0]
    sched = Schedule.from_ddpm(ddpm, int(params["respacing"]))
    start = int(params["start_step"])
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        z = sched.q_sample(x, start, torch.randn(x.shape, generator=g))
        regen = from_uint8(quantize(denoise(sched, ddpm, z, start, lambda: torch.randn(x.shape, generator=g))))
        judge = load_role(cfg, task, role, model_dir)[0].eval()
        e = F.normalize(judge(x), dim=1)
        cos_t = (e * F.normalize(judge(truth), dim=1)).sum(1)
        cos_r = (e * F.normalize(judge(regen), dim=1)).sum(1)
    row = lambda c: {"mean_cos": float(c.mean()), "share_cos_gt_0.5": float((c > 0.5).float().mean())}  # noqa: E731
    return {"judge": role, "attribute": task.attribute, "n": int(len(ids)), "truth": row(cos_t),
            "regenerate": {**row(cos_r), "respacing": int(params["respacing"]), "start_step": start},
            "truth_at_least_as_close": bool(cos_t.mean() >= cos_r.mean())}


def batched_embed(judge, images_uint8, batch: int = 256):
    """A judge's embeddings of uint8 images, in batches, without gradients."""
    import torch

    from ..core.io import from_uint8

    with torch.no_grad():
        return torch.cat([judge(from_uint8(images_uint8[i:i + batch])) for i in range(0, len(images_uint8), batch)])


def check_networks(cfg: dict, model_dir: str | Path, data_root: str | Path, n: int = 100) -> dict[str, Any]:
    """Re-measure a trained set's quality with the whole set present, into each network's ``metrics.json``:
    the generators' FID (``fid_features``) and the pmf's quality gate against the set's ddpm and
    classifiers, as training measures it (``models.recipes.evaluate_generative``), and per task the embedding
    judge's truth vs regenerate levels (``truth_vs_regenerate``, key ``truth_vs_regenerate``). Returns what it
    wrote."""
    from ..config.tasks import SYNTHETIC_DATASETS, get_task
    from ..core.io import write_json
    from ..data import load_split
    from ..models.recipes import evaluate_generative
    from ..models.shipping.truth_checks import truth_agreement, truth_similarity
    from ..models.synthetic.load import load_trained_net
    from ..models.task_models import load_role
    from .train import counterfactual_renderer, generative_references

    out: dict[str, Any] = {}
    for ds in SYNTHETIC_DATASETS:
        tasks = [get_task(cfg, t) for t in cfg.get("run_tasks", []) if cfg["tasks"][t]["dataset"] == ds]
        if not tasks or not Path(model_dir, ds, "ddpm", "metrics.json").exists():
            continue
        val = load_split(cfg, ds, "val", Path(data_root) / ds).images
        fid, name = load_role(cfg, tasks[0], "fid_features", model_dir)
        out[f"{ds}/ddpm"] = evaluate_generative("ddpm", Path(model_dir, ds, "ddpm"), val, fid.eval(), name)
        refs = generative_references(cfg, tasks[0], "pmf", Path(model_dir))  # the gate's label check
        out[f"{ds}/pmf"] = evaluate_generative("pmf", Path(model_dir, ds, "pmf"), val, fid.eval(), name,
                                               reference_ddpm_dir=Path(model_dir, ds, "ddpm"),
                                               classifiers=refs.get("classifiers"), fire_t=refs.get("fire_t"))
        role = "identity" if tasks[0].kind == "faces" else "simsiam"
        levels = {t.name: truth_vs_regenerate(cfg, t, model_dir, Path(data_root) / ds, n) for t in tasks}
        judge = load_role(cfg, tasks[0], role, model_dir)[0].eval()
        test, render = load_split(cfg, ds, "test", Path(data_root) / ds), counterfactual_renderer(cfg, ds)
        attributes = [t.attribute for t in tasks]
        truth = truth_similarity(lambda u8, j=judge: batched_embed(j, u8), test, attributes, render, threshold=0.5)
        path = Path(model_dir, ds, role, "metrics.json")
        write_json(path, {**json.loads(path.read_text()), "truth": truth, "truth_vs_regenerate": levels})
        out[f"{ds}/{role}"] = {"truth": truth, "truth_vs_regenerate": levels}
        for r in ("classifier", "oracle"):  # agreement with the true counterfactuals, with the current checks
            net, net_cfg = load_trained_net(r, Path(model_dir, ds, r))  # logits per attribute
            agree = truth_agreement(net.eval(), net_cfg["attribute_names"], test, attributes, render)
            path = Path(model_dir, ds, r, "metrics.json")
            write_json(path, {**json.loads(path.read_text()), "truth": agree})
            out[f"{ds}/{r}"] = agree
    return out
