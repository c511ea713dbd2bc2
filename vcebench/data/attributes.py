"""Correlated binary attributes from a small Bayesian network.

Each node is a binary attribute (or a one-hot group of mutually exclusive ones) whose probability
depends on earlier nodes. The same network is used two ways:

- ``sample(u_identity, u_image)`` turns fixed per-identity / per-image uniforms into labels, so
  labels are deterministic in (seed, sample_id) and never depend on the batch;
- ``correlation()`` enumerates the joint distribution exactly and returns the documented
  attribute correlation matrix (Pearson / phi coefficients), which the tests compare against
  correlations measured on sampled labels.

Identity-level nodes (e.g. Male) are drawn once per person from the identity's uniforms; they may
only depend on other identity-level nodes, so every image's attribute vector follows the same
joint distribution as the network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Parents = dict[str, np.ndarray]


@dataclass(frozen=True)
class Node:
    """``names``: one name (binary) or several (one-hot categorical; all-zero is the remaining category).

    ``probs(parents)`` gives P(name_k = 1) for each row of parent values: an array broadcastable to
    R x len(names) (a constant tuple for a root node).
    """

    names: tuple[str, ...]
    level: str  # "identity" | "image"
    probs: Callable[[Parents], np.ndarray | tuple[float, ...]]

    def p(self, parents: Parents, n: int) -> np.ndarray:
        a = np.asarray(self.probs(parents), dtype=np.float64)
        if a.ndim < 2:
            a = a.reshape(1, -1)
        return np.broadcast_to(a, (n, len(self.names)))


def bern(p_true: float, p_false: float, parent: str) -> Callable[[Parents], np.ndarray]:
    """P(x=1) = p_true where ``parent`` is 1, p_false where it is 0."""
    return lambda v: np.where(v[parent] > 0.5, p_true, p_false)[:, None]


class AttributeNetwork:
    def __init__(self, nodes: list[Node], order: list[str]):
        self.nodes = nodes
        self.names = list(order)
        seen_id: set[str] = set()
        for n in nodes:
            if n.level not in ("identity", "image"):
                raise ValueError(f"bad level {n.level}")
            if n.level == "identity":
                seen_id.update(n.names)
        self.identity_nodes = [n for n in nodes if n.level == "identity"]
        self.image_nodes = [n for n in nodes if n.level == "image"]
        # identity-level nodes must come first and depend only on identity-level nodes
        if nodes[: len(self.identity_nodes)] != self.identity_nodes:
            raise ValueError("identity-level nodes must precede image-level nodes")
        assert sorted(sum((list(n.names) for n in nodes), [])) == sorted(order)

    @property
    def n_identity_uniforms(self) -> int:
        return len(self.identity_nodes)

    @property
    def n_image_uniforms(self) -> int:
        return len(self.image_nodes)

    @staticmethod
    def _draw(node: Node, p: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
        cum = np.cumsum(p, axis=1)
        cat = (u[:, None] >= cum).sum(axis=1)  # index of the drawn category; len(names) = none
        return {name: (cat == k).astype(np.float64) for k, name in enumerate(node.names)}

    def sample(self, u_identity: np.ndarray, u_image: np.ndarray) -> np.ndarray:
        """Labels R x A (float32, columns in ``self.names`` order) from uniforms R x n_identity / R x n_image."""
        vals: Parents = {}
        n = len(u_identity)
        for j, node in enumerate(self.identity_nodes):
            vals.update(self._draw(node, node.p(vals, n), u_identity[:, j]))
        for j, node in enumerate(self.image_nodes):
            vals.update(self._draw(node, node.p(vals, n), u_image[:, j]))
        return np.stack([vals[n] for n in self.names], axis=1).astype(np.float32)

    def joint(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact joint: (states S x A in ``self.names`` order, probabilities S)."""
        vals: Parents = {}
        w = np.ones(1)
        for node in self.nodes:
            p = node.p(vals, len(w))
            k = len(node.names)
            p_full = np.concatenate([p, 1.0 - p.sum(axis=1, keepdims=True)], axis=1)  # R x (k+1)
            r = len(w)
            new_w = (w[:, None] * p_full).reshape(-1)
            new_vals = {name: np.repeat(v, k + 1) for name, v in vals.items()}
            cat = np.tile(np.arange(k + 1), r)
            for j, name in enumerate(node.names):
                new_vals[name] = (cat == j).astype(np.float64)
            keep = new_w > 0
            vals = {name: v[keep] for name, v in new_vals.items()}
            w = new_w[keep]
        return np.stack([vals[n] for n in self.names], axis=1), w

    def marginals(self) -> np.ndarray:
        states, w = self.joint()
        return (states * w[:, None]).sum(0)

    def correlation(self) -> np.ndarray:
        """Exact A x A Pearson (phi) correlation of the binary attributes."""
        states, w = self.joint()
        mean = (states * w[:, None]).sum(0)
        cov = (states - mean).T @ ((states - mean) * w[:, None])
        sd = np.sqrt(np.clip(np.diag(cov), 1e-12, None))
        return cov / np.outer(sd, sd)


def format_matrix(names: list[str], m: np.ndarray, digits: int = 2) -> str:
    """A plain-text table of ``m`` (for docstrings / README)."""
    short = [n[:10] for n in names]
    head = " " * 20 + " ".join(f"{s:>10}" for s in short)
    rows = [f"{n:<20}" + " ".join(f"{v:>10.{digits}f}" for v in row) for n, row in zip(names, m)]
    return "\n".join([head, *rows])
