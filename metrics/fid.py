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
this module after uint8 quantisation (``vcebench.core.io``), i.e. with the same values the
reference scripts read from PNG files.

Statistics follow pytorch-fid / clean-fid: mean and *unbiased* covariance (``np.cov``,
ddof = 1) computed here from float64 sums ``n, sum f, sum f f^T`` (as torchmetrics'
``FrechetInceptionDistance``), so they stream over batches and merge across shards. The
distance is pytorch-fid's ``calculate_frechet_distance`` (``scipy.linalg.sqrtm`` of
``sigma1 sigma2``, ``eps`` on the diagonals only if the product is singular), implemented once in
``vcebench.core.frechet``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from vcebench.core.frechet import FrechetError
from vcebench.core.frechet import frechet_distance as _frechet_distance
from vcebench.core.io import load_npz, save_npz

from .base import EvalBatch, MetricError, Subset, embed, require
from .bootstrap import Resamples


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
    """:func:`vcebench.core.frechet.frechet_distance` (the one implementation), errors as MetricError."""
    try:
        return _frechet_distance(mu1, sigma1, mu2, sigma2, eps=eps, method=method)
    except FrechetError as e:
        raise MetricError(str(e)) from None


def weighted_frechet(f1: np.ndarray, w1: np.ndarray, f2: np.ndarray, w2: np.ndarray,
                     max_bytes: float = 2e8) -> np.ndarray:
    """FID between count-weighted feature sets, one value per row of ``w1`` (B, m1) / ``w2`` (B, m2).

    A row of counts stands for the multiset that repeats feature row i ``w[i]`` times; its mean and
    unbiased covariance are those of that multiset, so all-ones rows give :func:`frechet_distance`
    of ``f1`` and ``f2``. With ``Y = diag(sqrt w) (F - mu)``, ``Tr sqrt(S1 S2)`` is the nuclear norm
    of ``Y2 Y1^T`` (an m2 x m1 matrix: its squared singular values are the nonzero eigenvalues of
    ``Y1^T Y1 Y2^T Y2``) over ``sqrt((n1 - 1)(n2 - 1))``, which needs no D x D square root and is
    cheap when the sets are smaller than the feature dimension. NaN where a set has < 2 rows.
    """
    f1t, f2t = torch.as_tensor(f1, dtype=torch.float64), torch.as_tensor(f2, dtype=torch.float64)
    w1t, w2t = torch.as_tensor(w1, dtype=torch.float64), torch.as_tensor(w2, dtype=torch.float64)
    if f1t.ndim != 2 or f2t.ndim != 2 or f1t.shape[1] != f2t.shape[1]:
        raise MetricError(f"weighted_frechet: feature sets of shapes {tuple(f1t.shape)}, {tuple(f2t.shape)}")
    if w1t.shape[1] != len(f1t) or w2t.shape[1] != len(f2t) or len(w1t) != len(w2t):
        raise MetricError("weighted_frechet: count matrices do not match the feature rows")
    d = f1t.shape[1]
    chunk = max(1, int(max_bytes // (8 * (len(f1t) + len(f2t)) * d)))
    out = []
    for s in range(0, len(w1t), chunk):
        a, b = w1t[s:s + chunk], w2t[s:s + chunk]
        n1, n2 = a.sum(1), b.sum(1)
        mu1 = a @ f1t / n1.clamp_min(1)[:, None]
        mu2 = b @ f2t / n2.clamp_min(1)[:, None]
        y1 = a.sqrt()[:, :, None] * (f1t[None] - mu1[:, None])
        y2 = b.sqrt()[:, :, None] * (f2t[None] - mu2[:, None])
        d1, d2 = (n1 - 1).clamp_min(1), (n2 - 1).clamp_min(1)
        nuclear = torch.linalg.svdvals(y2 @ y1.transpose(1, 2)).sum(-1)
        fid = ((mu1 - mu2) ** 2).sum(1) + (y1 ** 2).sum((1, 2)) / d1 + (y2 ** 2).sum((1, 2)) / d2 \
            - 2 * nuclear / (d1 * d2).sqrt()
        out.append(torch.where((n1 >= 2) & (n2 >= 2), fid, torch.full_like(fid, float("nan"))))
    return torch.cat(out).numpy()


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
        save_npz(path, sample_id=self.sample_id, features=self.features, extractor=np.array(self.extractor),
                 **self.stats().to_arrays())

    @classmethod
    def load(cls, path: str | os.PathLike) -> FIDReference:
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
    roles = ("fid_features",)
    feature_bootstrap = True  # fewer resamples (config `metrics.bootstrap.feature_resamples`)

    def __init__(self, fid_features: nn.Module | None, subset: Subset = "successful",
                 reference: FIDReference | None = None, extractor: str = "", method: str = "sqrtm"):
        self.net, self.subset, self.method = fid_features, subset, method
        self.extractor = extractor or "fid_features"
        self.originals_of = _OriginalFeatures(fid_features, reference, extractor)
        self.orig, self.cf = FeatureStats(), FeatureStats()
        self.rows = FeatureRows()
        self.n: dict[str, int] = {}

    def update(self, batch: EvalBatch) -> None:
        orig = self.originals_of(batch)
        self.orig.update(orig)
        keep = batch.subset(self.subset)
        cf = embed(batch, self.net, "fid_features", "cf")[keep] if keep.any() else None
        if cf is not None:
            self.cf.update(cf)
        self.rows.add(batch.sample_id, orig, keep, cf)

    def merge(self, other: FID) -> None:
        self.orig.merge(other.orig)
        self.cf.merge(other.cf)

    def compute(self) -> dict[str, float]:
        require(self.cf.n, 2, "FID", self.subset)
        self.n = {"FID": self.cf.n, "FID_originals": self.orig.n}
        return {"FID": fid_from_stats(self.orig, self.cf, method=self.method)}

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        """FID of each resample: the drawn inputs' original rows against their kept CF rows."""
        o_ids, o, c_ids, c = self.rows.arrays()
        if len(c) < 2:
            return {"FID": np.full(len(resamples), np.nan)}
        return {"FID": weighted_frechet(o, resamples.weights(o_ids), c, resamples.weights(c_ids))}

    def cf_features(self) -> tuple[str, np.ndarray, np.ndarray]:
        """(extractor name, ids, feature rows) of the counterfactuals in FID's subset (``samples.npz``)."""
        _, _, c_ids, c = self.rows.arrays()
        return self.extractor, c_ids, c


class FeatureRows:
    """Per-sample feature rows of the originals (every input) and of the kept CFs, with sample ids:
    what the bootstrap of FID / KID resamples (``metrics.bootstrap``)."""

    def __init__(self) -> None:
        self.o_ids: list[np.ndarray] = []
        self.o: list[np.ndarray] = []
        self.c_ids: list[np.ndarray] = []
        self.c: list[np.ndarray] = []

    def add(self, sample_id: Tensor, orig: Tensor, keep: Tensor, cf: Tensor | None) -> None:
        ids = sample_id.cpu().numpy().astype(np.int64)
        self.o_ids.append(ids)
        self.o.append(np.asarray(orig.detach().cpu().double() if torch.is_tensor(orig) else orig, np.float64))
        if cf is not None:
            self.c_ids.append(ids[keep.cpu().numpy()])
            self.c.append(cf.detach().cpu().double().numpy())

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(original ids, original rows, CF ids, CF rows)."""
        def cat(parts, shape):
            return np.concatenate(parts) if parts else np.zeros(shape)
        d = self.o[0].shape[1] if self.o else 0
        return (cat(self.o_ids, (0,)).astype(np.int64), cat(self.o, (0, d)),
                cat(self.c_ids, (0,)).astype(np.int64), cat(self.c, (0, d)))


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
    roles = ("fid_features",)
    feature_bootstrap = True

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

    def bootstrap(self, resamples: Resamples) -> dict[str, np.ndarray]:
        """sFID of each resample: every seed's halves keep their drawn inputs (with their counts)."""
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)
        if not len(ids):
            return {"sFID": np.full(len(resamples), np.nan)}
        row = {int(i): r for r, i in enumerate(ids)}
        orig = np.concatenate(self.orig)
        per_seed = []
        for seed in self.seeds:
            h1, h2 = sfid_halves(ids, seed)
            fids = []
            for ho, hc in ((h1, h2), (h2, h1)):
                c_ids = np.array([i for i in hc if int(i) in self.cf], np.int64)
                if len(c_ids) < 2 or len(ho) < 2:
                    fids.append(np.full(len(resamples), np.nan))
                    continue
                o = orig[[row[int(i)] for i in ho]]
                c = np.stack([self.cf[int(i)] for i in c_ids])
                fids.append(weighted_frechet(o, resamples.weights(ho), c, resamples.weights(c_ids)))
            per_seed.append(np.mean(fids, 0))
        return {"sFID": np.mean(per_seed, 0)}
