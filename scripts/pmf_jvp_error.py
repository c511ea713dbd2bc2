"""How far the finite-difference du/dt (``jvp: fd``, eps 1e-3) is from the exact JVP (``jvp: exact``) on a
trained pmf: the relative error of the MeanFlow target ``v - (t - r) du/dt`` and of ``(t - r) du/dt`` itself,
over the recipe's (t, r) draws on training images (docs/networks.md "The pmf recipe ablation", the exact-JVP arm).

    python scripts/pmf_jvp_error.py networks/ref1/synthfaces/pmf runs/pmf-ablation/ref1/data/synthfaces/train.npz

An error far below the target's own noise (the sampled v = eps - x) leaves nothing for the exact JVP to change
in training: the two recipes then differ by rounding, not by their objective."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import numpy as np
import torch

from vcebench.models.generative.meanflow import du_dt, sample_tr
from vcebench.models.generative.pmf import PixelMeanFlow
from vcebench.models.generative.settings import PMF_DEFAULTS
from vcebench.models.generative.unet import use_explicit_groupnorm
from vcebench.models.training.loops import to_float_images


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pmf", help="a pmf folder (model.safetensors + config.json)")
    ap.add_argument("train_npz", help="the dataset's rendered train split (images: N x C x H x W uint8)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    fd = PixelMeanFlow.load(args.pmf).eval()
    exact = copy.deepcopy(fd)
    use_explicit_groupnorm(exact.net)
    recipe = {**PMF_DEFAULTS, **json.loads(Path(args.pmf, "card.json").read_text())["recipe"]["settings"]} \
        if Path(args.pmf, "card.json").is_file() else dict(PMF_DEFAULTS)
    with np.load(args.train_npz) as f:
        images = to_float_images(torch.from_numpy(f["images"]), args.train_npz)
    g = torch.Generator().manual_seed(args.seed)
    err_target, err_term = [], []
    for _ in range(args.batches):
        x = images[torch.randint(0, images.shape[0], (args.batch,), generator=g)]
        t, r = sample_tr(args.batch, g, recipe, flow_matching_only=False)
        eps = torch.randn(x.shape, generator=g)
        tt = t.reshape(-1, 1, 1, 1)
        z, v, h = (1 - tt) * x + tt * eps, eps - x, t - r
        keep = h > 0
        if not keep.any():
            continue
        z, v, t, h = z[keep], v[keep], t[keep], h[keep]
        with torch.no_grad():
            x_u = fd.x_pred(z, t, h)
        hh = h.reshape(-1, 1, 1, 1)
        d_fd = hh * du_dt(fd, z, t, h, v, x_u, "fd", float(recipe["fd_eps"]))
        d_ex = hh * du_dt(exact, z, t, h, v, x_u, "exact")
        norm = lambda a: a.flatten(1).norm(dim=1)  # noqa: E731
        err_term.append(norm(d_fd - d_ex) / norm(d_ex).clamp_min(1e-12))
        err_target.append(norm(d_fd - d_ex) / norm(v - d_ex))
    term, target = torch.cat(err_term), torch.cat(err_target)
    q = lambda a: {k: float(a.quantile(p)) for k, p in (("median", 0.5), ("p90", 0.9), ("max", 1.0))}  # noqa: E731
    print(json.dumps({"pmf": args.pmf, "rows": int(term.numel()), "fd_eps": float(recipe["fd_eps"]),
                      "relative_error_of_(t-r)du/dt": q(term), "relative_error_of_the_target": q(target)},
                      indent=1))


if __name__ == "__main__":
    main()
