"""FID and sFID with float64 sufficient statistics (ACE / DiME protocol).

FID: Frechet distance between the feature Gaussians of *all* explained originals and the
*successful* counterfactuals (ACE ``compute-fid.sh`` / DiME: ``python -m pytorch_fid``
on the ``Original`` and ``CF`` folders). sFID (ACE ``compute_sFID.sh``): the explained
sample ids are split into two halves; sFID = mean of FID(orig half 1, cf half 2) and
FID(orig half 2, cf half 1). ACE splits once with an unseeded ``shuf``; we use a seeded
permutation per seed of ``metrics.sfid_seeds`` and report the mean and the spread.

Features: ``models.fid_features(x) -> (N, D)`` on images in [-1, 1] at the dataset
resolution. Input conventions are the feature extractor's concern: the canonical
Inception-v3 wrapper in ``vcebench.models`` resizes to 299 x 299 (bilinear) and maps
[-1, 1] to its own normalisation exactly as pytorch-fid's ``InceptionV3(resize_input=True,
normalize_input=True)`` does on PNGs read as [0, 1]. Originals and counterfactuals reach
this module after uint8 quantisation (``vcebench.io``), i.e. with the same values the
reference scripts read from PNG files.

Statistics follow pytorch-fid / clean-fid: mean and *unbiased* covariance (``np.cov``,
ddof = 1) computed here from float64 sums ``n, sum f, sum f f^T`` (as torchmetrics'
``FrechetInceptionDistance``), so they stream over batches and merge across shards. The
distance is pytorch-fid's ``calculate_frechet_distance`` (``scipy.linalg.sqrtm`` of
``sigma1 sigma2``, ``eps`` on the diagonals only if the product is singular), implemented once in
``vcebench.frechet``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from vcebench.frechet import FrechetError
from vcebench.frechet import frechet_distance as _frechet_distance

from .base import EvalBatch, MetricError, Subset, embed, require


class FeatureStats:
    """Float64 sufficient statistics of a feature set: ``n``, ``sum f``, ``sum f f^T``."""

    def __init__(self, dim: int | None = None):
        self.n = 0
        self.sum = None if dim is None else np.zeros(dim, np.float64)
        self.outer = None if dim is None else np.zeros((dim, dim), np.float64)

    @property
    def dim(self) -> int | None:
        return None if self.sum is None else self.sum.shape[0]

    def update(self, feats: Tensor | np.ndarray) -> FeatureStats:
        f = np.asarray(feats.detach().cpu().double() if torch.is_tensor(feats) else feats, np.float64)
        if f.ndim != 2:
            raise MetricError(f"features must be (N, D), got shape {f.shape}")
        if self.sum is None:
            self.sum = np.zeros(f.shape[1], np.float64)
            self.outer = np.zeros((f.shape[1], f.shape[1]), np.float64)
        if f.shape[1] != self.dim:
            raise MetricError(f"feature dimension {f.shape[1]} does not match earlier batches ({self.dim})")
        self.n += f.shape[0]
        self.sum += f.sum(0)
        self.outer += f.T @ f
        return self

    def merge(self, other: FeatureStats) -> FeatureStats:
        """Add another shard's statistics (in place)."""
        if other.n == 0:
            return self
        if self.sum is None:
            self.sum, self.outer = other.sum.copy(), other.outer.copy()
        elif other.dim != self.dim:
            raise MetricError(f"cannot merge feature statistics of dimension {other.dim} into {self.dim}")
        else:
            self.sum += other.sum
            self.outer += other.outer
        self.n += other.n
        return self

    def mean_cov(self, what: str = "features") -> tuple[np.ndarray, np.ndarray]:
        """Mean and unbiased covariance (ddof = 1, as ``np.cov`` in pytorch-fid)."""
        require(self.n, 2, f"FID ({what})", what)
        mu = self.sum / self.n
        cov = (self.outer - self.n * np.outer(mu, mu)) / (self.n - 1)
        return mu, cov

    def to_arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        return {f"{prefix}n": np.int64(self.n), f"{prefix}sum": self.sum, f"{prefix}outer": self.outer}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str = "") -> FeatureStats:
        s = cls()
        s.n = int(arrays[f"{prefix}n"])
        s.sum = np.asarray(arrays[f"{prefix}sum"], np.float64)
        s.outer = np.asarray(arrays[f"{prefix}outer"], np.float64)
        return s


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray,
                     eps: float = 1e-6, method: str = "sqrtm") -> float:
    """:func:`vcebench.frechet.frechet_distance` (the one implementation), errors as MetricError."""
    try:
        return _frechet_distance(mu1, sigma1, mu2, sigma2, eps=eps, method=method)
    except FrechetError as e:
        raise MetricError(str(e)) from None


def fid_from_stats(a: FeatureStats, b: FeatureStats, what_a: str = "originals",
                   what_b: str = "counterfactuals", method: str = "sqrtm") -> float:
    mu1, s1 = a.mean_cov(what_a)
    mu2, s2 = b.mean_cov(what_b)
    return frechet_distance(mu1, s1, mu2, s2, method=method)


@dataclass
class FIDReference:
    """Per-sample features of the evaluation split's originals, computed once per task.

    Stored in ``results/<task>/fid_ref.npz`` (``vcebench evaluate --reference``):
    ``sample_id`` int64 N, ``features`` float32 N x D, ``extractor`` (``models.names
    ['fid_features']``), and the float64 statistics of all N (``n``, ``sum``, ``outer``).
    Per-sample features let FID use exactly the explained originals and let sFID split them.
    """

    sample_id: np.ndarray
    features: np.ndarray
    extractor: str

    def __post_init__(self) -> None:
        self.sample_id = np.asarray(self.sample_id, np.int64)
        self.features = np.asarray(self.features, np.float32)
        if self.features.ndim != 2 or self.features.shape[0] != self.sample_id.shape[0]:
            raise MetricError(f"FID reference: features {self.features.shape} do not match "
                              f"{self.sample_id.shape[0]} sample ids")
        if len(np.unique(self.sample_id)) != len(self.sample_id):
            raise MetricError("FID reference: duplicate sample ids")
        self._row = {int(s): i for i, s in enumerate(self.sample_id)}

    def check_covers(self, sample_ids: Tensor | np.ndarray) -> np.ndarray:
        """``sample_ids`` as int64; error naming the ids the reference lacks."""
        ids = np.asarray(sample_ids.cpu() if torch.is_tensor(sample_ids) else sample_ids, np.int64).reshape(-1)
        missing = [int(i) for i in ids if int(i) not in self._row]
        if missing:
            raise MetricError(f"FID reference lacks {len(missing)} of the explained sample ids "
                              f"(first: {missing[:5]}); recompute it with `vcebench evaluate --reference` "
                              "for this task's evaluation split")
        return ids

    def lookup(self, sample_ids: Tensor | np.ndarray) -> np.ndarray:
        """Features of ``sample_ids`` (rows in that order)."""
        return self.features[[self._row[int(i)] for i in self.check_covers(sample_ids)]]

    def stats(self) -> FeatureStats:
        return FeatureStats().update(self.features)

    def save(self, path: str | os.PathLike) -> None:
        from vcebench.io import save_npz

        save_npz(path, sample_id=self.sample_id, features=self.features, extractor=np.array(self.extractor),
                 **self.stats().to_arrays())

    @classmethod
    def load(cls, path: str | os.PathLike) -> FIDReference:
        from vcebench.io import load_npz

        if not os.path.exists(path):
            raise FileNotFoundError(f"FID reference statistics {path} not found; create them with "
                                    "`vcebench evaluate --task <task> --reference --out <path>`")
        z = load_npz(path)
        for key in ("sample_id", "features", "extractor"):
            if key not in z:
                raise MetricError(f"FID reference {path} lacks the array {key!r}; recompute it")
        return cls(z["sample_id"], z["features"], str(z["extractor"]))


@torch.no_grad()
def compute_reference(images, sample_ids: Tensor, fid_features: nn.Module, extractor: str) -> FIDReference:
    """Features of all originals; ``images`` yields [-1, 1] batches in the order of ``sample_ids``."""
    feats = [fid_features(x).float().cpu() for x in images]
    return FIDReference(sample_ids.cpu().numpy(), torch.cat(feats).numpy(), extractor)


class _OriginalFeatures:
    """Features of the originals of a batch: from the reference when given, else computed."""

    def __init__(self, fid_features: nn.Module | None, reference: FIDReference | None, extractor: str):
        if fid_features is None and reference is None:
            raise MetricError("FID needs the `fid_features` model or precomputed reference statistics")
        if reference is not None and extractor and reference.extractor != extractor:
            raise MetricError(f"FID reference was computed with feature extractor {reference.extractor!r} "
                              f"but this evaluation uses {extractor!r}; recompute it (--reference)")
        self.net, self.reference = fid_features, reference

    def __call__(self, batch: EvalBatch) -> Tensor:
        if self.reference is not None:
            return torch.from_numpy(self.reference.lookup(batch.sample_id))
        return embed(batch, self.net, "fid_features", "x")


class FID:
    """FID(all explained originals, counterfactuals in ``subset``), streaming (lower is better)."""

    name = "FID"
    higher_is_better = {"FID": False}
    roles = ("fid_features",)

    def __init__(self, fid_features: nn.Module | None, subset: Subset = "successful",
                 reference: FIDReference | None = None, extractor: str = "", method: str = "sqrtm"):
        self.net, self.subset, self.method = fid_features, subset, method
        self.originals_of = _OriginalFeatures(fid_features, reference, extractor)
        self.orig, self.cf = FeatureStats(), FeatureStats()
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        self.orig.update(self.originals_of(batch))
        keep = batch.subset(self.subset)
        if keep.any():
            self.cf.update(embed(batch, self.net, "fid_features", "cf")[keep])

    def merge(self, other: FID) -> None:
        self.orig.merge(other.orig)
        self.cf.merge(other.cf)

    def compute(self) -> dict[str, float]:
        require(self.cf.n, 2, "FID", self.subset)
        self.n = {"FID": self.cf.n, "FID_originals": self.orig.n}
        return {"FID": fid_from_stats(self.orig, self.cf, method=self.method)}


def sfid_halves(sample_ids: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of the sorted sample ids into two halves of ``N // 2`` (ACE: ``shuf``, then
    ``tail -N/2`` and ``head -N/2``; with N odd the middle id is in neither half)."""
    ids = np.sort(np.asarray(sample_ids, np.int64))
    g = torch.Generator().manual_seed(int(seed))
    perm = ids[torch.randperm(len(ids), generator=g).numpy()]
    half = len(ids) // 2
    return perm[len(ids) - half:], perm[:half]


class SFID:
    """sFID over ``seeds``: mean of FID(orig h1, cf h2) and FID(orig h2, cf h1); reports mean and std."""

    name = "sFID"
    higher_is_better = {"sFID": False, "sFID_std": False}
    roles = ("fid_features",)

    def __init__(self, fid_features: nn.Module | None, seeds: list[int], subset: Subset = "successful",
                 reference: FIDReference | None = None, extractor: str = "", method: str = "sqrtm"):
        if not seeds:
            raise MetricError("sFID needs at least one seed (config key `metrics.sfid_seeds`)")
        self.net, self.seeds, self.subset, self.method = fid_features, [int(s) for s in seeds], subset, method
        self.originals_of = _OriginalFeatures(fid_features, reference, extractor)
        self.ids: list[np.ndarray] = []
        self.orig: list[np.ndarray] = []
        self.cf: dict[int, np.ndarray] = {}
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        ids = batch.sample_id.cpu().numpy().astype(np.int64)
        self.ids.append(ids)
        self.orig.append(np.asarray(self.originals_of(batch).cpu(), np.float64))
        keep = batch.subset(self.subset)
        if keep.any():
            feats = embed(batch, self.net, "fid_features", "cf")[keep].double().cpu().numpy()
            for i, f in zip(ids[keep.cpu().numpy()], feats):
                self.cf[int(i)] = f

    def compute(self) -> dict[str, float]:
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)
        if len(np.unique(ids)) != len(ids):
            raise MetricError("sFID: duplicate sample ids in the evaluation stream")
        row = {int(i): r for r, i in enumerate(ids)}
        orig = np.concatenate(self.orig) if self.orig else None
        values = []
        for seed in self.seeds:
            h1, h2 = sfid_halves(ids, seed)
            fids = []
            for ho, hc in ((h1, h2), (h2, h1)):
                o = FeatureStats().update(orig[[row[int(i)] for i in ho]]) if len(ho) else FeatureStats()
                c_rows = [self.cf[int(i)] for i in hc if int(i) in self.cf]
                require(len(c_rows), 2, f"sFID (seed {seed}, counterfactual half)", self.subset)
                fids.append(fid_from_stats(o, FeatureStats().update(np.stack(c_rows)),
                                           "originals half", "counterfactuals half", self.method))
            values.append(float(np.mean(fids)))
        self.n = {"sFID": len(self.cf), "sFID_std": len(self.seeds)}
        return {"sFID": float(np.mean(values)),
                "sFID_std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0}
