"""Tiny fake copies of the real datasets in their on-disk formats (for loader and CLI tests).

``make_celeba(dir, n=12, fmt="txt"|"csv")``, ``make_celebahq(dir, celeba_dir, n=8)``,
``make_chexpert(dir, n_patients=10)``: each returns the root to put in ``datasets.<name>.root``.
Images are small random JPEGs (CelebA 178 x 218 aligned crops are scaled down to 18 x 22).
``write_generic`` / ``write_dime`` / ``write_peal`` / ``write_rcsb``: counterfactuals as the folders and files
`vcebench import` reads, in the layouts of those code bases.
"""

from __future__ import annotations

import csv
import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from vcebench.data.celeba import CELEBA_ATTRIBUTES


def _jpeg(path: Path, w: int, h: int, seed: int, mode: str = "RGB") -> None:
    rng = np.random.default_rng(seed)
    shape = (h, w, 3) if mode == "RGB" else (h, w)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(path, quality=90)


def celeba_labels(n: int, seed: int = 0) -> np.ndarray:
    return np.where(np.random.default_rng(seed).random((n, len(CELEBA_ATTRIBUTES))) < 0.5, -1, 1)


def make_celeba(root: str | Path, n: int = 12, fmt: str = "txt", kaggle_nested: bool = False,
                partitions: list[int] | None = None) -> Path:
    """A CelebA folder with ``n`` images 000001.jpg..; partitions cycle 0,0,1,2 unless given."""
    root = Path(root)
    img_dir = root / "img_align_celeba" / ("img_align_celeba" if kaggle_nested else "")
    files = [f"{i:06d}.jpg" for i in range(1, n + 1)]
    for i, f in enumerate(files):
        _jpeg(img_dir / f, 18, 22, i)
    lab = celeba_labels(n)
    part = partitions or [(0, 0, 1, 2)[i % 4] for i in range(n)]
    if fmt == "txt":
        rows = [f"{f} " + " ".join(f"{v:2d}" for v in lab[i]) for i, f in enumerate(files)]
        header = " ".join(CELEBA_ATTRIBUTES) + " "
        (root / "list_attr_celeba.txt").write_text(f"{n}\n{header}\n" + "\n".join(rows) + "\n")
        (root / "list_eval_partition.txt").write_text("".join(f"{f} {p}\n" for f, p in zip(files, part)))
    else:
        rows = [f"{f}," + ",".join(str(v) for v in lab[i]) for i, f in enumerate(files)]
        header = "image_id," + ",".join(CELEBA_ATTRIBUTES)
        (root / "list_attr_celeba.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
        (root / "list_eval_partition.csv").write_text("image_id,partition\n" +
                                                     "".join(f"{f},{p}\n" for f, p in zip(files, part)))
    return root


def make_celebahq(root: str | Path, celeba_root: str | Path, n: int = 8) -> Path:
    """A CelebAMask-HQ folder whose images map onto the first ``n`` images of ``celeba_root`` (reversed)."""
    root = Path(root)
    for i in range(n):
        _jpeg(root / "CelebA-HQ-img" / f"{i}.jpg", 24, 24, 100 + i)
    lab = celeba_labels(n, seed=1)
    rows = [f"{i}.jpg " + " ".join(str(v) for v in lab[i]) for i in range(n)]
    (root / "CelebAMask-HQ-attribute-anno.txt").write_text(f"{n}\n" + " ".join(CELEBA_ATTRIBUTES) + "\n"
                                                          + "\n".join(rows) + "\n")
    mapping = ["idx         orig_idx    orig_file"]
    mapping += [f"{i}  {n - 1 - i}  {n - i:06d}.jpg" for i in range(n)]
    (root / "CelebA-HQ-to-CelebA-mapping.txt").write_text("\n".join(mapping) + "\n")
    return root


def make_chexpert(parent: str | Path, n_patients: int = 10, small: bool = True) -> tuple[Path, Path]:
    """(CheXpert-v1.0-small folder, pacemaker CSV): each patient has a frontal and a lateral view in
    study1, and every third patient a second frontal study."""
    parent = Path(parent)
    name = "CheXpert-v1.0-small" if small else "CheXpert-v1.0"
    root = parent / name
    rows, pm = [], []
    for p in range(1, n_patients + 1):
        studies = [1, 2] if p % 3 == 0 else [1]
        for s in studies:
            for view, fl in ((1, "Frontal"), (2, "Lateral")):
                if fl == "Lateral" and s == 2:
                    continue
                rel = f"{name}/train/patient{p:05d}/study{s}/view{view}_{fl.lower()}.jpg"
                _jpeg(parent / rel, 20, 16, p * 10 + s * 3 + view, mode="L")
                rows.append(f"{rel},{'Male' if p % 2 else 'Female'},{50 + p},{fl},{'PA' if fl == 'Frontal' else ''},"
                            f"{1.0 if p % 4 == 0 else ''},{-1.0 if p % 5 == 0 else 0.0}")
                if fl == "Frontal":
                    pm.append(f"{rel},{int(p % 2 == 0)}")
    (root / "train.csv").write_text("Path,Sex,Age,Frontal/Lateral,AP/PA,Cardiomegaly,Pleural Effusion\n"
                                    + "\n".join(rows) + "\n")
    (root / "valid.csv").write_text("Path,Sex,Age,Frontal/Lateral,AP/PA,Cardiomegaly,Pleural Effusion\n")
    pm_csv = parent / "pacemaker.csv"
    pm_csv.write_text("Path,Pacemaker\n" + "\n".join(pm) + "\n")
    return root, pm_csv


# Tiny guided-diffusion flags for CPU tests (DiME's layout, reduced width / depth / resolution).
TINY_GUIDED_FLAGS = {"image_size": 32, "num_channels": 32, "num_res_blocks": 1, "channel_mult": "1,2",
                     "attention_resolutions": "16", "num_heads": 4, "diffusion_steps": 500}


# Tiny FastDiME_Med config.pickle (its three dataclasses as dicts; released: 64 ch x (1,2,4,4) at 224 px).
TINY_FASTDIME_CONFIG = {
    "BaseConfig": {"DEVICE": "cuda", "ds_name": "CHEXPERT_CardioPM", "DATASET": "CHEXPERT_CardioPM-train"},
    "ModelConfig": {"BASE_CH": 16, "BASE_CH_MULT": (1, 2), "APPLY_ATTENTION": (False, False),
                    "ATTENTION_TYPE": "ori_att", "DROPOUT_RATE": 0.1, "TIME_EMB_MULT": 4},
    "TrainingConfig": {"TIMESTEPS": 1000, "IMG_SHAPE": (1, 32, 32), "BATCH_SIZE": 16, "LR": 2e-4}}


def make_released_weights(out: str | Path, kind: str = "faces", seed: int = 0) -> dict[str, dict]:
    """Random-weight checkpoints in the released formats a real task loads; returns ``models.<dataset>``.

    faces (CelebA / CelebA-HQ): DiME DenseNet-121 classifier (40 outputs) and ACE oracle, the
    guided-diffusion DDPM (``TINY_GUIDED_FLAGS``), facenet VGGFace2, pytorch-fid Inception and VGG19.
    xray (CheXpert): 1-output DenseNet classifier / oracle, SimSiam instead of facenet, and FastDiME_Med's
    one-channel DDPM folder (``TINY_FASTDIME_CONFIG``). The pmf is not among them: FiRe ships none, it is
    trained by vcebench.
    """
    import torch

    from vcebench.models.released.canonical_nets import (
        ACEOracle,
        DiMEDenseNet,
        fid_inception,
        simsiam_encoder,
        vgg19_features,
    )
    from vcebench.models.released.fastdime_unet import FastDiMEUNet
    from vcebench.models.released.guided_unet import GuidedUNet

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    faces = kind == "faces"
    models: dict[str, dict] = {}

    def save(role: str, obj, name: str, **spec) -> None:
        torch.save(obj, out / name)
        models[role] = {"weights": str(out / name), **spec}

    n_out = 40 if faces else 1
    cls = DiMEDenseNet(n_out)
    ck = {"feat_extract": cls.feat_extract.state_dict(), "classifier": cls.classifier.state_dict()}
    save("classifier", ck, "classifier.pth", format="dime_densenet121", head="1logit", num_outputs=n_out,
         **({} if faces else {"attribute_names": ["Pacemaker"]}))
    if faces:
        oracle = ACEOracle()
        save("oracle", {"feat_extract": oracle.feat_extract.state_dict(), "classifier": oracle.classifier.state_dict()},
             "oracle.pth", format="ace_oracle_resnet50")
        from facenet_pytorch import InceptionResnetV1

        save("identity", InceptionResnetV1(pretrained=None, classify=True, num_classes=8631).state_dict(),
             "vggface2.pt", format="facenet_vggface2")
    else:
        orc = DiMEDenseNet(1)
        save("oracle", {"feat_extract": orc.feat_extract.state_dict(), "classifier": orc.classifier.state_dict()},
             "oracle.pth", format="dime_densenet121", attribute_names=["Pacemaker"])
        enc = simsiam_encoder(2048)
        save("simsiam", {"epoch": 100, "arch": "resnet50",
                         "state_dict": {f"module.encoder.{k}": v for k, v in enc.state_dict().items()}},
             "checkpoint_0099.pth.tar", format="simsiam_official")
    save("fid_features", fid_inception().state_dict(), "pt_inception-2015-12-05-6726825d.pth",
         format="pytorch_fid_inception")
    save("perceptual", {f"features.{k}": v for k, v in vgg19_features().state_dict().items()}, "vgg19.pth",
         format="vgg19_dime")
    if not faces:  # FastDiME_Med's CheXpert model folder: ckpt.tar + config.pickle
        unet = FastDiMEUNet.from_config(TINY_FASTDIME_CONFIG)
        (out / "fastdime_ddpm").mkdir(exist_ok=True)
        torch.save({"model": unet.state_dict(), "epoch": 1}, out / "fastdime_ddpm" / "ckpt.tar")
        with open(out / "fastdime_ddpm" / "config.pickle", "wb") as f:
            pickle.dump(TINY_FASTDIME_CONFIG, f)
        models["ddpm"] = {"weights": str(out / "fastdime_ddpm"), "format": "fastdime_chexpert"}
        return models
    unet = GuidedUNet(**TINY_GUIDED_FLAGS)
    for p in unet.parameters():  # the reference zero-initialises the output convs; give them weights
        p.data.normal_(0, 0.02)
    save("ddpm", unet.state_dict(), "ddpm.pt", format="guided_diffusion", **TINY_GUIDED_FLAGS)
    return models


def save_image(img: np.ndarray, path, fmt: str = "PNG") -> None:
    """A C x H x W uint8 array as an image file (grey for one channel)."""
    a = img[0] if img.shape[0] == 1 else np.transpose(img, (1, 2, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(a).save(path, format=fmt)


def write_generic(z, folder: Path, zero_pad: bool = False) -> None:
    """``vcebench import --layout generic``: ``<sample id>.png`` per counterfactual of ``z`` (a counterfactuals
    file's arrays)."""
    for sid, cf in zip(z["sample_id"], z["cf"]):
        save_image(cf, folder / (f"{int(sid):07d}.png" if zero_pad else f"{int(sid)}.png"))


def write_dime(z, label, folder: Path, mapping_csv: Path) -> None:
    """What DiME's / ACE's ImageSaver writes: {CC,IC}/{CCF,ICF}/{CF,Info}/<7-digit loader index>, with
    the loader's index (here: the reversed position) mapped to our sample ids by a CSV."""
    rows = []
    n = len(z["sample_id"])
    for pos in range(n):
        index = n - 1 - pos  # not the sample id: the mapping must be used
        pred, target = int(z["pred"][pos]), int(z["target"][pos])
        cf_pred = target if z["flipped"][pos] else pred
        group = ("CC" if label[pos] == pred else "IC") + "/" + ("CCF" if target == cf_pred else "ICF")
        name = f"{index}".zfill(7)
        save_image(z["cf"][pos], folder / group / "CF" / f"{name}.png")
        (folder / group / "Info").mkdir(parents=True, exist_ok=True)
        (folder / group / "Info" / f"{name}.txt").write_text(
            f"label: {label[pos]}\npred: {pred}\ntarget: {target}\ncf pred: {cf_pred}\nBKL: 0.1\nl_1: 0.01")
        (folder / group / "Noise").mkdir(exist_ok=True)
        rows.append({"file": f"{name}.png", "sample_id": int(z["sample_id"][pos])})
    _mapping(mapping_csv, rows)


def _mapping(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["file", "sample_id"])
        w.writeheader()
        w.writerows(rows)


def write_peal(z, x, label, npz: Path, mapping_csv: Path, batch: int = 2, attempts: int = 1) -> None:
    """What PEAL's CFKD adaptor writes (vcebench/steps/import_peal.py): ``np.savez`` of its tracked keys, float32
    images in [0, 1], int64 classes, float32 confidences; rows batch by batch in the loader's order (here the
    reversed order of ``z``) and, with several attempts, attempt after attempt within a batch (earlier attempts:
    the input unchanged). The mapping CSV (``file``: the row number) sends the last attempt's rows to their sample
    ids and leaves the others out (empty ``sample_id``). ``x``: the inputs, uint8 like ``z["cf"]``."""
    n = len(z["sample_id"])
    assert n % batch == 0  # PEAL explains full batches only
    loader = list(range(n))[::-1]
    rows, last = [], []
    for b in range(0, n, batch):
        for a in range(attempts):
            rows += loader[b:b + batch]
            last += [a == attempts - 1] * batch
    rows, last = np.array(rows), np.array(last)
    xs = x[rows].astype(np.float32) / 255
    cf = np.where(last[:, None, None, None], z["cf"][rows].astype(np.float32) / 255, xs)
    flipped = z["flipped"][rows] & last
    tracked = {"x_counterfactual_list": cf, "y_source_list": z["pred"][rows].astype(np.int64),
               "y_target_list": z["target"][rows].astype(np.int64),
               "y_target_end_confidence_list": np.where(flipped, 0.9, 0.2).astype(np.float32), "x_list": xs,
               "y_list": np.asarray(label)[rows].astype(np.int64), "x_attribution_list": np.abs(cf - xs),
               "y_target_start_confidence_list": np.full(len(rows), 0.2, np.float32),
               "cluster_list": np.zeros(len(rows), np.int64)}
    npz.parent.mkdir(parents=True, exist_ok=True)
    with open(npz, "wb") as f:
        np.savez(f, **tracked)
    (npz.parent / "validation_prestats.npz").write_bytes(b"")  # written beside it; not read
    _mapping(mapping_csv, [{"file": r, "sample_id": int(z["sample_id"][pos]) if keep else ""}
                           for r, (pos, keep) in enumerate(zip(rows, last))])


def wandb_png(img: np.ndarray) -> bytes:
    """The PNG wandb 0.15.4 writes for ``wandb.Image(t)``, ``t`` the [0, 1] float tensor of a uint8 C x H x W image
    (its data_types/image.py 285-307: torchvision's make_grid(normalize=True), mul(255).clamp(0, 255).byte())."""
    import io

    import torch
    import torchvision

    t = torchvision.utils.make_grid(torch.from_numpy(img).float() / 255, normalize=True)
    buf = io.BytesIO()
    Image.fromarray(t.mul(255).clamp(0, 255).byte().permute(1, 2, 0).numpy()).save(buf, format="PNG")
    return buf.getvalue()


def write_rcsb(z, x, run: Path, mapping_csv: Path, n_skip: int = 3, n_inpaints: int = 1) -> None:
    """What a run of RCSB's src/main.py leaves in its wandb run folder (vcebench/steps/import_rcsb.py):
    ``files/config.yaml`` (wandb's ``{desc, value}`` form of the Hydra config), per input ``images``, attribution
    maps, guidance logs, ``inpaints``, prediction logs and ``counterfactuals`` at successive steps as
    ``files/media/images/<key>_<step>_<sha256[:20]>.png``, and ``files/artifacts/prob_lpips_vals_idx-<index>.pt``.
    The loader's k-th input (dataset index ``n_skip + k``) is ``z``'s position ``n - 1 - k``; the mapping CSV sends
    the index to the sample id. ``x``: the inputs, uint8 like ``z["cf"]``."""
    import hashlib

    import torch
    import yaml

    files = run / "files"
    media = files / "media" / "images"
    (files / "artifacts").mkdir(parents=True, exist_ok=True)
    n = len(z["sample_id"])
    exp = {"run_func": {"_target_": "experiment.run_cava"}, "seed": 42, "log_dir": str(run.parent.parent),
           "n_unique": 1, "n_inpaints": n_inpaints, "batch_multip": 1, "n_samples": n + n_skip, "label_id": 31,
           "target_id": 31, "guide_id": 31, "guide_depth": None, "task": "multilabel"}
    dataset = {"_target_": "torch.utils.data.DataLoader", "batch_size": 1, "num_workers": 0,
               "dataset": {"_target_": "dataset.CelebADataset", "name": "celeba", "split": "train",
                           "path_data": "data/datasets/celeba", "path_labels": "data/metadata/celeba/labels.csv",
                           "path_predictions": None, "n_samples": n + n_skip, "label_id": 31, "n_skip": n_skip}}
    cfg = {"exp": exp, "fabric": {"_target_": "lightning.Fabric", "num_nodes": 1, "devices": 1},
           "wandb": {"project": None, "entity": None, "tags": None, "id": None}, "dataset": dataset,
           "_wandb": {"python_version": "3.10.13", "cli_version": "0.15.4", "framework": "torch"}}
    (files / "config.yaml").write_text("wandb_version: 1\n\n" + yaml.safe_dump(
        {k: {"desc": None, "value": v} for k, v in cfg.items()}, default_flow_style=False, sort_keys=False))
    step = 0

    def log(key: str, img=None) -> None:
        nonlocal step
        if img is not None:
            png = wandb_png(img)
            path = media / f"{key}_{step}_{hashlib.sha256(png).hexdigest()[:20]}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
        step += 1

    rows = []
    for k in range(n):
        pos, index = n - 1 - k, n_skip + k
        cf = np.concatenate([z["cf"][pos]] * n_inpaints, axis=2)  # n_inpaints > 1: a (crude) grid of candidates
        log("images", x[pos])
        log("attr_maps/positive", x[pos])
        log("attr_maps_post", x[pos])
        log("attr_maps_post_overlayed", x[pos])
        for _ in range(k % 3):
            log("misc/trajectory_xt", x[pos])
        log("inpaints", cf)
        for key in ("misc/img_idx", "predictions/flip_rate", "predictions/flip_rate_guided", "predictions/delta"):
            log(key)
        log("predictions/predicted_labels", x[pos])
        log("counterfactuals", cf if z["flipped"][pos] else np.zeros_like(cf))
        for _ in range(4):
            log("cf_loss")
        torch.save({"probs": torch.rand(1, 2), "lpips": torch.rand(1, 1), "logits": torch.randn(1, 2)},
                   files / "artifacts" / f"prob_lpips_vals_idx-{index}.pt")
        rows.append({"file": index, "sample_id": int(z["sample_id"][pos])})
    _mapping(mapping_csv, rows)


def eval_batches(n: int, bs: int, seed: int = 0, p_flip: float = 0.6, id_scale: int = 1, id_offset: int = 0):
    """Random 4 x 4 originals, counterfactuals 0.3 noise away, a share ``p_flip`` flipped, as metrics.base.EvalBatch
    batches of ``bs`` (sample ids ``i * id_scale + id_offset``): the metric tests' tiny evaluation set."""
    import torch

    from metrics.base import EvalBatch

    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 4, 4, generator=g) * 2 - 1
    cf = (x + 0.3 * torch.randn(n, 3, 4, 4, generator=g)).clamp(-1, 1)
    flipped = torch.rand(n, generator=g) < p_flip
    for s in range(0, n, bs):
        sl = slice(s, s + bs)
        m = len(x[sl])
        yield EvalBatch(x=x[sl], cf=cf[sl], sample_id=torch.arange(n)[sl] * id_scale + id_offset,
                        target=torch.ones(m, dtype=torch.long), flipped=flipped[sl],
                        label=torch.zeros(m, dtype=torch.long))
