"""The Method interface (docs/architecture.md), what every method returns, and shared bookkeeping.

Bookkeeping shared by all methods lives here: hyperparameter parsing into typed
dataclasses (:func:`parse_params`), per-sample network-evaluation counts (:class:`NFE`),
per-sample failure codes (``FAIL_*``) and the final flip check (:func:`finalize`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol

import torch
from torch import Tensor

from vcebench.core.rng import SampleGenerators
from vcebench.models.base import TaskModels

from .params import parse_params, require  # noqa: F401 (the names plug-ins import from here)


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
    of the B samples it ran for; SmoothGrad's N copies add N).

    The methods never count by hand: :meth:`counted` wraps the task's networks so that every call is
    counted where it happens, for the batch rows in :attr:`rows` (global sample indices, on the host;
    :class:`ActiveBatch` keeps them current), and its backward pass when autograd runs through it.
    """

    def __init__(self, n: int):
        self.counts = {k: torch.zeros(n, dtype=torch.float64) for k in NFE_KEYS}
        self.rows = torch.arange(n)

    def add(self, net: str, rows: Tensor, times: float = 1.0, bwd: bool = False) -> None:
        """Count one call of ``net`` (classifier | unet | pmf | perceptual) on batch rows ``rows``;
        ``bwd`` counts its backward pass instead of its forward."""
        key = f"nfe_{net}_{'bwd' if bwd else 'fwd'}"
        self.counts[key].index_add_(0, rows, torch.full((len(rows),), float(times), dtype=torch.float64))

    def counted(self, models: TaskModels) -> TaskModels:
        """``models`` with classifier / ddpm / pmf / perceptual seen through this counter."""
        wrap = {"classifier": ("classifier", "__call__"), "ddpm": ("unet", "eps"), "pmf": ("pmf", "predict_clean"),
                "perceptual": ("perceptual", "__call__")}
        roles = {r: _Counted(_uncounted(getattr(models, r)), net, call, self)
                 for r, (net, call) in wrap.items() if getattr(models, r) is not None}
        return dataclasses.replace(models, **roles)


def counter_of(models: TaskModels) -> NFE | None:
    """The :class:`NFE` that counts the calls of ``models`` (seen through :meth:`NFE.counted`), or None."""
    for role in ("classifier", "ddpm", "pmf", "perceptual"):
        m = getattr(models, role)
        if isinstance(m, _Counted):
            return m._nfe
    return None


def _uncounted(m: Any) -> Any:
    return m.inner if isinstance(m, _Counted) else m


class _Counted:
    """A network whose ``call`` method counts one forward evaluation per row of :attr:`NFE.rows` (N when
    its batch holds N copies of each row) and, through a gradient hook on its output, one backward
    evaluation for the same rows when a gradient flows back through it. Other attributes pass through."""

    def __init__(self, inner: Any, net: str, call: str, nfe: NFE):
        self.inner, self._net, self._call, self._nfe = inner, net, call, nfe

    def __getattr__(self, name: str) -> Any:
        if name == self._call:
            return self._counting(getattr(self.inner, name))
        return getattr(self.inner, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__getattr__("__call__")(*args, **kwargs)

    def _counting(self, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            nfe, rows = self._nfe, self._nfe.rows
            times = len(out) / len(rows)
            nfe.add(self._net, rows, times)
            if out.requires_grad:
                out.register_hook(lambda g: nfe.add(self._net, rows, times, bwd=True))
            return out
        return call


# --- the samples of a batch still running ----------------------------------------------------
class ActiveBatch:
    """The samples of a batch still being worked on, and what each has recorded so far.

    Inputs holding NaN / inf fail at once and never run. ``rows`` are the active samples' indices
    in the full batch: on the host for the NFE counter, as a list (``row_list``) for the per-sample
    generators, on the batch's device (``index``) for the tensors. Working state of the active rows
    lives in the namespace :attr:`s` (set by :meth:`start`; each tensor there has one row per active
    sample) and shrinks with them (:meth:`keep`, batch compaction); per-sample outputs are
    full-batch tensors in :attr:`out`, written by :meth:`record`. Failure codes keep the first
    reason. Nothing here reads a device tensor on the host except :meth:`keep`, which takes a host mask.
    """

    def __init__(self, x: Tensor, nfe: NFE | None = None, **outputs: Tensor):
        self.n, self.nfe, self.out, self.s = len(x), nfe, dict(outputs), SimpleNamespace()
        self.failed = nonfinite(x)
        self.reason = torch.where(self.failed, FAIL_NONFINITE_INPUT, FAIL_NONE)
        self._set_rows(torch.nonzero(~self.failed.cpu()).flatten())

    def _set_rows(self, rows: Tensor) -> None:
        self.rows, self.row_list, self.index = rows, rows.tolist(), rows.to(self.failed.device)
        if self.nfe is not None:
            self.nfe.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def start(self, **full: Tensor) -> SimpleNamespace:
        """Working state: the active rows of the full-batch tensors ``full``."""
        self.s = SimpleNamespace(**{k: v[self.index] for k, v in full.items()})
        return self.s

    def record(self, where: Tensor | None = None, **values: Tensor | float) -> None:
        """Write ``values`` (one row per active sample, or a scalar) into :attr:`out` for the active rows
        (only where ``where``, a bool mask over them); an output met for the first time starts at zero."""
        for k, v in values.items():
            if k not in self.out:
                self.out[k] = torch.zeros((self.n, *v.shape[1:]), dtype=v.dtype, device=v.device)
            old = self.out[k][self.index]
            if where is None:
                new = v if torch.is_tensor(v) else torch.full_like(old, v)
            else:
                new = torch.where(where.view(-1, *[1] * (old.ndim - 1)), v, old)
            self.out[k][self.index] = new

    def fail(self, bad: Tensor, code: int) -> None:
        """Mark the active rows ``bad`` failed with ``code`` (rows already failed keep their reason)."""
        new = bad & ~self.failed[self.index]
        self.reason[self.index] = torch.where(new, code, self.reason[self.index])
        self.failed[self.index] = self.failed[self.index] | bad

    def keep(self, keep: Tensor) -> None:
        """Batch compaction: only the active rows ``keep`` (a host bool mask) stay in the batch and in :attr:`s`."""
        if bool(keep.all()):
            return
        local = torch.nonzero(keep).flatten().to(self.failed.device)
        for k, v in vars(self.s).items():
            if torch.is_tensor(v):
                setattr(self.s, k, v[local])
        self._set_rows(self.rows[keep])


# --- the final flip check --------------------------------------------------------------------
@torch.no_grad()
def finalize(x: Tensor, cf: Tensor, target: Tensor, models: TaskModels, steps: Tensor, failed: Tensor,
             reason: Tensor, nfe: NFE, info: dict[str, Tensor] | None = None) -> Counterfactuals:
    """Failed samples return their input; ``flipped = argmax f(cf) == target`` (one classifier call)."""
    cf = torch.where(failed.view(-1, 1, 1, 1).to(cf.device), x, cf).clamp(-1, 1)
    cf = torch.nan_to_num(cf)  # a failed sample whose input was non-finite
    nfe.rows = torch.arange(len(x))
    logits = nfe.counted(models).classifier(cf)
    bad = nonfinite(logits).cpu() & ~failed.cpu()
    reason = torch.where(bad, torch.full_like(reason.cpu(), FAIL_NONFINITE_LOGITS), reason.cpu())
    failed = failed.cpu() | bad
    flipped = (logits.argmax(1).cpu() == target.cpu()) & ~failed
    out = {"failed": failed, "fail_reason": reason.to(torch.int64), **nfe.counts,
           **{k: v.cpu() for k, v in (info or {}).items()}}
    return Counterfactuals(images=cf.detach(), flipped=flipped, steps=steps.cpu().to(torch.int64), info=out)



