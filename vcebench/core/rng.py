"""Per-sample random streams (EDM's per-seed convention).

Every sample draws its noise from its own ``torch.Generator`` seeded from
``(global seed, sample_id)``, so a counterfactual is identical whether it runs
alone, in a batch of 64, or in another shard.

The generators live on the CPU by default, so a GPU run draws exactly the noise of a CPU run.
``device="cuda"`` keeps them on the GPU instead (no host-side sampling and copy per draw; the
streams are then CUDA Philox streams: still per sample and batch-size independent, but not the
CPU streams).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch


def sample_seed(seed: int, sample_id: int, stream: str = "") -> int:
    """A 63-bit seed derived from (seed, sample_id, stream) by hashing."""
    h = hashlib.blake2b(f"{int(seed)}:{int(sample_id)}:{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


def step_seed(seed: int, step: int, stream: int = 0) -> int:
    """The 63-bit seed of one training step: a function of (seed, step, stream) only, so a resumed
    training run draws exactly what an uninterrupted one draws."""
    return (int(seed) * 1_000_003 + int(step) * 7919 + int(stream) * 104_729) % (2**63 - 1)


def step_generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """A CPU generator seeded with :func:`step_seed`."""
    g = torch.Generator()
    g.manual_seed(step_seed(seed, step, stream))
    return g


class SampleGenerators:
    """One generator per sample (on ``device``, the CPU by default); draws are stacked along the batch."""

    def __init__(self, seed: int, sample_ids: Sequence[int] | torch.Tensor, stream: str = "",
                 _gens: list[torch.Generator] | None = None, device: torch.device | str = "cpu"):
        self.seed = int(seed)
        self.device = torch.device(device)
        self.sample_ids = [int(i) for i in (sample_ids.tolist() if torch.is_tensor(sample_ids) else sample_ids)]
        self.stream = stream
        if _gens is None:
            _gens = []
            for sid in self.sample_ids:
                g = torch.Generator(device=self.device)
                g.manual_seed(sample_seed(self.seed, sid, stream))
                _gens.append(g)
        self.generators = _gens

    def __len__(self) -> int:
        return len(self.generators)

    def randn(self, *shape: int, device: torch.device | str = "cpu", dtype=torch.float32) -> torch.Tensor:
        """N x *shape standard normal noise, row i from sample i's stream."""
        rows = [torch.randn(shape, generator=g, dtype=dtype, device=self.device) for g in self.generators]
        return torch.stack(rows).to(device)

    def rand(self, *shape: int, device: torch.device | str = "cpu", dtype=torch.float32) -> torch.Tensor:
        rows = [torch.rand(shape, generator=g, dtype=dtype, device=self.device) for g in self.generators]
        return torch.stack(rows).to(device)

    def subset(self, index: torch.Tensor | Sequence[int]) -> SampleGenerators:
        """The generators of a subset of the batch (shared state: draws advance the originals)."""
        idx = index.tolist() if torch.is_tensor(index) else list(index)
        if idx and isinstance(idx[0], bool):
            idx = [i for i, keep in enumerate(idx) if keep]
        return SampleGenerators(self.seed, [self.sample_ids[i] for i in idx], self.stream,
                                _gens=[self.generators[i] for i in idx], device=self.device)

    def fork(self, stream: str) -> SampleGenerators:
        """Independent streams for the same samples (e.g. one per retry or per pass)."""
        return SampleGenerators(self.seed, self.sample_ids, f"{self.stream}/{stream}", device=self.device)
