"""Common machinery of the embedded synthetic datasets (``synthfaces``, ``synthxray``).

Every sample is a pure function of ``(seed, sample_id)``:

- ``identity = sample_id // images_per_identity``; the person's fixed parameters (face shape,
  skin tone, hair style, ...) and identity-level attributes come from uniforms drawn with the
  identity's own generator (``rng.sample_seed(seed, identity, "<name>/identity")``);
- the image's pose, lighting, background, expression and image-level attributes come from the
  sample's own generator (``"<name>/image"``), and its pixel noise from a third stream (``"<name>/noise"``).

Attributes only switch drawing layers on or off, and no random number is drawn conditionally, so
``render_counterfactual`` re-renders exactly the same image (pose, lighting, noise, everything)
with one attribute changed: the ground-truth counterfactual. Identities are split 70/10/20 into
train/val/test with a seeded permutation, so no person is in two splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ..core.errors import DatasetError
from ..core.io import quantize
from ..core.rng import sample_seed
from .attributes import AttributeNetwork, format_matrix
from .base import SPLIT_NAMES, Split

SPLIT_FRACTIONS = (0.7, 0.1, 0.2)


class SyntheticDataset:
    """Base class: subclasses set the class attributes below and implement ``_draw``."""

    name: str = ""
    channels: int = 3
    network: AttributeNetwork
    identity_params: tuple[str, ...] = ()   # names of per-identity uniforms (after the attribute nodes)
    image_params: tuple[str, ...] = ()      # names of per-image uniforms (after the attribute nodes)
    noise_std: float = 0.02                 # pixel noise in [0, 1] units
    batch_size: int = 256

    def __init__(self, resolution: int = 32, seed: int = 0, n_identities: int = 1000,
                 images_per_identity: int = 1):
        self.resolution = int(resolution)
        self.seed = int(seed)
        self.n_identities = int(n_identities)
        self.images_per_identity = int(images_per_identity)

    # ------------------------------------------------------------------ ids, identities, splits
    @property
    def attribute_names(self) -> list[str]:
        return list(self.network.names)

    @property
    def n_samples(self) -> int:
        return self.n_identities * self.images_per_identity

    def identity_of(self, sample_ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
        return torch.as_tensor(sample_ids, dtype=torch.int64) // self.images_per_identity

    def identity_splits(self) -> np.ndarray:
        """Split index (0 train, 1 val, 2 test) of every identity (seeded permutation, 70/10/20)."""
        rng = np.random.default_rng(sample_seed(self.seed, 0, f"{self.name}/split"))
        perm = rng.permutation(self.n_identities)
        n_train = int(round(SPLIT_FRACTIONS[0] * self.n_identities))
        n_val = int(round(SPLIT_FRACTIONS[1] * self.n_identities))
        out = np.empty(self.n_identities, dtype=np.int64)
        out[perm[:n_train]] = 0
        out[perm[n_train:n_train + n_val]] = 1
        out[perm[n_train + n_val:]] = 2
        return out

    def split_sample_ids(self, split: str) -> torch.Tensor:
        if split not in SPLIT_NAMES:
            raise DatasetError(f"unknown split {split!r} of {self.name}; known: {', '.join(SPLIT_NAMES)}")
        idents = np.nonzero(self.identity_splits() == SPLIT_NAMES.index(split))[0]
        ids = (idents[:, None] * self.images_per_identity + np.arange(self.images_per_identity)).reshape(-1)
        return torch.from_numpy(np.sort(ids)).long()

    def _check_ids(self, sample_ids: torch.Tensor | Sequence[int]) -> np.ndarray:
        ids = np.asarray(torch.as_tensor(sample_ids, dtype=torch.int64)).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_samples):
            raise DatasetError(f"{self.name} sample ids must lie in [0, {self.n_samples}); got "
                               f"{ids[(ids < 0) | (ids >= self.n_samples)][:5].tolist()}")
        return ids

    # ------------------------------------------------------------------ random draws
    def uniforms(self, sample_ids: torch.Tensor | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(identity uniforms N x K_id, image uniforms N x K_img) of the samples."""
        ids = self._check_ids(sample_ids)
        k_id = self.network.n_identity_uniforms + len(self.identity_params)
        k_img = self.network.n_image_uniforms + len(self.image_params)
        idents = ids // self.images_per_identity
        uniq, inv = np.unique(idents, return_inverse=True)
        u_id = np.stack([np.random.default_rng(sample_seed(self.seed, i, f"{self.name}/identity")).random(k_id)
                         for i in uniq.tolist()]) if len(uniq) else np.zeros((0, k_id))
        u_img = np.stack([np.random.default_rng(sample_seed(self.seed, s, f"{self.name}/image")).random(k_img)
                          for s in ids.tolist()]) if len(ids) else np.zeros((0, k_img))
        return u_id[inv.reshape(-1)], u_img

    def noise(self, sample_ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """Pixel noise N x C x H x W (standard normal, the sample's own stream)."""
        ids = self._check_ids(sample_ids)
        shape = (self.channels, self.resolution, self.resolution)
        arr = [np.random.default_rng(sample_seed(self.seed, s, f"{self.name}/noise")).standard_normal(shape,
                                                                                                        np.float32)
               for s in ids.tolist()]
        return torch.from_numpy(np.stack(arr)) if arr else torch.zeros(0, *shape)

    def labels(self, sample_ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """float32 N x A labels in {0, 1} (cheap: no rendering)."""
        u_id, u_img = self.uniforms(sample_ids)
        lab = self.network.sample(u_id[:, : self.network.n_identity_uniforms],
                                  u_img[:, : self.network.n_image_uniforms])
        return torch.from_numpy(lab)

    def _params(self, u_id: np.ndarray, u_img: np.ndarray) -> dict[str, torch.Tensor]:
        """Named per-sample uniforms (B,) for the renderer."""
        a, b = self.network.n_identity_uniforms, self.network.n_image_uniforms
        out = {n: torch.from_numpy(u_id[:, a + k]).float() for k, n in enumerate(self.identity_params)}
        out.update({n: torch.from_numpy(u_img[:, b + k]).float() for k, n in enumerate(self.image_params)})
        return out

    # ------------------------------------------------------------------ rendering
    def _draw(self, p: dict[str, torch.Tensor], lab: dict[str, torch.Tensor], ids: np.ndarray) -> torch.Tensor:
        """Render one batch of samples ``ids``: float B x C x H x W in [0, 1] before noise."""
        raise NotImplementedError

    def render(self, sample_ids: torch.Tensor | Sequence[int], labels: torch.Tensor | None = None) -> torch.Tensor:
        """float32 N x C x H x W in [-1, 1]; ``labels`` (N x A) overrides the sampled attributes."""
        ids = self._check_ids(sample_ids)
        if labels is None:
            labels = self.labels(ids)
        labels = torch.as_tensor(labels, dtype=torch.float32).reshape(len(ids), len(self.attribute_names))
        out = torch.empty(len(ids), self.channels, self.resolution, self.resolution)

        def batch(start: int) -> None:
            sl = slice(start, start + self.batch_size)
            u_id, u_img = self.uniforms(ids[sl])
            lab = {n: labels[sl, j] for j, n in enumerate(self.attribute_names)}
            img = self._draw(self._params(u_id, u_img), lab, ids[sl])
            img = img + self.noise_std * self.noise(ids[sl])
            out[sl] = (img * 2 - 1).clamp_(-1, 1)

        starts = list(range(0, len(ids), self.batch_size))
        threads = torch.get_num_threads()
        workers = min(threads, len(starts))
        if workers <= 1:
            for start in starts:
                batch(start)
            return out
        # One batch per thread, each with single-threaded ops: the elementwise kernels release the GIL, and
        # there are no OpenMP barriers to spin on when the cores are shared with other jobs.
        torch.set_num_threads(1)
        try:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(batch, starts))
        finally:
            torch.set_num_threads(threads)
        return out

    def render_uint8(self, sample_ids: torch.Tensor | Sequence[int],
                     labels: torch.Tensor | None = None) -> torch.Tensor:
        """uint8 N x C x H x W, quantised as ``round((x + 1) * 127.5)``."""
        return quantize(self.render(sample_ids, labels))

    def _column(self, attribute: str) -> int:
        if attribute not in self.attribute_names:
            raise DatasetError(f"{self.name} has no attribute {attribute!r}; known: "
                               f"{', '.join(self.attribute_names)}")
        return self.attribute_names.index(attribute)

    def counterfactual_labels(self, labels: torch.Tensor, attribute: str, value: torch.Tensor) -> torch.Tensor:
        """Labels with ``attribute`` set to ``value`` (subclasses add coupled edits, e.g. exclusive hair colours)."""
        out = labels.clone()
        out[:, self._column(attribute)] = value.float()
        return out

    def render_counterfactual(self, sample_id: int, attribute: str, value: int | bool) -> torch.Tensor:
        """C x H x W in [-1, 1]: sample ``sample_id`` with only ``attribute`` set to ``value``."""
        ids = self._check_ids([int(sample_id)])
        lab = self.counterfactual_labels(self.labels(ids), attribute, torch.tensor([float(bool(value))]))
        return self.render(ids, lab)[0]

    def render_with(self, sample_ids: torch.Tensor | Sequence[int], attribute: str,
                    values: torch.Tensor) -> torch.Tensor:
        """N x C x H x W in [-1, 1]: sample i with only ``attribute`` set to ``values[i]`` (0 / 1); a sample
        whose attribute already has that value is rendered as it is."""
        ids = self._check_ids(sample_ids)
        values = torch.as_tensor(values).reshape(len(ids)).cpu()
        return self.render(ids, self.counterfactual_labels(self.labels(ids), attribute, values))

    def gt_counterfactuals(self, sample_ids: torch.Tensor | Sequence[int], attribute: str) -> torch.Tensor:
        """N x C x H x W in [-1, 1]: every sample with ``attribute`` flipped (the ground truth)."""
        ids = self._check_ids(sample_ids)
        return self.render_with(ids, attribute, 1 - self.labels(ids)[:, self._column(attribute)])

    # ------------------------------------------------------------------ splits and documentation
    def split(self, split: str) -> Split:
        ids = self.split_sample_ids(split)
        return Split(self.name, split, ids, self.labels(ids), self.identity_of(ids), self.attribute_names,
                     self.render_uint8(ids))

    def correlation(self) -> np.ndarray:
        """The documented A x A attribute correlation matrix (exact, from the sampling network)."""
        return self.network.correlation()

    def marginals(self) -> np.ndarray:
        return self.network.marginals()

    def describe(self) -> str:
        """Attribute prevalences and the correlation matrix as text."""
        head = "prevalence: " + ", ".join(f"{n} {p:.2f}" for n, p in zip(self.attribute_names, self.marginals()))
        return head + "\n" + format_matrix(self.attribute_names, self.correlation())

    def attribute_region(self, sample_ids: torch.Tensor | Sequence[int], attribute: str) -> torch.Tensor:
        """bool N x H x W: where the ground-truth counterfactual of ``attribute`` may differ (None region
        known -> all True)."""
        ids = self._check_ids(sample_ids)
        return torch.ones(len(ids), self.resolution, self.resolution, dtype=torch.bool)
