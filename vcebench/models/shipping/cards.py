"""The reference networks shipped in the repository (``networks/<set>/<dataset>/<role>/``).

A shipped network is the folder its trainer writes (weights, ``config.json``, ``metrics.json``) plus a card:
``card.json`` (the recipe it was trained with, the sha256 of every file, where and how long it trained, its
quality numbers and training curve) and ``card.md`` (the same for a reader). ``vcebench train`` installs it
instead of training when the config's recipe for that role (the role's settings and the dataset's) equals
the card's, after checking every file against its hash; a changed recipe trains as before. A file that does
not match its hash is a one-line error naming it and the command that restores it.

The recipe compared is what decides the weights: the role's settings and the dataset's settings. The device
and thread count are not in it: a shipped network is the same file on every machine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from ...core.io import copy_file, sha256, write_text
from ...registry.roles import LOSS_ROLES

CARD = "card.json"
# the weights a continued recipe (``init_from`` / ``init_sha256``) started from, shipped beside its own: a recipe
# that continues a shipped network names this file in its set's folder
START = "start.safetensors"
NOT_COPIED = ("card.json", "card.md")


class ShippedNetworkError(ConfigError):
    """A shipped network's file is missing or does not match its card's hash."""


# Recipe keys that say where a file is, not what it is: ``init_from`` (the weights a run continues) is pinned by its
# ``init_sha256``, so two recipes naming the same content from two places (the run's checkout, the shipped folder)
# are the same recipe. Compared without them (:func:`same_recipe_keys`).
LOCATION_KEYS = frozenset({"init_from"})


def same_recipe_keys(settings: dict[str, Any]) -> dict[str, Any]:
    """A role's settings without :data:`LOCATION_KEYS` (what two recipes are compared on)."""
    return {k: v for k, v in settings.items() if k not in LOCATION_KEYS}


def recipe(cfg: dict, dataset: str, role: str) -> dict[str, Any]:
    """What a network's weights depend on: the role's settings and the dataset's (JSON-normalised)."""
    obj = {"role": role, "dataset": dataset,
           "settings": ((cfg.get("models") or {}).get(dataset) or {}).get(role),
           "data": (cfg.get("datasets") or {}).get(dataset)}
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def card_path(networks: str | Path, dataset: str, role: str) -> Path:
    return Path(networks) / dataset / role / CARD


def read_card(networks: str | Path | None, dataset: str, role: str) -> dict[str, Any] | None:
    """The card of ``networks/<dataset>/<role>`` (None: no networks folder configured, or none shipped)."""
    if not networks:
        return None
    p = card_path(networks, dataset, role)
    return json.loads(p.read_text()) if p.is_file() else None


def recipe_differences(card: dict[str, Any], cfg: dict, dataset: str, role: str) -> list[str]:
    """The recipe keys in which the config differs from the card (empty: the shipped network is this recipe).
    A loss weight of ``registry.roles.LOSS_ROLES`` (added after cards were written) absent on one side is 0,
    off: a config that writes it out as 0 still has the shipped recipe."""
    want, have = recipe(cfg, dataset, role), card.get("recipe", {})
    off = dict.fromkeys(LOSS_ROLES.get(role, {}), 0.0)
    out = []
    for part in ("settings", "data"):
        a, b = want.get(part) or {}, have.get(part) or {}
        if part == "settings":
            a, b = same_recipe_keys({**off, **a}), same_recipe_keys({**off, **b})
        out += [f"{part}.{k}: config {a.get(k)!r}, shipped {b.get(k)!r}" for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k)]
    return out


def verify(folder: str | Path, card: dict[str, Any]) -> None:
    """Every file of the card exists with its sha256; else ``ShippedNetworkError`` (one line)."""
    folder = Path(folder)
    for rel, digest in sorted(card["files"].items()):
        p = folder / rel
        if not p.is_file() or sha256(p) != digest:
            what = "is missing" if not p.is_file() else "does not match its sha256 in card.json"
            raise ShippedNetworkError(f"shipped network file {p} {what}; restore it with `git checkout -- {folder}` "
                                      f"(or retrain the set: `make networks`)")


def install(networks: str | Path, dataset: str, role: str, card: dict[str, Any], out_dir: str | Path) -> dict:
    """Check and copy the shipped ``<dataset>/<role>`` into ``out_dir`` (``metrics.json`` last: the workflow's
    sentinel); returns its metrics with ``shipped`` (set, card, sha256 of the weights)."""
    src, out = Path(networks) / dataset / role, Path(out_dir)
    verify(src, card)
    files = sorted(card["files"])
    for rel in [f for f in files if f != "metrics.json"] + ["metrics.json"]:
        copy_file(src / rel, out / rel)
    metrics = json.loads((out / "metrics.json").read_text())
    metrics["shipped"] = {"set": card.get("set"), "card": str(src / CARD), "files": card["files"]}
    from ...core.io import write_json

    write_json(out / "metrics.json", metrics)
    return metrics


def write_card(folder: str | Path, cfg: dict, dataset: str, role: str, set_name: str,
               trained: dict[str, Any], quality: dict[str, Any] | None = None,
               curve: dict[str, Any] | None = None, budget: dict[str, Any] | None = None,
               history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write ``card.json`` and ``card.md`` for the trained network in ``folder`` (every file but the cards
    hashed), with the config's recipe (which must be the one it was trained with: ``config.json``).
    ``budget``: its training budget (``vcebench.models.training.budget``); ``history``: the networks it replaced
    (:func:`replaced_entry`), oldest first."""
    folder = Path(folder)
    files = {str(p.relative_to(folder)): sha256(p) for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name not in NOT_COPIED}
    card = {"set": set_name, "dataset": dataset, "role": role, "recipe": recipe(cfg, dataset, role),
            "trained": trained, **({"budget": budget} if budget else {}), "quality": quality or {}, "curve": curve,
            "files": files, "size_bytes": sum((folder / f).stat().st_size for f in files),
            **({"history": history} if history else {})}
    rewrite_card(folder, card)
    return card


def rewrite_card(folder: str | Path, card: dict[str, Any]) -> None:
    """Write ``card`` as ``folder``'s ``card.json`` and ``card.md`` (the files it hashes are not touched)."""
    from ...core.io import write_json

    write_json(Path(folder) / CARD, card)
    write_text(Path(folder) / "card.md", card_markdown(card))


def replaced_entry(folder: str | Path, when: str) -> dict[str, Any] | None:
    """What a card's history keeps of the network shipped in ``folder`` when another replaces it (None: none
    shipped there): its card's sha256, its files' hashes, its budget, where it trained, its quality gate."""
    p = Path(folder) / CARD
    if not p.is_file():
        return None
    old = json.loads(p.read_text())
    gate = (old.get("quality") or {}).get("quality_gate")
    return {"replaced": when, "card_sha256": sha256(p), "files": old["files"],
            "steps": ((old.get("recipe") or {}).get("settings") or {}).get("steps"),
            "where": (old.get("trained") or {}).get("where"), **({"budget": old["budget"]} if "budget" in old else {}),
            **({"quality_gate": {k: gate[k] for k in ("passed", "failed", "fid_pmf", "fid_tweedie") if k in gate}}
               if gate else {})}


def start_entry(history: list[dict[str, Any]], weights_sha256: str) -> dict[str, Any] | None:
    """The latest network of ``history`` whose weights file has ``weights_sha256`` (a continued run's start)."""
    return next((h for h in reversed(history) if weights_sha256 in h["files"].values()), None)


def _flops(v: float) -> str:
    return f"{v / 1e15:.2f} PFLOP" if v >= 1e14 else f"{v / 1e9:.1f} GFLOP"


def budget_lines(budget: dict[str, Any]) -> list[str]:
    """A card's budget for a reader: this run, the weights it started from, in all."""
    modes = ", ".join(f"{m['steps']:,} {m['mode']} steps at {_flops(m['flops'])}" for m in budget["flops_per_step"])
    out = [f"- this run: {budget['steps']:,} steps x batch {budget['batch_size']} = {budget['images']:,} images, "
           f"{_flops(budget['flops'])} ({modes})"]
    if "start" in budget:
        st = budget["start"].get("total", budget["start"])
        t = budget["total"]
        out += [f"- its start (the weights it continued): {st['steps']:,} steps, {st['images']:,} images, "
                f"{_flops(st['flops'])}",
                f"- in all: **{t['steps']:,} steps, {t['images']:,} images, {_flops(t['flops'])}**"]
    return out + [f"- FLOPs: {budget['convention']}"]


def budgets_table(cards: list[dict[str, Any]]) -> str:
    """The generators' budgets side by side (a markdown table, one row per card with a budget): steps x batch,
    images seen and FLOPs, this run's and, for a continued one, in all."""
    rows = ["| generator | steps x batch | images | FLOPs per step | training FLOPs |", "|---|---|---:|---|---:|"]
    for c in cards:
        b = c.get("budget")
        if not b:
            continue
        per = " / ".join(f"{_flops(m['flops'])} ({m['mode']}, {m['steps']:,})" for m in b["flops_per_step"])
        run = f"{b['steps']:,} x {b['batch_size']}"
        images, flops = f"{b['images'] / 1e6:.2f} M", _flops(b["flops"])
        if "total" in b:
            t = b["total"]
            run += f" more ({t['steps']:,} in all)"
            images += f" ({t['images'] / 1e6:.2f} M in all)"
            flops += f" ({_flops(t['flops'])} in all)"
        rows.append(f"| {c['dataset']} {c['role']} | {run} | {images} | {per} | {flops} |")
    return "\n".join(rows) + "\n"


def card_markdown(card: dict[str, Any]) -> str:
    """The card for a reader: what the network is, how it was trained, how good it is, its files."""
    s = card["recipe"]["settings"] or {}
    lines = [f"# {card['dataset']} / {card['role']} (network set `{card['set']}`)", "",
             "## Recipe (the config keys `models." + card["dataset"] + "." + card["role"] + "`)", "",
             "```json", json.dumps(s, indent=1, sort_keys=True), "```", "",
             "Dataset settings: `" + json.dumps(card["recipe"]["data"], sort_keys=True) + "`", "",
             "## Training", ""]
    lines += [f"- {k}: {v}" for k, v in card["trained"].items()]
    if card.get("budget"):
        lines += ["", "## Budget", ""] + budget_lines(card["budget"])
    if card.get("quality"):
        lines += ["", "## Quality (measured on the files below)", ""]
        lines += [f"- {k}: {json.dumps(v) if isinstance(v, dict | list) else v}" for k, v in card["quality"].items()]
    if card.get("curve"):
        lines += ["", "## Training curve", "", card["curve"].get("markdown", "")]
    lines += ["", "## Files (sha256)", ""] + [f"- `{f}` `{h}`" for f, h in card["files"].items()]
    if card.get("history"):
        lines += ["", "## History (the networks this one replaced, oldest first)", ""]
        lines += [f"- replaced {h['replaced']}: {h.get('steps')} steps, trained {h.get('where')}; card.json "
                  f"`{h['card_sha256']}`; " + "; ".join(f"`{f}` `{d}`" for f, d in h["files"].items()
                                                         if f.endswith(".safetensors"))
                  + (f"; its gate: {json.dumps(h['quality_gate'])}" if h.get("quality_gate") else "")
                  for h in card["history"]]
    return "\n".join(lines) + "\n"


def shipped_folder(value: str | None, cfg: dict) -> str | None:
    """The shipped networks a `train` job installs from: ``value`` (``--networks``: a folder, or 'none' to
    train), else config ``networks``; None: train."""
    if value is None:
        value = cfg.get("networks")
    return None if value in (None, "", "none") else value


def install_shipped(cfg: dict, ds: str, role: str, networks: str | Path | None, out: Path, progress: bool,
                    shard=None, say_why: bool = True) -> dict[str, Any] | None:
    """The shipped network of ``ds``/``role`` installed into ``out`` when its card's recipe is the config's
    (its metrics), else None (with ``say_why``, a note says why it trains). Torch-free: `vcebench train`
    installs without starting torch. ``shard`` (``vcebench.models.training.distributed.Shard``): only its writer
    copies."""
    card = read_card(networks, ds, role)
    if card is None:
        return None
    diff = recipe_differences(card, cfg, ds, role)
    if diff:
        if progress and say_why:
            print(f"[train {role}] the config's recipe is not the shipped {networks}/{ds}/{role}'s "
                  f"({'; '.join(diff[:3])}{' ...' if len(diff) > 3 else ''}): training it", file=sys.stderr)
        return None
    if shard is not None and not shard.writer:
        return {}
    from ...core.io import check_writable

    check_writable(out, f"the shipped {role}")
    metrics = install(networks, ds, role, card, out)
    if progress:
        print(f"[train {role}] installed the shipped network {networks}/{ds}/{role} (recipe and sha256 checked; "
              f"trained {card['trained'].get('where', '?')}): nothing trained", file=sys.stderr)
    return metrics
