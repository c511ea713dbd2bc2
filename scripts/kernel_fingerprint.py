"""Which CPU kernels round differently on this machine: a hash of each kind of operation the benchmark runs.

    python scripts/kernel_fingerprint.py --out docs/kernels/<kind>.json           # under the default pin (avx2)
    python scripts/kernel_fingerprint.py --compare docs/kernels/authenticamd-amd-epyc.json
    python scripts/kernel_fingerprint.py --fingerprint a.json --compare b.json     # two saved files, no probe run

The same commit gives other tables on another kind of CPU (docs/internals.md, "Identical numbers on every
machine"); this says which library does it. Each probe runs one operation on fixed inputs (2 threads, the
kernel pin of `cpu_isa`, set before torch starts) and hashes its output bytes: convolutions forward and
backward (oneDNN, then ATen's im2col + MKL with oneDNN off), matrix products (MKL), ATen's element-wise
and reduction kernels, normalisation, attention, and the shipped networks of `networks/ref1` end to end (a
forward pass and the input gradient a guided method takes). `--compare` prints the probes whose hash differs
from another machine's file: a probe of one library differing alone names the library to pin or route around.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vcebench.config.kernels import cpu_kind, isa_from_config_files, pin_environment  # noqa: E402  (no torch)


def _digest(t) -> str:
    return hashlib.sha256(t.detach().contiguous().float().numpy().tobytes()).hexdigest()[:16]


def probes(networks: Path) -> dict[str, str]:
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g)

    out: dict[str, str] = {}
    x, w, b = rand(8, 32, 32, 32), rand(64, 32, 3, 3) * 0.1, rand(64)

    def conv_fwd_bwd(tag: str) -> None:
        xi, wi = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        y = F.conv2d(xi, wi, b, padding=1)
        out[f"conv2d_fwd[{tag}]"] = _digest(y)
        y.backward(torch.ones_like(y) * 0.01 + y.detach() * 1e-3)
        out[f"conv2d_bwd_input[{tag}]"] = _digest(xi.grad)
        out[f"conv2d_bwd_weight[{tag}]"] = _digest(wi.grad)
        xc = x.contiguous(memory_format=torch.channels_last)
        out[f"conv2d_fwd_channels_last[{tag}]"] = _digest(F.conv2d(xc, w, b, padding=1))

    conv_fwd_bwd("onednn" if torch.backends.mkldnn.is_available() else "aten")
    with warnings.catch_warnings():  # mkldnn.flags() warns about an Intel-GPU setting it also restores
        warnings.simplefilter("ignore", UserWarning)
        with torch.backends.mkldnn.flags(enabled=False), torch.backends.nnpack.flags(enabled=False):
            conv_fwd_bwd("aten_im2col")
    a, m = rand(256, 512), rand(512, 384)
    out["matmul_256x512x384"] = _digest(a @ m)
    out["linear_fwd"] = _digest(F.linear(a, m.t(), rand(384)))
    out["bmm"] = _digest(torch.bmm(rand(16, 64, 32), rand(16, 32, 64)))
    v = rand(4096, 256)
    for name, fn in (("exp", torch.exp), ("log", lambda t: torch.log(t.abs() + 1e-3)), ("tanh", torch.tanh),
                     ("sigmoid", torch.sigmoid), ("erf", torch.erf), ("gelu", F.gelu), ("silu", F.silu),
                     ("softplus", F.softplus), ("pow_1.5", lambda t: t.abs() ** 1.5),
                     ("sqrt", lambda t: t.abs().sqrt()),
                     ("sin_cos", lambda t: torch.sin(t) + torch.cos(t))):
        out[f"unary_{name}"] = _digest(fn(v))
    out["sum_all"] = _digest(v.sum().reshape(1))
    out["mean_dim"] = _digest(v.mean(1))
    out["softmax"] = _digest(torch.softmax(v, dim=1))
    out["logsumexp"] = _digest(torch.logsumexp(v, dim=1))
    out["group_norm"] = _digest(F.group_norm(x, 8, rand(32), rand(32)))
    out["layer_norm"] = _digest(F.layer_norm(v, (256,)))
    out["batch_norm_eval"] = _digest(F.batch_norm(x, rand(32), rand(32).abs() + 0.5, training=False))
    q, k, vv = rand(4, 4, 64, 32), rand(4, 4, 64, 32), rand(4, 4, 64, 32)
    out["sdpa"] = _digest(F.scaled_dot_product_attention(q, k, vv))
    out["upsample_nearest"] = _digest(F.interpolate(x, scale_factor=2, mode="nearest"))
    out["upsample_bilinear"] = _digest(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
    out["avg_pool"] = _digest(F.avg_pool2d(x, 2))
    out["randn_generator"] = _digest(rand(1000))
    out.update(network_probes(networks))
    return out


def network_probes(networks: Path) -> dict[str, str]:
    """The shipped classifier and DDPM UNet of synthfaces: a forward pass and the input gradient."""
    import torch

    from vcebench.models.generative.ddpm import DiffusersDDPM
    from vcebench.models.synthetic.load import load_trained_net

    out: dict[str, str] = {}
    root = networks / "synthfaces"
    if not root.is_dir():
        return out
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(8, 3, 32, 32, generator=g) * 2 - 1)
    clf, _ = load_trained_net("classifier", root / "classifier")
    xi = x.clone().requires_grad_(True)
    logits = clf(xi)
    out["net_classifier_fwd"] = _digest(logits)
    logits[:, 0].sum().backward()
    out["net_classifier_input_grad"] = _digest(xi.grad)
    ddpm = DiffusersDDPM.from_pretrained_dir(root / "ddpm")
    t = torch.full((8,), 300, dtype=torch.long)
    zi = x.clone().requires_grad_(True)
    eps = ddpm.unet(zi, t).sample
    out["net_ddpm_unet_fwd"] = _digest(eps)
    eps.square().mean().backward()
    out["net_ddpm_unet_input_grad"] = _digest(zi.grad)
    return out


def fingerprint(isa: str, networks: Path) -> dict:
    """This machine's fingerprint under the kernel pin ``isa`` (set here, before torch starts)."""
    pin_environment(isa)
    import torch

    from vcebench.config.kernels import record

    torch.set_num_threads(2)
    return {"cpu": cpu_kind(), "kernels": record(), "torch": torch.__version__, "threads": 2,
            "probes": probes(networks)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the fingerprint here (JSON)")
    ap.add_argument("--compare", type=Path, action="append", default=[],
                    help="another machine's fingerprint file: print the probes that differ")
    ap.add_argument("--config", action="append", help="config files whose `cpu_isa` applies (default config.yaml)")
    ap.add_argument("--fingerprint", type=Path, default=None,
                    help="compare this saved fingerprint (another run's --out) instead of probing this machine")
    ap.add_argument("--networks", type=Path, default=ROOT / "networks" / "ref1",
                    help="the shipped set whose synthfaces classifier and DDPM are probed (default networks/ref1)")
    args = ap.parse_args()
    if args.fingerprint is not None:
        result = json.loads(args.fingerprint.read_text())
        isa = result["kernels"].get("cpu_isa")
    else:
        isa = isa_from_config_files(args.config)
        result = fingerprint(isa, args.networks)
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    else:
        print(text)
    status = 0
    for other_file in args.compare:
        other = json.loads(other_file.read_text())
        mine, theirs = result["probes"], other["probes"]
        differ = sorted(k for k in mine.keys() & theirs.keys() if mine[k] != theirs[k])
        print(f"{other_file} ({other['cpu']}, {other['kernels'].get('cpu_isa')}, torch {other['torch']}) vs "
              f"{args.fingerprint or 'this CPU'} "
              f"({result['cpu']}, {isa}, torch {result['torch']}): "
              f"{len(differ)} of {len(mine.keys() & theirs.keys())} probes differ" + (": " if differ else ""))
        if other["torch"] != result["torch"]:
            print("  (another torch build: its kernels may differ on any CPU, not only by the CPU)")
        for k in differ:
            print(f"  {k}")
        status = status or int(bool(differ))
    return status


if __name__ == "__main__":
    sys.exit(main())
