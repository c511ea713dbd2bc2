"""``synthxray``: procedural grayscale chest radiographs with a pacemaker shortcut.

Drawn like :mod:`vcebench.data.synthfaces` (signed distances on a supersampled canvas, affine
pose, box-filter down-sampling): air, the soft-tissue silhouette of the thorax and shoulders,
dark lung fields with low-frequency vascular texture, the heart shadow, mediastinum, spine with
vertebral banding, posterior ribs and clavicles, breast shadows for women, then exposure /
contrast and pixel noise.

Attributes (CheXpert-like names):

- Pacemaker: a bright metal device under one clavicle (the patient's left, image right, in most
  patients) with a lead wire running to the heart. The ground-truth counterfactual removes (or
  adds) the device and lead and nothing else.
- Cardiomegaly: a heart shadow about 45% wider (cardiothoracic ratio above 0.5); a pacemaker lead,
  which ends in the heart, follows it.
- Effusion: a fluid opacity with a meniscus at one or both lung bases.
- Male: broader thorax, no breast shadows.

Patients are the identities (``n_patients`` x ``images_per_patient`` images); Male, Cardiomegaly
and Pacemaker belong to the patient, Effusion to the image. Pacemaker and Cardiomegaly are
strongly correlated (the shortcut a classifier may take). Exact correlation matrix
(:func:`attribute_correlation`, ``vcebench data describe synthxray``)::

                        Cardio Effusi   Male Pacema
    Cardiomegaly          1.00   0.31   0.06   0.43
    Effusion              0.31   1.00   0.02   0.13
    Male                  0.06   0.02   1.00   0.02
    Pacemaker             0.43   0.13   0.02   1.00
    prevalence            0.28   0.20   0.55   0.41
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .. import registry
from ..core.rng import sample_seed
from . import draw as D
from .attributes import AttributeNetwork, Node, bern
from .synthetic import SyntheticDataset

Tensor = torch.Tensor

ATTRIBUTES = registry.get_dataset_spec("synthxray").attributes  # declared in vcebench/registry/builtin_specs.py

ATTRIBUTE_NETWORK = AttributeNetwork([
    Node(("Male",), "identity", lambda v: (0.55,)),
    Node(("Cardiomegaly",), "identity", bern(0.30, 0.25, "Male")),
    Node(("Pacemaker",), "identity", bern(0.75, 0.28, "Cardiomegaly")),
    Node(("Effusion",), "image", bern(0.40, 0.12, "Cardiomegaly")),
], list(ATTRIBUTES))

TEXTURE = 6  # the vascular texture is a TEXTURE x TEXTURE normal grid, upsampled bicubically


def attribute_correlation() -> tuple[list[str], np.ndarray]:
    """(attribute names, exact A x A correlation matrix of the synthxray labels)."""
    return list(ATTRIBUTES), ATTRIBUTE_NETWORK.correlation()


class SynthXray(SyntheticDataset):
    name = "synthxray"
    channels = 1
    network = ATTRIBUTE_NETWORK
    identity_params = ("body_w", "lung_w", "lung_h", "heart", "heart_x", "rib_phase", "rib_period", "dev_side",
                       "dev_x", "dev_y", "lead_bend", "spine_w", "clav")
    image_params = ("tx", "ty", "rot", "scale", "exposure", "contrast", "gamma", "eff_side", "eff_h", "inspire",
                    "tissue")
    noise_std = 0.02

    def pose(self, p: dict[str, Tensor]) -> Tensor:
        return D.pose_theta((p["tx"] - 0.5) * 0.10, (p["ty"] - 0.5) * 0.08, (p["rot"] - 0.5) * math.radians(8),
                            0.96 + 0.08 * p["scale"])

    def texture(self, ids: np.ndarray) -> Tensor:
        """Per-image low-frequency texture B x 1 x TEXTURE x TEXTURE (own stream)."""
        arr = [np.random.default_rng(sample_seed(self.seed, int(s), f"{self.name}/texture"))
               .standard_normal((1, TEXTURE, TEXTURE), np.float32) for s in ids]
        return torch.from_numpy(np.stack(arr))

    def _draw(self, p: dict[str, Tensor], lab: dict[str, Tensor], ids: np.ndarray) -> Tensor:
        c = D.Canvas(len(ids), 1, self.resolution)
        x = ChestLayout(p, lab)
        _body(c, x)
        _lungs(c, x, self.texture(ids))
        _ribs_and_clavicles(c, x)
        _breasts_and_effusion(c, x)
        _mediastinum_spine_heart(c, x)
        _pacemaker(c, x)
        # exposure and contrast
        img = c.finish(self.pose(p))
        contrast = D.bc(0.9 + 0.25 * p["contrast"])
        img = (img - 0.35) * contrast + 0.35 + D.bc(0.08 * (p["exposure"] - 0.5))
        return img.clamp_(0, 1) ** D.bc(0.85 + 0.3 * p["gamma"])


def _grey(B: int, v: float) -> Tensor:
    """A grey level for every sample (B,1,1,1)."""
    return torch.full((B, 1, 1, 1), float(v))


class ChestLayout:
    """Per-patient geometry of one batch (canonical units, y down), shared by the layers."""

    def __init__(self, p: dict[str, Tensor], lab: dict[str, Tensor]):
        self.p, self.B = p, len(p["body_w"])
        self.male, self.eff, self.pace = lab["Male"], lab["Effusion"], lab["Pacemaker"]
        male = self.male
        self.bw = (0.86 + 0.08 * p["body_w"]) * (1 + 0.05 * male)
        self.lw = 0.92 + 0.12 * p["lung_w"] + 0.05 * male
        self.lh = (0.92 + 0.12 * p["lung_h"]) * (0.97 + 0.06 * p["inspire"])
        self.hs = (0.94 + 0.12 * p["heart"]) * (1 + 0.45 * lab["Cardiomegaly"])
        self.base = 0.38 * self.lh + 0.10          # lung bases (diaphragm) at the lateral sides
        self.top = -0.62 * self.lh + 0.02          # lung apices
        # the heart's centre (the pacemaker lead ends in it)
        self.hx = 0.08 + 0.04 * p["heart_x"] + 0.06 * (self.hs - 1)
        self.hy = self.base - 0.19 - 0.03 * (self.hs - 1)


def _body(c: D.Canvas, x: ChestLayout) -> None:
    """Air, and the soft tissue of the body, shoulders and neck."""
    bc = D.bc
    w = c.full()
    c.img.copy_((0.04 + 0.03 * (w.Y + 1) / 2).expand(x.B, 1, c.S, c.S))
    d_body = D.sd_box(w.X, w.Y, 0.0, 0.35, bc(x.bw), 0.95, 0.35)
    d_body = torch.minimum(d_body, D.sd_box(w.X, w.Y, 0.0, -0.8, 0.16, 0.35, 0.05))
    w.paint(D.soft(d_body, 0.10), 0.36 + 0.06 * bc(x.p["tissue"]))


def _lungs(c: D.Canvas, x: ChestLayout, texture: Tensor) -> None:
    """Lung fields (wider at the base) with vascular ``texture`` (B x 1 x TEXTURE x TEXTURE)."""
    bc, lw, base, top = D.bc, x.lw, x.base, x.top
    tex = F.interpolate(texture, size=(c.S, c.S), mode="bicubic", align_corners=False)
    w = c.window(-0.85, 0.85, -0.75, 0.65)
    tex = tex[:, :, w.sy, w.sx]
    d_lung = None
    for s in (-1.0, 1.0):
        cx = bc(s * 0.38 * lw)
        rx, ry = bc(0.31 * lw), bc((base - top) / 2 + 0.08)
        cy = bc((base + top) / 2)
        widen = 0.62 + 0.38 * ((w.Y - bc(top)) / bc(base - top)).clamp(0, 1) ** 0.6
        d = D.sd_ellipse(w.X, w.Y, cx + s * (1 - widen) * 0.05, cy, rx * widen, ry.expand_as(widen))
        dome = bc(base) - 0.09 * (1 - ((w.X - cx) / rx).clamp(-1, 1) ** 2)
        d = torch.maximum(d, w.Y - dome)
        d = torch.maximum(d, 0.09 - s * w.X)
        d_lung = d if d_lung is None else torch.minimum(d_lung, d)
    lung_a = D.soft(d_lung, 0.06)
    hilum = torch.exp(-((w.X.abs() - 0.2) ** 2 + (w.Y - 0.0) ** 2) / 0.03)
    lung_col = (0.12 + 0.04 * tex + 0.10 * hilum).clamp(0.03, 0.4)
    w.paint(lung_a * 0.95, lung_col)


def _ribs_and_clavicles(c: D.Canvas, x: ChestLayout) -> None:
    """Posterior rib arcs over the thorax, and the clavicles."""
    bc, p, base, top = D.bc, x.p, x.base, x.top
    w4 = c.window(-0.95, 0.95, -0.8, 0.6)
    period = bc(0.11 + 0.02 * p["rib_period"])
    v = w4.Y - 0.45 * w4.X ** 2 + bc(p["rib_phase"] * 0.1)
    q = (v / period) - torch.floor(v / period)
    d = (q - 0.5).abs() * period - 0.22 * period
    thorax = D.soft(torch.maximum(D.sd_ellipse(w4.X, w4.Y, 0.0, bc((base + top) / 2), bc(0.70 * x.lw),
                                               bc((base - top) / 2 + 0.1)), w4.Y - bc(base)), 0.08)
    w4.get().add_(0.09 * D.soft(d, 0.02 * period) * thorax * (w4.X.abs() > 0.08).float())
    for s in (-1.0, 1.0):
        d = D.sd_segment(w4.X, w4.Y, s * 0.08, bc(top + 0.05 + 0.04 * p["clav"]), s * 0.62,
                         bc(top - 0.06 + 0.04 * p["clav"])) - 0.03
        w4.paint(D.soft(d, 0.02) * 0.75, _grey(x.B, 0.58))


def _breasts_and_effusion(c: D.Canvas, x: ChestLayout) -> None:
    """Breast shadows (women), and the effusion's fluid at one or both lung bases."""
    bc, lw, base = D.bc, x.lw, x.base
    w2 = c.window(-0.9, 0.9, 0.0, 0.9)
    for s in (-1.0, 1.0):
        d = D.sd_ellipse(w2.X, w2.Y, s * 0.42, bc(base), 0.32, 0.22)
        w2.get().add_(0.06 * D.soft(d, 0.15) * bc(1 - x.male))
    side = x.p["eff_side"]
    for s in (-1.0, 1.0):
        on = x.eff * ((side < 0.6) if s < 0 else (side > 0.4)).float()
        cx = s * 0.38 * lw
        level = bc(base - 0.12 - 0.12 * x.p["eff_h"]) - 0.15 * ((w2.X - bc(cx)) * s / bc(0.27 * lw)).clamp(0, 1) ** 2
        d = torch.maximum(level - w2.Y, D.sd_ellipse(w2.X, w2.Y, bc(cx), bc(base - 0.3), bc(0.35 * lw), 0.5))
        d = torch.maximum(d, torch.maximum(0.09 - s * w2.X, w2.Y - bc(base) - 0.05))
        w2.paint(D.soft(d, 0.04) * bc(0.8 * on), _grey(x.B, 0.40))


def _mediastinum_spine_heart(c: D.Canvas, x: ChestLayout) -> None:
    bc, hs = D.bc, x.hs
    w3 = c.window(-0.7, 0.7, -0.9, 0.8)
    d = D.sd_box(w3.X, w3.Y, 0.0, -0.3, 0.09, 0.6, 0.05)
    w3.paint(D.soft(d, 0.05) * 0.9, _grey(x.B, 0.46))
    sw = 0.05 + 0.015 * x.p["spine_w"]
    d = D.sd_box(w3.X, w3.Y, 0.0, 0.0, bc(sw), 0.95, 0.02)
    band = 1 + 0.06 * torch.cos(w3.Y * (2 * math.pi / 0.11))
    w3.paint(D.soft(d, 0.02) * 0.5, 0.55 * band)
    d = D.sd_ellipse(w3.X, w3.Y, bc(x.hx), bc(x.hy), bc(0.26 * hs), bc(0.19 * (1 + 0.4 * (hs - 1))))
    w3.paint(D.soft(d, 0.04) * 0.95, _grey(x.B, 0.50))


def _pacemaker(c: D.Canvas, x: ChestLayout) -> None:
    """Generator under a clavicle + lead to the right ventricle (drawn for the rows with a pacemaker only)."""
    p = x.p
    rows = torch.nonzero(x.pace > 0.5)[:, 0]
    if not len(rows):
        return
    w5 = c.window(-0.66, 0.66, -0.64, 0.46)
    side = torch.where(p["dev_side"][rows] < 0.85, 1.0, -1.0)
    dx, dy = side * (0.38 + 0.12 * p["dev_x"][rows]), x.top[rows] + 0.12 + 0.08 * p["dev_y"][rows]
    hxr, hyr, hsr = x.hx[rows], x.hy[rows], x.hs[rows]
    t = torch.linspace(0, 1, 9).view(1, -1)
    pts = [(dx - side * 0.07, dy + 0.02), (dx * 0.3, dy + 0.02),
           (0.02 + 0.06 * p["lead_bend"][rows], hyr - 0.35), (hxr + 0.08 * hsr, hyr + 0.05)]
    bern = [(1 - t) ** 3, 3 * t * (1 - t) ** 2, 3 * t ** 2 * (1 - t), t ** 3]
    px = sum(b * q[0].view(-1, 1) for b, q in zip(bern, pts))
    py = sum(b * q[1].view(-1, 1) for b, q in zip(bern, pts))
    d_lead = D.sd_polyline(w5.X, w5.Y, px, py) - 0.008
    w5.paint(c.cover(d_lead) * 0.9, 0.92, rows)
    d = D.sd_box(w5.X, w5.Y, D.bc(dx), D.bc(dy), 0.075, 0.055, 0.025)
    w5.paint(c.cover(d), 0.97, rows)
    w5.paint(c.cover(d + 0.03), 0.86, rows)


def from_config(dc: dict) -> SynthXray:
    """The renderer of the config section ``datasets.synthxray`` (its loader: ``DatasetSpec.loader``)."""
    return SynthXray(resolution=dc["resolution"], seed=dc["seed"], n_identities=dc["n_patients"],
                     images_per_identity=dc["images_per_patient"])
