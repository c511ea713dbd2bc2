"""``synthfaces``: procedural CelebA-like faces with ground-truth counterfactuals.

A face is drawn from signed distances in canonical coordinates (x right, y down, the image
spans [-1, 1]) on a supersampled canvas, posed by an affine warp and box-filtered to the output
resolution (:mod:`vcebench.data.draw`), so the geometry is the same at 32, 64 or 128 px.

Identity (fixed per person): face width / height / jaw taper, skin tone, eye spacing / height /
size / iris colour, nose length / width, mouth width / height, lip thickness, brow thickness / tilt,
hair volume / length / parting / tone, beard and glasses style; plus the identity-level attributes
Male, Young, Gray_Hair, the hair colour (Black/Blond/Brown/other), Bangs and No_Beard.
Image (varies between a person's images): pose (shift, rotation, scale), light direction and
ambient level, brightness and colour temperature, background colour and gradient, clothes colour,
gaze, eye opening, smile / mouth-opening intensity, brow raise, and the image-level attributes
Smiling, Mouth_Slightly_Open, Wearing_Lipstick, Heavy_Makeup, Eyeglasses.

What each attribute draws:

- Smiling: wider mouth with upturned corners that bares the upper teeth, smile lines at the corners,
  raised rosy cheek apples (mouth/cheek region only). Mouth_Slightly_Open: a dark gap between the
  lips (below the teeth when smiling).
- Young = 0: forehead lines, eye bags, nasolabial folds, greyer less saturated skin, greying hair
  (identity, pose and everything else unchanged).
- Male: wider face and jaw, thicker brows, short hair (a person's hair length is part of the
  identity; with Male = 1 long hair is rare).
- No_Beard = 0: full beard or goatee + moustache in the hair colour.
- Eyeglasses: dark round or rectangular frames with a slight lens tint.
- Bangs: a fringe over the forehead. Gray/Blond/Black/Brown_Hair: the hair colour (mutually
  exclusive; none of them = an auburn / dark-brown "other" colour). A hair-colour counterfactual
  with value 1 clears the other three hair colours (exclusive rendering).
- Wearing_Lipstick: red lips. Heavy_Makeup: eye shadow, heavier lashes and blush.

Attribute correlations mimic CelebA's signs and rough sizes. They are realised by the Bayesian
network :data:`ATTRIBUTE_NETWORK` (identity-level nodes drawn once per person) and documented by the
exact Pearson (phi) matrix :func:`attribute_correlation` (``vcebench data describe synthfaces``)::

                         Bangs BlackH BlondH BrownH Eyegla GrayHa HeavyM   Male MouthS NoBear Smilin Wearin  Young
    Bangs                 1.00  -0.02   0.06  -0.00  -0.03  -0.02   0.11  -0.21   0.01   0.12   0.01   0.16   0.04
    Black_Hair           -0.02   1.00  -0.26  -0.28  -0.00  -0.16  -0.06   0.11  -0.00  -0.05  -0.01  -0.09   0.05
    Blond_Hair            0.06  -0.26   1.00  -0.24  -0.05  -0.14   0.17  -0.30   0.01   0.17   0.02   0.23   0.11
    Brown_Hair           -0.00  -0.28  -0.24   1.00  -0.01  -0.15   0.00   0.01  -0.00   0.00  -0.00  -0.01   0.06
    Eyeglasses           -0.03  -0.00  -0.05  -0.01   1.00   0.11  -0.08   0.12  -0.00  -0.10  -0.01  -0.09  -0.26
    Gray_Hair            -0.02  -0.16  -0.14  -0.15   0.11   1.00  -0.08   0.09  -0.00  -0.10  -0.01  -0.07  -0.44
    Heavy_Makeup          0.11  -0.06   0.17   0.00  -0.08  -0.08   1.00  -0.55   0.02   0.31   0.04   0.71   0.19
    Male                 -0.21   0.11  -0.30   0.01   0.12   0.09  -0.55   1.00  -0.03  -0.56  -0.07  -0.77  -0.20
    Mouth_Slightly_Open   0.01  -0.00   0.01  -0.00  -0.00  -0.00   0.02  -0.03   1.00   0.02   0.50   0.03   0.01
    No_Beard              0.12  -0.05   0.17   0.00  -0.10  -0.10   0.31  -0.56   0.02   1.00   0.04   0.43   0.23
    Smiling               0.01  -0.01   0.02  -0.00  -0.01  -0.01   0.04  -0.07   0.50   0.04   1.00   0.05   0.01
    Wearing_Lipstick      0.16  -0.09   0.23  -0.01  -0.09  -0.07   0.71  -0.77   0.03   0.43   0.05   1.00   0.16
    Young                 0.04   0.05   0.11   0.06  -0.26  -0.44   0.19  -0.20   0.01   0.23   0.01   0.16   1.00
    prevalence            0.17   0.23   0.18   0.21   0.09   0.08   0.34   0.42   0.47   0.81   0.49   0.46   0.78

"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import registry
from . import draw as D
from .attributes import AttributeNetwork, Node, bern
from .face_layers import draw_faces
from .synthetic import SyntheticDataset

Tensor = torch.Tensor

ATTRIBUTES = registry.get_dataset_spec("synthfaces").attributes  # declared in vcebench/registry/builtin_specs.py
HAIR_COLOURS = ("Black_Hair", "Blond_Hair", "Brown_Hair", "Gray_Hair")


def _hair(v: dict[str, np.ndarray]) -> np.ndarray:
    gray = v["Gray_Hair"][:, None] > 0.5
    male = v["Male"][:, None] > 0.5
    p = np.where(male, [0.32, 0.05, 0.24], [0.20, 0.30, 0.22])
    return np.where(gray, 0.0, p)


def _no_beard(v: dict[str, np.ndarray]) -> np.ndarray:
    return np.where(v["Male"] > 0.5, np.where(v["Young"] > 0.5, 0.62, 0.42), 1.0)[:, None]


def _makeup(v: dict[str, np.ndarray]) -> np.ndarray:
    lip, young = v["Wearing_Lipstick"] > 0.5, v["Young"] > 0.5
    return np.where(lip, np.where(young, 0.74, 0.48), 0.03)[:, None]


def _glasses(v: dict[str, np.ndarray]) -> np.ndarray:
    male, young = v["Male"] > 0.5, v["Young"] > 0.5
    return np.where(young, np.where(male, 0.07, 0.04), np.where(male, 0.26, 0.18))[:, None]


#: The sampling scheme (a Bayesian network). Identity-level nodes first.
ATTRIBUTE_NETWORK = AttributeNetwork([
    Node(("Male",), "identity", lambda v: (0.42,)),
    Node(("Young",), "identity", bern(0.68, 0.85, "Male")),
    Node(("Gray_Hair",), "identity", bern(0.015, 0.30, "Young")),
    Node(("Black_Hair", "Blond_Hair", "Brown_Hair"), "identity", _hair),
    Node(("Bangs",), "identity", bern(0.08, 0.24, "Male")),
    Node(("No_Beard",), "identity", _no_beard),
    Node(("Smiling",), "image", bern(0.45, 0.52, "Male")),
    Node(("Mouth_Slightly_Open",), "image", bern(0.72, 0.22, "Smiling")),
    Node(("Wearing_Lipstick",), "image", bern(0.01, 0.79, "Male")),
    Node(("Heavy_Makeup",), "image", _makeup),
    Node(("Eyeglasses",), "image", _glasses),
], list(ATTRIBUTES))


def attribute_correlation() -> tuple[list[str], np.ndarray]:
    """(attribute names, exact A x A correlation matrix of the synthfaces labels)."""
    return list(ATTRIBUTES), ATTRIBUTE_NETWORK.correlation()


# x0, x1, y0, y1 (canonical, y down): everything Smiling / mouth attributes may touch
SMILE_BOX = (-0.47, 0.47, 0.12, 0.62)


class SynthFaces(SyntheticDataset):
    name = "synthfaces"
    channels = 3
    network = ATTRIBUTE_NETWORK
    identity_params = ("skin", "skin_hue", "face_w", "face_h", "jaw", "eye_dx", "eye_dy", "eye_size", "iris",
                       "nose_len", "nose_w", "mouth_w", "mouth_dy", "lip", "brow_thick", "brow_tilt",
                       "hair_vol", "hair_len", "hair_part", "hair_tone", "other_hair", "ear", "beard_style",
                       "glasses_style")
    image_params = ("tx", "ty", "rot", "scale", "light_x", "light_y", "ambient", "bright", "warm", "bg_h", "bg_s",
                    "bg_v", "bg_grad", "bg_ang", "cloth_h", "cloth_s", "cloth_v", "gaze_x", "gaze_y", "eye_open",
                    "smile_amt", "open_amt", "brow_raise", "mouth_curve", "hair_phase")
    noise_std = 0.015

    def counterfactual_labels(self, labels: Tensor, attribute: str, value: Tensor) -> Tensor:
        out = super().counterfactual_labels(labels, attribute, value)
        if attribute in HAIR_COLOURS:
            for other in HAIR_COLOURS:
                if other != attribute:
                    col = self._column(other)
                    out[:, col] = torch.where(value > 0.5, torch.zeros_like(out[:, col]), out[:, col])
        return out

    def pose(self, p: dict[str, Tensor]) -> Tensor:
        return D.pose_theta((p["tx"] - 0.5) * 0.12, (p["ty"] - 0.5) * 0.10, (p["rot"] - 0.5) * math.radians(14),
                            0.95 + 0.10 * p["scale"])

    def attribute_region(self, sample_ids, attribute: str) -> Tensor:
        """Mouth/cheek box (posed, dilated by one pixel) for Smiling, Mouth_Slightly_Open and
        Wearing_Lipstick; the whole image for the other attributes."""
        if attribute not in ("Smiling", "Mouth_Slightly_Open", "Wearing_Lipstick"):
            return super().attribute_region(sample_ids, attribute)
        ids = self._check_ids(sample_ids)
        u_id, u_img = self.uniforms(ids)
        p = self._params(u_id, u_img)
        c = D.Canvas(len(ids), 1, self.resolution)
        x0, x1, y0, y1 = SMILE_BOX
        w = c.window(x0, x1, y0, y1)
        w.get().fill_(1.0)
        m = c.finish(self.pose(p))[:, 0] > 0
        return torch.nn.functional.max_pool2d(m[:, None].float(), 3, 1, 1)[:, 0] > 0

    def _draw(self, p: dict[str, Tensor], lab: dict[str, Tensor], ids: np.ndarray) -> Tensor:
        return draw_faces(p, lab, self.resolution, self.pose(p))


def from_config(dc: dict) -> SynthFaces:
    """The renderer of the config section ``datasets.synthfaces`` (its loader: ``DatasetSpec.loader``)."""
    return SynthFaces(resolution=dc["resolution"], seed=dc["seed"], n_identities=dc["n_identities"],
                      images_per_identity=dc["images_per_identity"])
