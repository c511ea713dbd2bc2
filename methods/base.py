"""The Method interface (ARCHITECTURE.md), what every method returns, and shared bookkeeping.

Bookkeeping shared by all methods lives here: hyperparameter parsing into typed
dataclasses (:func:`parse_params`), per-sample network-evaluation counts (:class:`NFE`),
per-sample failure codes (``FAIL_*``) and the final flip check (:func:`finalize`).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from vcebench.config import ConfigError, check_keys, coerce_value
from vcebench.models.base import TaskModels
from vcebench.rng import SampleGenerators


@dataclass
class Counterfactuals:
    images: Tensor  # N x C x H x W in [-1, 1]
    flipped: Tensor  # bool N: classifier(cf) == target
    steps: Tensor  # int N: refinement / guided steps actually used
    info: dict[str, Tensor] = field(default_factory=dict)  # per-sample extras, first dim N


class Method(Protocol):
    name: str
    roles: tuple[str, ...]  # model roles the method needs (for vcebench.models.load_task_models)

    def __call__(self, x: Tensor, target: Tensor, models: TaskModels,
                 generator: SampleGenerators) -> Counterfactuals: ...


def cat_counterfactuals(parts: list[Counterfactuals]) -> Counterfactuals:
    keys = set.intersection(*(set(p.info) for p in parts)) if parts else set()
    return Counterfactuals(
        images=torch.cat([p.images for p in parts]),
        flipped=torch.cat([p.flipped for p in parts]),
        steps=torch.cat([p.steps for p in parts]),
        info={k: torch.cat([p.info[k] for p in parts]) for k in sorted(keys)},
    )


# --- failure codes (``info["fail_reason"]``; 0 = not failed) ---------------------------------
FAIL_NONE = 0
FAIL_NONFINITE_INPUT = 1  # the input image holds NaN / inf
FAIL_NONFINITE_GRAD = 2  # a guidance gradient became NaN / inf
FAIL_NONFINITE_STATE = 3  # the noisy state or the clean image became NaN / inf
FAIL_NONFINITE_LOGITS = 4  # the classifier returned NaN / inf on the counterfactual
FAIL_NONFINITE_INPUT_LOGITS = 5  # the classifier returned NaN / inf on the input (no prediction, no target)
FAIL_UNREADABLE_INPUT = 6  # the input image file could not be read or is below the minimum size
FAIL_REASONS = {FAIL_NONE: "ok", FAIL_NONFINITE_INPUT: "non-finite input", FAIL_NONFINITE_GRAD: "non-finite gradient",
                FAIL_NONFINITE_STATE: "non-finite noisy state or clean image",
                FAIL_NONFINITE_LOGITS: "non-finite classifier output",
                FAIL_NONFINITE_INPUT_LOGITS: "non-finite classifier output on the input",
                FAIL_UNREADABLE_INPUT: "unreadable input image"}


def nonfinite(t: Tensor) -> Tensor:
    """Bool (N,): rows of ``t`` holding any NaN / inf."""
    return ~torch.isfinite(t.reshape(len(t), -1)).all(dim=1)


# --- NFE counts ------------------------------------------------------------------------------
NFE_KEYS = ("nfe_classifier_fwd", "nfe_classifier_bwd", "nfe_unet_fwd", "nfe_unet_bwd", "nfe_pmf_fwd",
            "nfe_pmf_bwd", "nfe_perceptual_fwd", "nfe_perceptual_bwd")


class NFE:
    """Per-sample network-evaluation counts (docs/internals.md: a batched call of B rows adds 1 to each
    of the B samples it ran for; SmoothGrad's N copies add N)."""

    def __init__(self, n: int):
        self.counts = {k: torch.zeros(n, dtype=torch.float64) for k in NFE_KEYS}

    def add(self, net: str, rows: Tensor, times: float = 1.0, bwd: bool = False) -> None:
        """Count one call of ``net`` (classifier | unet | pmf | perceptual) on batch rows ``rows``
        (global sample indices); ``bwd`` also counts its backward pass."""
        rows = rows.cpu()
        self.counts[f"nfe_{net}_fwd"].index_add_(0, rows, torch.full((len(rows),), float(times), dtype=torch.float64))
        if bwd:
            self.counts[f"nfe_{net}_bwd"].index_add_(0, rows, torch.full((len(rows),), float(times),
                                                                         dtype=torch.float64))

    def add_bwd(self, net: str, rows: Tensor, times: float = 1.0) -> None:
        rows = rows.cpu()
        self.counts[f"nfe_{net}_bwd"].index_add_(0, rows, torch.full((len(rows),), float(times), dtype=torch.float64))


# --- the final flip check --------------------------------------------------------------------
@torch.no_grad()
def finalize(x: Tensor, cf: Tensor, target: Tensor, models: TaskModels, steps: Tensor, failed: Tensor,
             reason: Tensor, nfe: NFE, info: dict[str, Tensor] | None = None) -> Counterfactuals:
    """Failed samples return their input; ``flipped = argmax f(cf) == target`` (one classifier call)."""
    cf = torch.where(failed.view(-1, 1, 1, 1).to(cf.device), x, cf).clamp(-1, 1)
    cf = torch.nan_to_num(cf)  # a failed sample whose input was non-finite
    rows = torch.arange(len(x))
    logits = models.classifier(cf)
    nfe.add("classifier", rows)
    bad = nonfinite(logits).cpu() & ~failed.cpu()
    reason = torch.where(bad, torch.full_like(reason, FAIL_NONFINITE_LOGITS), reason.cpu())
    failed = failed.cpu() | bad
    flipped = (logits.argmax(1).cpu() == target.cpu()) & ~failed
    out = {"failed": failed, "fail_reason": reason.to(torch.int64), **nfe.counts, **(info or {})}
    return Counterfactuals(images=cf.detach(), flipped=flipped, steps=steps.cpu().to(torch.int64), info=out)


# --- typed hyperparameters -------------------------------------------------------------------
P = TypeVar("P")


def parse_params(cls: type[P], params: dict[str, Any], section: str) -> P:
    """Build the dataclass ``cls`` from a config mapping: unknown keys and wrong types are
    :class:`ConfigError` naming ``section.key``; missing keys take the dataclass defaults."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    check_keys(section, params, set(fields))
    hints = typing.get_type_hints(cls)
    values = {}
    for k, v in params.items():
        values[k] = coerce_value(v, hints[k], f"{section}.{k}")
    try:
        obj = cls(**values)
    except TypeError as e:
        raise ConfigError(f"`{section}`: {e}") from None
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate(section)
    return obj


def require(ok: bool, section: str, msg: str) -> None:
    """Raise :class:`ConfigError` about ``section`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"`{section}`: {msg}")


