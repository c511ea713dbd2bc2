"""Tiny fake copies of the real datasets in their on-disk formats (for loader and CLI tests).

``make_celeba(dir, n=12, fmt="txt"|"csv")``, ``make_celebahq(dir, celeba_dir, n=8)``,
``make_chexpert(dir, n_patients=10)``: each returns the root to put in ``datasets.<name>.root``.
Images are small random JPEGs (CelebA 178 x 218 aligned crops are scaled down to 18 x 22).
"""

from __future__ import annotations

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
