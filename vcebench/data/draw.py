"""Batched 2-D drawing with signed distances on a supersampled canvas (torch, CPU).

Shapes are described in canonical coordinates (x right, y down, the image spans [-1, 1]).
A batch is drawn on one canvas of ``S = resolution * supersample`` pixels; each layer touches
only a fixed window (its bounding box over all parameter values), which keeps the cost down.
The posed image is produced by one affine ``grid_sample`` and box-filtered down to the output
resolution (supersampling anti-aliasing), so geometry does not depend on the resolution.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def supersample_factor(resolution: int) -> int:
    """Supersampling factor: 2x2 (each canvas pixel is also anti-aliased by ``cover``); 1 from 192 px."""
    return 1 if resolution >= 192 else 2


class Window:
    """Coordinates of a rectangular window of the canvas: ``X`` (1,1,1,w), ``Y`` (1,1,h,1)."""

    def __init__(self, canvas: Canvas, x0: float, x1: float, y0: float, y1: float):
        s, px = canvas.S, canvas.px
        i0 = max(0, int(math.floor((y0 + 1) / px)))
        i1 = min(s, int(math.ceil((y1 + 1) / px)))
        j0 = max(0, int(math.floor((x0 + 1) / px)))
        j1 = min(s, int(math.ceil((x1 + 1) / px)))
        self.sy, self.sx = slice(i0, i1), slice(j0, j1)
        self.Y = canvas.coords[i0:i1].view(1, 1, -1, 1)
        self.X = canvas.coords[j0:j1].view(1, 1, 1, -1)
        self.canvas = canvas

    def paint(self, alpha: Tensor, color: Tensor | float, rows: Tensor | None = None) -> None:
        """Alpha-composite ``color`` (B,C,1,1 or B,C,h,w) with coverage ``alpha`` (B,1,h,w) over the window;
        with ``rows`` (int64 indices) only those batch rows, ``alpha`` and ``color`` being given for them."""
        img = self.canvas.img
        view = img[:, :, self.sy, self.sx] if rows is None else img[rows, :, self.sy, self.sx]
        if not torch.is_tensor(color):
            color = torch.tensor(float(color))
        view.lerp_(color.expand_as(view), alpha.expand_as(view[:, :1]))
        if rows is not None:
            img[rows, :, self.sy, self.sx] = view

    def scale(self, factor: Tensor, alpha: Tensor) -> None:
        """Multiply the window by ``1 + alpha * (factor - 1)`` (shading, darkening)."""
        view = self.canvas.img[:, :, self.sy, self.sx]
        view.mul_(1 + alpha * (factor - 1))

    def get(self) -> Tensor:
        return self.canvas.img[:, :, self.sy, self.sx]


class Canvas:
    def __init__(self, batch: int, channels: int, resolution: int, supersample: int | None = None):
        self.res = resolution
        self.ss = supersample or supersample_factor(resolution)
        self.S = resolution * self.ss
        self.px = 2.0 / self.S
        self.coords = (torch.arange(self.S, dtype=torch.float32) + 0.5) * self.px - 1.0
        self.img = torch.zeros(batch, channels, self.S, self.S)

    def window(self, x0: float, x1: float, y0: float, y1: float) -> Window:
        return Window(self, x0, x1, y0, y1)

    def full(self) -> Window:
        return Window(self, -1.0, 1.0, -1.0, 1.0)

    def cover(self, d: Tensor) -> Tensor:
        """Coverage of a signed distance (negative inside), anti-aliased over one canvas pixel."""
        return (0.5 - d / self.px).clamp_(0.0, 1.0)

    def finish(self, theta: Tensor | None) -> Tensor:
        """Pose the canvas with per-sample affine ``theta`` (B,2,3; output->canvas coordinates, as in
        ``F.affine_grid``) and box-filter it to the output resolution."""
        img = self.img
        if theta is not None:
            grid = F.affine_grid(theta, list(img.shape), align_corners=False)
            img = F.grid_sample(img, grid, mode="bilinear", padding_mode="border", align_corners=False)
        if self.ss > 1:
            img = F.avg_pool2d(img, self.ss)
        return img


def pose_theta(tx: Tensor, ty: Tensor, angle: Tensor, scale: Tensor) -> Tensor:
    """Affine (B,2,3) mapping output coordinates to canonical ones for a face/body rotated by ``angle``
    (radians), scaled by ``scale`` and shifted by (tx, ty)."""
    c, s = torch.cos(angle) / scale, torch.sin(angle) / scale
    # canonical = R(-angle) (out - t) / scale
    row0 = torch.stack([c, s, -(c * tx + s * ty)], dim=-1)
    row1 = torch.stack([-s, c, -(-s * tx + c * ty)], dim=-1)
    return torch.stack([row0, row1], dim=1).float()


def bc(v: Tensor | float) -> Tensor:
    """A per-sample scalar (B,) as (B,1,1,1) for broadcasting over a window (floats pass through)."""
    return v.view(-1, 1, 1, 1) if torch.is_tensor(v) else torch.tensor(float(v))


def sd_ellipse(X: Tensor, Y: Tensor, cx: Tensor, cy: Tensor, rx: Tensor, ry: Tensor) -> Tensor:
    """Approximate signed distance to an axis-aligned ellipse (exact for circles)."""
    r = torch.sqrt(((X - cx) / rx) ** 2 + ((Y - cy) / ry) ** 2)
    return (r - 1.0) * torch.minimum(torch.as_tensor(rx), torch.as_tensor(ry))


def sd_box(X: Tensor, Y: Tensor, cx: Tensor, cy: Tensor, hx: Tensor, hy: Tensor, r: Tensor | float = 0.0) -> Tensor:
    """Signed distance to a rounded box with half sizes (hx, hy) and corner radius r."""
    qx = (X - cx).abs() - hx + r
    qy = (Y - cy).abs() - hy + r
    outside = torch.sqrt(qx.clamp(min=0) ** 2 + qy.clamp(min=0) ** 2)
    inside = torch.maximum(qx, qy).clamp(max=0)
    return outside + inside - r


def sd_segment(X: Tensor, Y: Tensor, ax: Tensor, ay: Tensor, bx: Tensor, by: Tensor) -> Tensor:
    """Distance to the segment a-b."""
    dx, dy = bx - ax, by - ay
    h = (((X - ax) * dx + (Y - ay) * dy) / (dx * dx + dy * dy + 1e-12)).clamp(0, 1)
    return torch.sqrt((X - ax - h * dx) ** 2 + (Y - ay - h * dy) ** 2)


def sd_polyline(X: Tensor, Y: Tensor, px: Tensor, py: Tensor) -> Tensor:
    """Distance to a polyline with vertices (B, K) ``px``, ``py``."""
    d = None
    for k in range(px.shape[1] - 1):
        dk = sd_segment(X, Y, bc(px[:, k]), bc(py[:, k]), bc(px[:, k + 1]), bc(py[:, k + 1]))
        d = dk if d is None else torch.minimum(d, dk)
    return d


def soft(d: Tensor, width: Tensor | float) -> Tensor:
    """A soft blob: 1 deep inside, falling smoothly to 0 at ``d = 0`` (``d`` < 0 inside)."""
    return (-d / width).clamp(0, 1) ** 2 * (3 - 2 * (-d / width).clamp(0, 1))


def smoothstep(e0: float | Tensor, e1: float | Tensor, x: Tensor) -> Tensor:
    t = ((x - e0) / (e1 - e0)).clamp(0, 1)
    return t * t * (3 - 2 * t)


def lerp(a: Tensor, b: Tensor, t: Tensor) -> Tensor:
    return a + (b - a) * t


def rgb(*v: float) -> Tensor:
    return torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1)
