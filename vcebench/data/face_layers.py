"""The ``synthfaces`` renderer: a face's layout (:class:`FaceLayout`) and one function per layer.

:func:`draw_faces` paints the layers back to front on one supersampled canvas (background, long
hair, neck and shoulders, ears, face, cheeks, age marks, beard, nose, mouth, eyes, brows, hair on
top, glasses), then applies exposure and colour temperature and poses the canvas. Every layer reads
the per-sample geometry, colours and light of :class:`FaceLayout`; none draws random numbers.
"""

from __future__ import annotations

import torch

from . import draw as D

Tensor = torch.Tensor

FACE_CY = 0.02  # the face centre's y (canonical layout, y down)
SIDES = (-1.0, 1.0)
HAIR_COLOURS_RGB = (("Brown_Hair", (0.42, 0.26, 0.14)), ("Black_Hair", (0.09, 0.075, 0.07)),
                    ("Blond_Hair", (0.88, 0.74, 0.44)), ("Gray_Hair", (0.74, 0.74, 0.76)))


def _hsv(h: Tensor, s: Tensor, v: Tensor) -> Tensor:
    """(B,) hue/sat/value in [0, 1] -> (B,3,1,1) RGB."""
    h6 = h.view(-1) * 6
    base = torch.stack([torch.abs(h6 - 3) - 1, 2 - torch.abs(h6 - 2), 2 - torch.abs(h6 - 4)], dim=1).clamp(0, 1)
    out = v.view(-1, 1) * (1 - s.view(-1, 1) + s.view(-1, 1) * base)
    return out.view(-1, 3, 1, 1)


def _mix(a: Tensor, b: Tensor, t: Tensor) -> Tensor:
    """Per-sample blend of colours (B,3,1,1) with t (B,)."""
    return a + (b - a) * D.bc(t)


def _const(B: int, v: float) -> Tensor:
    """A per-sample factor ``v`` as (B,1,1,1)."""
    return D.bc(torch.full((B,), v))


def _solid(B: int, *v: float) -> Tensor:
    """An RGB colour for every sample (B,3,1,1)."""
    return D.rgb(*v).expand(B, 3, 1, 1)


class FaceLayout:
    """Per-sample geometry (canonical units), colours and light of one batch, shared by the layers."""

    def __init__(self, p: dict[str, Tensor], lab: dict[str, Tensor], canvas: D.Canvas):
        self.p, self.lab, self.c = p, lab, canvas
        self.B = len(p["skin"])
        self.male, self.smile = lab["Male"], lab["Smiling"]
        self.old = 1 - lab["Young"]
        self.mopen = lab["Mouth_Slightly_Open"]
        self._geometry()
        self._colours()
        self._light()

    def _geometry(self) -> None:
        p, B, male = self.p, self.B, self.male
        self.fx, self.fy = torch.zeros(B), torch.full((B,), FACE_CY)
        self.frx = 0.53 * (0.93 + 0.14 * p["face_w"]) * (1 + 0.05 * male)
        self.fry = 0.70 * (0.95 + 0.10 * p["face_h"])
        self.jaw = 0.10 + 0.22 * p["jaw"] - 0.08 * male
        self.ex = 0.20 + 0.05 * p["eye_dx"]
        self.ey = self.fy - 0.09 + 0.04 * (p["eye_dy"] - 0.5)
        self.esz = 0.9 + 0.2 * p["eye_size"]
        self.ny = self.fy + 0.15 + 0.06 * p["nose_len"]
        self.nw = 0.85 + 0.3 * p["nose_w"]
        self.my = self.fy + 0.375 + 0.04 * (p["mouth_dy"] - 0.5)
        self.mw = 0.17 + 0.04 * p["mouth_w"]
        self.lipk = (0.8 + 0.4 * p["lip"]) * (1 - 0.15 * male)
        self.by = self.ey - 0.125 - 0.02 * p["brow_raise"]

    def _colours(self) -> None:
        p, lab, B, bc = self.p, self.lab, self.B, D.bc
        t = p["skin"] ** 1.4
        skin = _mix(D.rgb(0.97, 0.82, 0.71), D.rgb(0.40, 0.26, 0.18), t)
        skin = skin + (p["skin_hue"] - 0.5).view(-1, 1, 1, 1) * D.rgb(0.06, 0.0, -0.05)
        grey = skin.mean(1, keepdim=True) * D.rgb(1.02, 1.0, 0.96)
        self.skin = skin + bc(self.old) * (0.45 * (grey - skin) - 0.06 * skin)
        hair = _mix(D.rgb(0.50, 0.22, 0.10), D.rgb(0.24, 0.15, 0.09), p["other_hair"])
        for name, col in HAIR_COLOURS_RGB:
            hair = torch.where(bc(lab[name]) > 0.5, _solid(B, *col), hair)
        hair = hair * bc(0.9 + 0.2 * p["hair_tone"])
        self.hair = hair + bc(self.old * (1 - lab["Gray_Hair"])) * 0.4 * (D.rgb(0.66, 0.66, 0.68) - hair)
        self.brow = self.hair * 0.75 * (1 - 0.25 * bc(lab["Blond_Hair"] + lab["Gray_Hair"]).clamp(max=1)) + 0.02
        lips = self.skin + 0.55 * (D.rgb(0.55, 0.20, 0.22) - self.skin)
        self.lips = torch.where(bc(lab["Wearing_Lipstick"]) > 0.5, _solid(B, 0.72, 0.10, 0.16), lips)
        iris_choices = torch.cat([D.rgb(0.36, 0.21, 0.10), D.rgb(0.16, 0.10, 0.07), D.rgb(0.30, 0.46, 0.66),
                                  D.rgb(0.36, 0.46, 0.30)], 0)
        self.iris = iris_choices[(p["iris"] * 3.999).long().clamp(0, 3)]
        self.bg = _hsv(p["bg_h"], 0.1 + 0.5 * p["bg_s"], 0.25 + 0.7 * p["bg_v"])
        self.cloth = _hsv(p["cloth_h"], 0.15 + 0.6 * p["cloth_s"], 0.15 + 0.7 * p["cloth_v"])
        self.is_long = torch.where(self.male > 0.5, (p["hair_len"] > 0.92).float(), (p["hair_len"] > 0.2).float())
        self.vol = 0.9 + 0.25 * p["hair_vol"]
        self.phase = p["hair_phase"] * 6.28

    def _light(self) -> None:
        p = self.p
        self.lx = (p["light_x"] - 0.5) * 1.2
        self.ly = (p["light_y"] - 0.7) * 0.8
        self.amb = D.bc(0.5 + 0.3 * p["ambient"])
        self.lnorm = torch.sqrt(self.lx ** 2 + self.ly ** 2 + 1)

    def shade(self, w: D.Window) -> Tensor:
        """Lambert shading of an ellipsoid around the head (light from (lx, ly, 1))."""
        bc = D.bc
        nx, nyy = w.X / 0.75, (w.Y - FACE_CY) / 0.9
        nz = (1 - nx ** 2 - nyy ** 2).clamp(min=0.02).sqrt()
        lam = ((nx * bc(self.lx) + nyy * bc(self.ly) + nz) / bc(self.lnorm)).clamp(0, 1)
        return self.amb + (1 - self.amb) * lam

    def hair_tex(self, w: D.Window, rows: Tensor | None = None) -> Tensor:
        h, ph = (self.hair, self.phase) if rows is None else (self.hair[rows], self.phase[rows])
        return h * (1 + 0.10 * torch.sin(55 * w.X + 8 * w.Y + D.bc(ph)))

    def long_hair(self) -> tuple[Tensor, dict]:
        """The long-haired rows and their hair's box (``sd_box`` keywords, for those rows)."""
        bc = D.bc
        rows = torch.nonzero(self.is_long > 0)[:, 0]
        end = (0.45 + 0.45 * self.p["hair_len"])[rows]
        box = dict(cx=0.0, cy=bc((end - 0.7) / 2), hx=bc(0.64 * self.vol[rows]), hy=bc((end + 0.7) / 2), r=0.25)
        return rows, box


def _background(f: FaceLayout) -> None:
    c, p, bc = f.c, f.p, D.bc
    w = c.full()
    ang = p["bg_ang"] * 6.28
    grad = 1 + bc(0.35 * p["bg_grad"]) * (torch.cos(bc(ang)) * w.X + torch.sin(bc(ang)) * w.Y)
    c.img.copy_((f.bg * grad).expand(f.B, 3, c.S, c.S))


def _long_hair_behind(f: FaceLayout, rows: Tensor, box: dict) -> None:
    """Long hair behind the head (drawn for the long-haired rows only)."""
    c = f.c
    if len(rows):
        w = c.window(-0.95, 0.95, -0.72, 1.0)
        d = D.sd_box(w.X, w.Y, **box)
        d = torch.maximum(d, -D.sd_box(w.X, w.Y, 0.0, 1.0, 0.23, 0.58, 0.05))
        w.paint(c.cover(d), f.hair_tex(w, rows) * 0.85, rows)


def _neck_and_shoulders(f: FaceLayout, rows: Tensor, box: dict) -> None:
    """Neck, clothed shoulders and the long hair falling over them."""
    c, bc = f.c, D.bc
    w = c.window(-0.35, 0.35, 0.3, 1.0)
    d = D.sd_box(w.X, w.Y, 0.0, 0.85, bc(0.17 + 0.03 * f.male), 0.45, 0.04)
    w.paint(c.cover(d), f.skin * 0.82)
    w = c.window(-1.0, 1.0, 0.6, 1.0)
    d = D.sd_ellipse(w.X, w.Y, 0.0, 1.40, bc(0.92 + 0.08 * f.male), 0.62)
    w.paint(c.cover(d), f.cloth)
    if len(rows):
        w = c.window(-0.95, 0.95, 0.6, 1.0)
        d = D.sd_box(w.X, w.Y, **box)
        side = D.sd_box(w.X, w.Y, 0.0, 1.0, 0.36, 0.58, 0.05)
        w.paint(c.cover(torch.maximum(d, -side)), f.hair_tex(w, rows) * 0.9, rows)


def _ears(f: FaceLayout) -> None:
    c, bc = f.c, D.bc
    w = c.window(-0.75, 0.75, -0.3, 0.35)
    ear_r = 0.065 + 0.02 * f.p["ear"]
    for s in SIDES:
        d = D.sd_ellipse(w.X, w.Y, bc(s * (f.frx - 0.01)), bc(f.ey + 0.09), bc(ear_r), bc(ear_r * 1.7))
        w.paint(c.cover(d), f.skin * 0.9)


def _face_sd(f: FaceLayout, w: D.Window) -> Tensor:
    """Signed distance of the face (an ellipse narrowing towards the jaw) over window ``w``."""
    bc = D.bc
    below = ((w.Y - bc(f.fy)) / bc(f.fry)).clamp(0, 1)
    rx_eff = bc(f.frx) * (1 - bc(f.jaw) * below ** 2)
    return D.sd_ellipse(w.X, w.Y, bc(f.fx), bc(f.fy), rx_eff, bc(f.fry).expand_as(rx_eff))


def _face(f: FaceLayout) -> None:
    w = f.c.window(-0.7, 0.7, -0.8, 0.85)
    w.paint(f.c.cover(_face_sd(f, w)), f.skin * f.shade(w))


def _cheeks(f: FaceLayout) -> None:
    """Smile apples and makeup blush."""
    c, p, bc = f.c, f.p, D.bc
    w = c.window(-0.47, 0.47, 0.12, 0.5)
    for s in SIDES:
        d = D.sd_ellipse(w.X, w.Y, bc(s * (0.24 + 0.02 * p["face_w"])), bc(f.my - 0.13), 0.115, 0.08)
        w.paint(D.soft(d, 0.07) * bc(0.8 * f.smile), f.skin * 1.15 + D.rgb(0.08, -0.02, -0.02))
        d = D.sd_ellipse(w.X, w.Y, bc(s * 0.29), bc(f.my - 0.10), 0.09, 0.06)
        w.paint(D.soft(d, 0.06) * bc(0.35 * f.lab["Heavy_Makeup"]), _solid(f.B, 0.90, 0.45, 0.50))


def _age(f: FaceLayout) -> None:
    """Forehead lines, eye bags and nasolabial folds (drawn when any row is old)."""
    c, B, old, bc = f.c, f.B, f.old, D.bc
    if not bool((old > 0).any()):
        return
    w = c.window(-0.35, 0.35, -0.55, -0.2)
    for k in range(3):
        yk = bc(f.ey - 0.23 - 0.06 * k) + 0.06 * w.X ** 2
        d = (w.Y - yk).abs() - 0.013
        d = torch.maximum(d, w.X.abs() - 0.22 + 0.03 * k)
        w.scale(_const(B, 0.62), c.cover(d) * bc(old))
    w = c.window(-0.36, 0.36, -0.1, 0.1)
    for s in SIDES:
        d = D.sd_ellipse(w.X, w.Y, bc(s * f.ex), bc(f.ey + 0.045), bc(0.085 * f.esz), 0.045)
        ring = torch.maximum(d.abs() - 0.017, bc(f.ey + 0.05) - w.Y)
        w.scale(_const(B, 0.58), c.cover(ring) * bc(old))
    w = c.window(-0.3, 0.3, 0.1, 0.5)
    for s in SIDES:
        d = D.sd_segment(w.X, w.Y, bc(s * 0.085 * f.nw), bc(f.ny + 0.0), bc(s * (f.mw + 0.045)), bc(f.my + 0.045))
        w.scale(_const(B, 0.6), c.cover(d - 0.014) * bc(old))


def _beard(f: FaceLayout) -> None:
    """Full beard or goatee, with a moustache, in the hair colour (drawn when any row has one)."""
    c, lab, bc = f.c, f.lab, D.bc
    if not bool((lab["No_Beard"] < 0.5).any()):
        return
    w = c.window(-0.6, 0.6, 0.05, 0.85)
    full = torch.maximum(_face_sd(f, w), -D.sd_ellipse(w.X, w.Y, 0.0, bc(f.my - 0.22), 0.40, 0.20))
    goatee = D.sd_ellipse(w.X, w.Y, 0.0, bc(f.my + 0.15), 0.13, 0.12)
    d = torch.where(bc(f.p["beard_style"]) > 0.35, full, goatee)
    d = torch.minimum(d, D.sd_ellipse(w.X, w.Y, 0.0, bc(f.my - 0.045), bc(f.mw * 1.1), 0.032))
    tex = 0.85 + 0.15 * torch.sin(90 * w.X) * torch.sin(90 * w.Y)
    w.paint(c.cover(d) * bc(0.88 * (1 - lab["No_Beard"])), f.hair * 0.8 * tex)


def _nose(f: FaceLayout) -> None:
    c, B, ny, nw, bc = f.c, f.B, f.ny, f.nw, D.bc
    w = c.window(-0.2, 0.2, -0.1, 0.35)
    side = torch.where(f.lx > 0, -1.0, 1.0)
    d = D.sd_segment(w.X, w.Y, bc(side * 0.05), bc(f.ey + 0.05), bc(side * 0.055 * nw), bc(ny - 0.03)) - 0.016
    w.scale(_const(B, 0.86), D.soft(d, 0.03))
    d = D.sd_ellipse(w.X, w.Y, 0.0, bc(ny - 0.005), bc(0.065 * nw), 0.035)
    w.scale(_const(B, 0.88), D.soft(d, 0.04))
    for s in SIDES:
        d = D.sd_ellipse(w.X, w.Y, bc(s * 0.033 * nw), bc(ny + 0.012), 0.022, 0.013)
        w.scale(_const(B, 0.45), c.cover(d))


def _mouth(f: FaceLayout) -> None:
    """Lips; the teeth a smile bares and the dark gap of an open mouth; the closed mouth's line; smile lines."""
    c, p, B, my, smile, bc = f.c, f.p, f.B, f.my, f.smile, D.bc
    w = c.window(-0.42, 0.42, 0.18, 0.6)
    mw_e = f.mw * (1 + 0.35 * smile)
    xn = w.X / bc(mw_e)
    env = (1 - xn ** 2).clamp(min=0).sqrt()
    inside_x = 1 - xn.abs()
    bend = -(0.11 + 0.03 * p["smile_amt"]) * smile + (0.012 * p["mouth_curve"]) * (1 - smile)
    ctr = bc(my) + bc(bend) * xn ** 2
    g_teeth = smile * (0.026 + 0.010 * p["smile_amt"])      # a smile bares the upper teeth
    g_dark = f.mopen * (0.028 + 0.015 * p["open_amt"])      # an open mouth adds a dark gap below them
    gap = g_teeth + g_dark
    tu, tl = bc(0.026 * f.lipk), bc(0.034 * f.lipk)
    g_up, g_lo = bc(0.3 * gap), bc(0.7 * gap)
    d_lips = torch.maximum(torch.maximum(ctr - (tu + g_up) * env - w.Y, w.Y - ctr - (tl + g_lo) * env),
                           -inside_x * 0.2)
    w.paint(c.cover(d_lips), f.lips)
    d_open = torch.maximum(torch.maximum(ctr - g_up * env - w.Y, w.Y - ctr - g_lo * env), -inside_x * 0.2)
    w.paint(c.cover(d_open) * bc((gap > 0).float()), _solid(B, 0.22, 0.07, 0.07))
    d_teeth = torch.maximum(torch.maximum(ctr - g_up * env - w.Y, w.Y - ctr + g_up * env - bc(g_teeth) * env),
                            -inside_x * 0.2 - 0.01)
    w.paint(c.cover(d_teeth) * bc(smile), _solid(B, 0.95, 0.93, 0.88))
    d_line = torch.maximum((w.Y - ctr).abs() - 0.008, -inside_x * 0.2)
    w.scale(_const(B, 0.35), c.cover(d_line) * bc((gap <= 0).float()))
    for s in SIDES:  # smile lines at the mouth corners
        d = D.sd_segment(w.X, w.Y, bc(s * (mw_e + 0.025)), bc(my + bend - 0.05), bc(s * (mw_e + 0.045)),
                         bc(my + bend + 0.03)) - 0.011
        w.scale(_const(B, 0.72), c.cover(d) * bc(smile))


EYES_WINDOW = (-0.4, 0.4, -0.34, 0.05)  # eyes and brows


def _eyes(f: FaceLayout) -> None:
    """Per eye: makeup shadow, white, iris, pupil, lid."""
    c, p, B, ey, esz, makeup, bc = f.c, f.p, f.B, f.ey, f.esz, f.lab["Heavy_Makeup"], D.bc
    w = c.window(*EYES_WINDOW)
    eopen = (0.85 + 0.3 * p["eye_open"])
    for s in SIDES:
        cx = bc(s * f.ex)
        d = D.sd_ellipse(w.X, w.Y, cx, bc(ey - 0.035), bc(0.10 * esz), 0.05)
        w.paint(D.soft(d, 0.04) * bc(0.6 * makeup), _solid(B, 0.42, 0.28, 0.46))
        d_eye = D.sd_ellipse(w.X, w.Y, cx, bc(ey), bc(0.075 * esz), bc(0.040 * esz * eopen))
        w.paint(c.cover(d_eye), _solid(B, 0.93, 0.92, 0.90))
        icx = cx + bc((p["gaze_x"] - 0.5) * 0.03)
        icy = bc(ey + (p["gaze_y"] - 0.5) * 0.015)
        d_iris = torch.maximum(D.sd_ellipse(w.X, w.Y, icx, icy, bc(0.036 * esz), bc(0.036 * esz)), d_eye)
        w.paint(c.cover(d_iris), f.iris)
        d_pupil = torch.maximum(D.sd_ellipse(w.X, w.Y, icx, icy, bc(0.016 * esz), bc(0.016 * esz)), d_eye)
        w.paint(c.cover(d_pupil), _solid(B, 0.03, 0.03, 0.03))
        lid = torch.maximum(d_eye.abs() - bc(0.008 + 0.008 * makeup), w.Y - bc(ey))
        w.paint(c.cover(lid), _solid(B, 0.12, 0.08, 0.07))


def _brows(f: FaceLayout) -> None:
    c, p, ex, by = f.c, f.p, f.ex, f.by
    w = c.window(*EYES_WINDOW)
    thick = 0.018 + 0.010 * p["brow_thick"] + 0.010 * f.male
    tilt = (p["brow_tilt"] - 0.5) * 0.04
    for s in SIDES:
        px = torch.stack([s * (ex - 0.085), s * ex, s * (ex + 0.095)], 1)
        py = torch.stack([by + 0.01 + tilt, by - 0.018, by + 0.012 - tilt], 1)
        d = D.sd_polyline(w.X, w.Y, px, py) - D.bc(thick)
        w.paint(c.cover(d), f.brow)


def _hair_on_top(f: FaceLayout) -> None:
    """The hair over the head, cut around the face (with a fringe for Bangs)."""
    c, p, fy, frx, bc = f.c, f.p, f.fy, f.frx, D.bc
    w = c.window(-0.85, 0.85, -1.0, 0.3)
    hcx = (p["hair_part"] - 0.5) * 0.06
    d_hair = D.sd_ellipse(w.X, w.Y, 0.0, bc(fy - 0.07), bc(frx + 0.05 + 0.06 * f.vol), bc(f.fry + 0.07 * f.vol))
    bottom = torch.where(bc(f.is_long) > 0.5, torch.full_like(w.Y, -1.0), w.Y - 0.08)
    d_hair = torch.maximum(d_hair, bottom)
    d_open_face = D.sd_ellipse(w.X, w.Y, bc(hcx), bc(fy + 0.14), bc(frx * 0.93), bc(f.fry))
    fringe_y = bc(f.by - 0.03) + 0.018 * torch.sin(28 * w.X + bc(f.phase))
    d_uncov = torch.where(bc(f.lab["Bangs"]) > 0.5, torch.maximum(d_open_face, fringe_y - w.Y), d_open_face)
    w.paint(c.cover(torch.maximum(d_hair, -d_uncov)), f.hair_tex(w) * f.shade(w))


def _glasses(f: FaceLayout) -> None:
    """Tinted lenses, round or rectangular frames, arms and bridge (drawn when any row wears them)."""
    c, B, ex, ey, bc = f.c, f.B, f.ex, f.ey, D.bc
    if not bool((f.lab["Eyeglasses"] > 0.5).any()):
        return
    w = c.window(-0.6, 0.6, -0.25, 0.1)
    rect = bc(f.p["glasses_style"]) > 0.5
    frame = _solid(B, 0.08, 0.07, 0.07)
    g = bc(f.lab["Eyeglasses"])
    for s in SIDES:
        cx = bc(s * ex)
        d_r = torch.where(rect, D.sd_box(w.X, w.Y, cx, bc(ey + 0.005), 0.115, 0.08, 0.03),
                          D.sd_ellipse(w.X, w.Y, cx, bc(ey + 0.005), 0.11, 0.10))
        w.scale(_const(B, 0.85), c.cover(d_r) * g)
        w.paint(c.cover(d_r.abs() - 0.014) * g, frame)
        d_arm = D.sd_segment(w.X, w.Y, cx + s * 0.11, bc(ey - 0.02), bc(s * f.frx), bc(ey - 0.01)) - 0.010
        w.paint(c.cover(d_arm) * g, frame)
    d_br = D.sd_segment(w.X, w.Y, bc(-ex + 0.11), bc(ey - 0.015), bc(ex - 0.11), bc(ey - 0.015)) - 0.010
    w.paint(c.cover(d_br) * g, frame)


def draw_faces(p: dict[str, Tensor], lab: dict[str, Tensor], resolution: int, theta: Tensor) -> Tensor:
    """Faces of parameters ``p`` and attributes ``lab`` (B,) each: float B x 3 x R x R in [0, 1], posed by
    ``theta`` (``draw.pose_theta``)."""
    c = D.Canvas(len(p["skin"]), 3, resolution)
    f = FaceLayout(p, lab, c)
    _background(f)
    rows, box = f.long_hair()
    _long_hair_behind(f, rows, box)
    _neck_and_shoulders(f, rows, box)
    for layer in (_ears, _face, _cheeks, _age, _beard, _nose, _mouth, _eyes, _brows, _hair_on_top, _glasses):
        layer(f)
    # exposure, colour temperature
    gain = D.bc(0.85 + 0.25 * p["bright"]) * (1 + D.bc(p["warm"] - 0.5) * D.rgb(0.08, 0.0, -0.08))
    c.img.mul_(gain)
    return c.finish(theta).clamp_(0, 1)
