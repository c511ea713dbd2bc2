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

from . import draw as D
from .attributes import AttributeNetwork, Node, bern
from .synthetic import SyntheticDataset

Tensor = torch.Tensor

ATTRIBUTES = ("Bangs", "Black_Hair", "Blond_Hair", "Brown_Hair", "Eyeglasses", "Gray_Hair", "Heavy_Makeup",
              "Male", "Mouth_Slightly_Open", "No_Beard", "Smiling", "Wearing_Lipstick", "Young")
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


# canonical layout (y down)
FACE_CY = 0.02
SMILE_BOX = (-0.47, 0.47, 0.12, 0.62)   # x0, x1, y0, y1: everything Smiling / mouth attributes may touch


def _hsv(h: Tensor, s: Tensor, v: Tensor) -> Tensor:
    """(B,) hue/sat/value in [0, 1] -> (B,3,1,1) RGB."""
    h6 = h.view(-1) * 6
    base = torch.stack([torch.abs(h6 - 3) - 1, 2 - torch.abs(h6 - 2), 2 - torch.abs(h6 - 4)], dim=1).clamp(0, 1)
    out = v.view(-1, 1) * (1 - s.view(-1, 1) + s.view(-1, 1) * base)
    return out.view(-1, 3, 1, 1)


def _mix(a: Tensor, b: Tensor, t: Tensor) -> Tensor:
    """Per-sample blend of colours (B,3,1,1) with t (B,)."""
    return a + (b - a) * D.bc(t)


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

    # ------------------------------------------------------------------ the renderer
    def _draw(self, p: dict[str, Tensor], lab: dict[str, Tensor], ids: np.ndarray) -> Tensor:  # noqa: C901 (one drawing script)
        B = len(p["skin"])
        bc = D.bc
        c = D.Canvas(B, 3, self.resolution)
        male, young, smile = lab["Male"], lab["Young"], lab["Smiling"]
        old = 1 - young
        mopen = lab["Mouth_Slightly_Open"]

        # --- geometry (canonical units)
        fx, fy = torch.zeros(B), torch.full((B,), FACE_CY)
        frx = 0.53 * (0.93 + 0.14 * p["face_w"]) * (1 + 0.05 * male)
        fry = 0.70 * (0.95 + 0.10 * p["face_h"])
        jaw = 0.10 + 0.22 * p["jaw"] - 0.08 * male
        ex = 0.20 + 0.05 * p["eye_dx"]
        ey = fy - 0.09 + 0.04 * (p["eye_dy"] - 0.5)
        esz = 0.9 + 0.2 * p["eye_size"]
        ny = fy + 0.15 + 0.06 * p["nose_len"]
        nw = 0.85 + 0.3 * p["nose_w"]
        my = fy + 0.375 + 0.04 * (p["mouth_dy"] - 0.5)
        mw = 0.17 + 0.04 * p["mouth_w"]
        lipk = (0.8 + 0.4 * p["lip"]) * (1 - 0.15 * male)
        by = ey - 0.125 - 0.02 * p["brow_raise"]

        # --- colours
        t = p["skin"] ** 1.4
        skin = _mix(D.rgb(0.97, 0.82, 0.71), D.rgb(0.40, 0.26, 0.18), t)
        skin = skin + (p["skin_hue"] - 0.5).view(-1, 1, 1, 1) * D.rgb(0.06, 0.0, -0.05)
        grey = skin.mean(1, keepdim=True) * D.rgb(1.02, 1.0, 0.96)
        skin = skin + bc(old) * (0.45 * (grey - skin) - 0.06 * skin)
        other = _mix(D.rgb(0.50, 0.22, 0.10), D.rgb(0.24, 0.15, 0.09), p["other_hair"])
        hair = other
        for name, col in (("Brown_Hair", D.rgb(0.42, 0.26, 0.14)), ("Black_Hair", D.rgb(0.09, 0.075, 0.07)),
                          ("Blond_Hair", D.rgb(0.88, 0.74, 0.44)), ("Gray_Hair", D.rgb(0.74, 0.74, 0.76))):
            hair = torch.where(bc(lab[name]) > 0.5, col.expand(B, 3, 1, 1), hair)
        hair = hair * bc(0.9 + 0.2 * p["hair_tone"])
        hair = hair + bc(old * (1 - lab["Gray_Hair"])) * 0.4 * (D.rgb(0.66, 0.66, 0.68) - hair)
        brow = hair * 0.75 * (1 - 0.25 * bc(lab["Blond_Hair"] + lab["Gray_Hair"]).clamp(max=1)) + 0.02
        lips = skin + 0.55 * (D.rgb(0.55, 0.20, 0.22) - skin)
        lips = torch.where(bc(lab["Wearing_Lipstick"]) > 0.5, D.rgb(0.72, 0.10, 0.16).expand(B, 3, 1, 1), lips)
        iris_choices = torch.cat([D.rgb(0.36, 0.21, 0.10), D.rgb(0.16, 0.10, 0.07), D.rgb(0.30, 0.46, 0.66),
                                  D.rgb(0.36, 0.46, 0.30)], 0)
        iris = iris_choices[(p["iris"] * 3.999).long().clamp(0, 3)]
        bg = _hsv(p["bg_h"], 0.1 + 0.5 * p["bg_s"], 0.25 + 0.7 * p["bg_v"])
        cloth = _hsv(p["cloth_h"], 0.15 + 0.6 * p["cloth_s"], 0.15 + 0.7 * p["cloth_v"])
        is_long = torch.where(male > 0.5, (p["hair_len"] > 0.92).float(), (p["hair_len"] > 0.2).float())
        vol = 0.9 + 0.25 * p["hair_vol"]
        phase = p["hair_phase"] * 6.28

        lx = (p["light_x"] - 0.5) * 1.2
        ly = (p["light_y"] - 0.7) * 0.8
        amb = bc(0.5 + 0.3 * p["ambient"])
        lnorm = torch.sqrt(lx ** 2 + ly ** 2 + 1)

        def shade(w: D.Window) -> Tensor:
            """Lambert shading of an ellipsoid around the head (light from (lx, ly, 1))."""
            nx, nyy = w.X / 0.75, (w.Y - FACE_CY) / 0.9
            nz = (1 - nx ** 2 - nyy ** 2).clamp(min=0.02).sqrt()
            lam = ((nx * bc(lx) + nyy * bc(ly) + nz) / bc(lnorm)).clamp(0, 1)
            return amb + (1 - amb) * lam

        def hair_tex(w: D.Window, rows: Tensor | None = None) -> Tensor:
            h, ph = (hair, phase) if rows is None else (hair[rows], phase[rows])
            return h * (1 + 0.10 * torch.sin(55 * w.X + 8 * w.Y + bc(ph)))

        # --- background
        w = c.full()
        ang = p["bg_ang"] * 6.28
        grad = 1 + bc(0.35 * p["bg_grad"]) * (torch.cos(bc(ang)) * w.X + torch.sin(bc(ang)) * w.Y)
        c.img.copy_((bg * grad).expand(B, 3, c.S, c.S))

        # --- long hair behind the head (drawn for the long-haired rows only)
        long_rows = torch.nonzero(is_long > 0)[:, 0]
        end = (0.45 + 0.45 * p["hair_len"])[long_rows]
        long_box = dict(cx=0.0, cy=bc((end - 0.7) / 2), hx=bc(0.64 * vol[long_rows]), hy=bc((end + 0.7) / 2), r=0.25)
        if len(long_rows):
            w = c.window(-0.95, 0.95, -0.72, 1.0)
            d = D.sd_box(w.X, w.Y, **long_box)
            d = torch.maximum(d, -D.sd_box(w.X, w.Y, 0.0, 1.0, 0.23, 0.58, 0.05))
            w.paint(c.cover(d), hair_tex(w, long_rows) * 0.85, long_rows)

        # --- neck and shoulders
        w = c.window(-0.35, 0.35, 0.3, 1.0)
        d = D.sd_box(w.X, w.Y, 0.0, 0.85, bc(0.17 + 0.03 * male), 0.45, 0.04)
        w.paint(c.cover(d), skin * 0.82)
        w = c.window(-1.0, 1.0, 0.6, 1.0)
        d = D.sd_ellipse(w.X, w.Y, 0.0, 1.40, bc(0.92 + 0.08 * male), 0.62)
        w.paint(c.cover(d), cloth)
        if len(long_rows):
            w = c.window(-0.95, 0.95, 0.6, 1.0)
            d = D.sd_box(w.X, w.Y, **long_box)
            side = D.sd_box(w.X, w.Y, 0.0, 1.0, 0.36, 0.58, 0.05)
            w.paint(c.cover(torch.maximum(d, -side)), hair_tex(w, long_rows) * 0.9, long_rows)

        # --- ears
        w = c.window(-0.75, 0.75, -0.3, 0.35)
        ear_r = 0.065 + 0.02 * p["ear"]
        for s in (-1.0, 1.0):
            d = D.sd_ellipse(w.X, w.Y, bc(s * (frx - 0.01)), bc(ey + 0.09), bc(ear_r), bc(ear_r * 1.7))
            w.paint(c.cover(d), skin * 0.9)

        # --- face
        w = c.window(-0.7, 0.7, -0.8, 0.85)
        below = ((w.Y - bc(fy)) / bc(fry)).clamp(0, 1)
        rx_eff = bc(frx) * (1 - bc(jaw) * below ** 2)
        d_face = D.sd_ellipse(w.X, w.Y, bc(fx), bc(fy), rx_eff, bc(fry).expand_as(rx_eff))
        face_a = c.cover(d_face)
        w.paint(face_a, skin * shade(w))

        # --- cheeks: smile apples, makeup blush
        w = c.window(-0.47, 0.47, 0.12, 0.5)
        for s in (-1.0, 1.0):
            d = D.sd_ellipse(w.X, w.Y, bc(s * (0.24 + 0.02 * p["face_w"])), bc(my - 0.13), 0.115, 0.08)
            w.paint(D.soft(d, 0.07) * bc(0.8 * smile), skin * 1.15 + D.rgb(0.08, -0.02, -0.02))
            d = D.sd_ellipse(w.X, w.Y, bc(s * 0.29), bc(my - 0.10), 0.09, 0.06)
            w.paint(D.soft(d, 0.06) * bc(0.35 * lab["Heavy_Makeup"]), D.rgb(0.90, 0.45, 0.50).expand(B, 3, 1, 1))

        # --- age: forehead lines, eye bags, nasolabial folds
        if bool((old > 0).any()):
            w = c.window(-0.35, 0.35, -0.55, -0.2)
            for k in range(3):
                yk = bc(ey - 0.23 - 0.06 * k) + 0.06 * w.X ** 2
                d = (w.Y - yk).abs() - 0.013
                d = torch.maximum(d, w.X.abs() - 0.22 + 0.03 * k)
                w.scale(bc(torch.full((B,), 0.62)), c.cover(d) * bc(old))
            w = c.window(-0.36, 0.36, -0.1, 0.1)
            for s in (-1.0, 1.0):
                d = D.sd_ellipse(w.X, w.Y, bc(s * ex), bc(ey + 0.045), bc(0.085 * esz), 0.045)
                ring = torch.maximum(d.abs() - 0.017, bc(ey + 0.05) - w.Y)
                w.scale(bc(torch.full((B,), 0.58)), c.cover(ring) * bc(old))
            w = c.window(-0.3, 0.3, 0.1, 0.5)
            for s in (-1.0, 1.0):
                d = D.sd_segment(w.X, w.Y, bc(s * 0.085 * nw), bc(ny + 0.0), bc(s * (mw + 0.045)), bc(my + 0.045))
                w.scale(bc(torch.full((B,), 0.6)), c.cover(d - 0.014) * bc(old))

        # --- beard / moustache
        if bool((lab["No_Beard"] < 0.5).any()):
            w = c.window(-0.6, 0.6, 0.05, 0.85)
            below_f = ((w.Y - bc(fy)) / bc(fry)).clamp(0, 1)
            d_f = D.sd_ellipse(w.X, w.Y, bc(fx), bc(fy), bc(frx) * (1 - bc(jaw) * below_f ** 2),
                               bc(fry).expand(B, 1, w.Y.shape[2], w.X.shape[3]))
            full = torch.maximum(d_f, -D.sd_ellipse(w.X, w.Y, 0.0, bc(my - 0.22), 0.40, 0.20))
            goatee = D.sd_ellipse(w.X, w.Y, 0.0, bc(my + 0.15), 0.13, 0.12)
            d = torch.where(bc(p["beard_style"]) > 0.35, full, goatee)
            d = torch.minimum(d, D.sd_ellipse(w.X, w.Y, 0.0, bc(my - 0.045), bc(mw * 1.1), 0.032))
            tex = 0.85 + 0.15 * torch.sin(90 * w.X) * torch.sin(90 * w.Y)
            w.paint(c.cover(d) * bc(0.88 * (1 - lab["No_Beard"])), hair * 0.8 * tex)

        # --- nose
        w = c.window(-0.2, 0.2, -0.1, 0.35)
        side = torch.where(lx > 0, -1.0, 1.0)
        d = D.sd_segment(w.X, w.Y, bc(side * 0.05), bc(ey + 0.05), bc(side * 0.055 * nw), bc(ny - 0.03)) - 0.016
        w.scale(bc(torch.full((B,), 0.86)), D.soft(d, 0.03))
        d = D.sd_ellipse(w.X, w.Y, 0.0, bc(ny - 0.005), bc(0.065 * nw), 0.035)
        w.scale(bc(torch.full((B,), 0.88)), D.soft(d, 0.04))
        for s in (-1.0, 1.0):
            d = D.sd_ellipse(w.X, w.Y, bc(s * 0.033 * nw), bc(ny + 0.012), 0.022, 0.013)
            w.scale(bc(torch.full((B,), 0.45)), c.cover(d))

        # --- mouth
        w = c.window(-0.42, 0.42, 0.18, 0.6)
        mw_e = mw * (1 + 0.35 * smile)
        xn = w.X / bc(mw_e)
        env = (1 - xn ** 2).clamp(min=0).sqrt()
        inside_x = 1 - xn.abs()
        bend = -(0.11 + 0.03 * p["smile_amt"]) * smile + (0.012 * p["mouth_curve"]) * (1 - smile)
        ctr = bc(my) + bc(bend) * xn ** 2
        g_teeth = smile * (0.026 + 0.010 * p["smile_amt"])      # a smile bares the upper teeth
        g_dark = mopen * (0.028 + 0.015 * p["open_amt"])        # an open mouth adds a dark gap below them
        gap = g_teeth + g_dark
        tu, tl = bc(0.026 * lipk), bc(0.034 * lipk)
        g_up, g_lo = bc(0.3 * gap), bc(0.7 * gap)
        d_lips = torch.maximum(torch.maximum(ctr - (tu + g_up) * env - w.Y, w.Y - ctr - (tl + g_lo) * env),
                               -inside_x * 0.2)
        w.paint(c.cover(d_lips), lips)
        d_open = torch.maximum(torch.maximum(ctr - g_up * env - w.Y, w.Y - ctr - g_lo * env), -inside_x * 0.2)
        w.paint(c.cover(d_open) * bc((gap > 0).float()), D.rgb(0.22, 0.07, 0.07).expand(B, 3, 1, 1))
        d_teeth = torch.maximum(torch.maximum(ctr - g_up * env - w.Y, w.Y - ctr + g_up * env - bc(g_teeth) * env),
                                -inside_x * 0.2 - 0.01)
        w.paint(c.cover(d_teeth) * bc(smile), D.rgb(0.95, 0.93, 0.88).expand(B, 3, 1, 1))
        d_line = torch.maximum((w.Y - ctr).abs() - 0.008, -inside_x * 0.2)
        w.scale(bc(torch.full((B,), 0.35)), c.cover(d_line) * bc((gap <= 0).float()))
        for s in (-1.0, 1.0):  # smile lines at the mouth corners
            d = D.sd_segment(w.X, w.Y, bc(s * (mw_e + 0.025)), bc(my + bend - 0.05), bc(s * (mw_e + 0.045)),
                             bc(my + bend + 0.03)) - 0.011
            w.scale(bc(torch.full((B,), 0.72)), c.cover(d) * bc(smile))

        # --- eyes: shadow, white, iris, pupil, lid
        w = c.window(-0.4, 0.4, -0.34, 0.05)
        eopen = (0.85 + 0.3 * p["eye_open"])
        for s in (-1.0, 1.0):
            cx = bc(s * ex)
            d = D.sd_ellipse(w.X, w.Y, cx, bc(ey - 0.035), bc(0.10 * esz), 0.05)
            w.paint(D.soft(d, 0.04) * bc(0.6 * lab["Heavy_Makeup"]), D.rgb(0.42, 0.28, 0.46).expand(B, 3, 1, 1))
            d_eye = D.sd_ellipse(w.X, w.Y, cx, bc(ey), bc(0.075 * esz), bc(0.040 * esz * eopen))
            w.paint(c.cover(d_eye), D.rgb(0.93, 0.92, 0.90).expand(B, 3, 1, 1))
            icx = cx + bc((p["gaze_x"] - 0.5) * 0.03)
            icy = bc(ey + (p["gaze_y"] - 0.5) * 0.015)
            d_iris = torch.maximum(D.sd_ellipse(w.X, w.Y, icx, icy, bc(0.036 * esz), bc(0.036 * esz)), d_eye)
            w.paint(c.cover(d_iris), iris)
            d_pupil = torch.maximum(D.sd_ellipse(w.X, w.Y, icx, icy, bc(0.016 * esz), bc(0.016 * esz)), d_eye)
            w.paint(c.cover(d_pupil), D.rgb(0.03, 0.03, 0.03).expand(B, 3, 1, 1))
            lid = torch.maximum(d_eye.abs() - bc(0.008 + 0.008 * lab["Heavy_Makeup"]), w.Y - bc(ey))
            w.paint(c.cover(lid), D.rgb(0.12, 0.08, 0.07).expand(B, 3, 1, 1))

        # --- brows
        thick = 0.018 + 0.010 * p["brow_thick"] + 0.010 * male
        tilt = (p["brow_tilt"] - 0.5) * 0.04
        for s in (-1.0, 1.0):
            px = torch.stack([s * (ex - 0.085), s * ex, s * (ex + 0.095)], 1)
            py = torch.stack([by + 0.01 + tilt, by - 0.018, by + 0.012 - tilt], 1)
            d = D.sd_polyline(w.X, w.Y, px, py) - bc(thick)
            w.paint(c.cover(d), brow)

        # --- hair on top (+ bangs)
        w = c.window(-0.85, 0.85, -1.0, 0.3)
        hcx = (p["hair_part"] - 0.5) * 0.06
        d_hair = D.sd_ellipse(w.X, w.Y, 0.0, bc(fy - 0.07), bc(frx + 0.05 + 0.06 * vol), bc(fry + 0.07 * vol))
        bottom = torch.where(bc(is_long) > 0.5, torch.full_like(w.Y, -1.0), w.Y - 0.08)
        d_hair = torch.maximum(d_hair, bottom)
        d_open_face = D.sd_ellipse(w.X, w.Y, bc(hcx), bc(fy + 0.14), bc(frx * 0.93), bc(fry))
        fringe_y = bc(by - 0.03) + 0.018 * torch.sin(28 * w.X + bc(phase))
        d_uncov = torch.where(bc(lab["Bangs"]) > 0.5, torch.maximum(d_open_face, fringe_y - w.Y), d_open_face)
        w.paint(c.cover(torch.maximum(d_hair, -d_uncov)), hair_tex(w) * shade(w))

        # --- eyeglasses
        if bool((lab["Eyeglasses"] > 0.5).any()):
            w = c.window(-0.6, 0.6, -0.25, 0.1)
            rect = bc(p["glasses_style"]) > 0.5
            frame = D.rgb(0.08, 0.07, 0.07).expand(B, 3, 1, 1)
            g = bc(lab["Eyeglasses"])
            for s in (-1.0, 1.0):
                cx = bc(s * ex)
                d_r = torch.where(rect, D.sd_box(w.X, w.Y, cx, bc(ey + 0.005), 0.115, 0.08, 0.03),
                                  D.sd_ellipse(w.X, w.Y, cx, bc(ey + 0.005), 0.11, 0.10))
                w.scale(bc(torch.full((B,), 0.85)), c.cover(d_r) * g)
                w.paint(c.cover(d_r.abs() - 0.014) * g, frame)
                d_arm = D.sd_segment(w.X, w.Y, cx + s * 0.11, bc(ey - 0.02), bc(s * frx), bc(ey - 0.01)) - 0.010
                w.paint(c.cover(d_arm) * g, frame)
            d_br = D.sd_segment(w.X, w.Y, bc(-ex + 0.11), bc(ey - 0.015), bc(ex - 0.11), bc(ey - 0.015)) - 0.010
            w.paint(c.cover(d_br) * g, frame)

        # --- exposure, colour temperature
        gain = bc(0.85 + 0.25 * p["bright"]) * (1 + bc(p["warm"] - 0.5) * D.rgb(0.08, 0.0, -0.08))
        c.img.mul_(gain)
        return c.finish(self.pose(p)).clamp_(0, 1)
