"""Numbers reported in the FiRe paper (seed paper, Tables 1-3), printed beside ours and marked as reported.

Keys are our method names: ``ace`` is ACE l1 (the method's default distance), ``ace_l2`` its l2 variant.
"""

from __future__ import annotations

FACE_COLS = ["FID", "sFID", "FVA", "FS", "MNAC", "CD", "COUT", "FR"]
XRAY_COLS = ["FID", "L1", "MAD", "S3", "FR"]

_FACES = {
    "celeba_smile": {
        "dime": [3.17, 4.89, 98.3, 0.73, 3.72, 2.30, 0.53, 97.2],
        "ace": [1.27, 3.97, 99.9, 0.87, 2.94, 1.73, 0.78, 97.6],  # ACE l1
        "ace_l2": [1.9, 4.56, 99.9, 0.87, 2.77, 1.56, 0.62, 84.3],
        "fastdime": [4.18, 6.13, 99.8, 0.76, 3.12, 1.91, 0.45, 99.0],
        "fastdime2": [3.33, 5.49, 99.9, 0.77, 3.06, 1.89, 0.44, 99.4],
        "fastdime2plus": [3.24, 5.23, 99.9, 0.79, 2.91, 2.02, 0.41, 98.9],
        "maskdime": [0.71, 3.29, 100.0, 0.91, 2.78, 2.41, 0.87, 100.0],
        "fire": [0.69, 3.14, 100.0, 0.93, 1.71, 2.59, 0.57, 100.0],
    },
    "celeba_age": {
        "dime": [4.15, 5.89, 95.3, 0.67, 3.13, 3.27, 0.44, 99.0],
        "ace": [1.45, 4.12, 99.6, 0.78, 3.2, 2.94, 0.72, 96.2],  # ACE l1
        "ace_l2": [2.08, 4.62, 99.6, 0.8, 2.94, 2.82, 0.56, 77.5],
        "fastdime": [4.82, 6.76, 99.2, 0.74, 2.65, 3.80, 0.36, 98.6],
        "fastdime2": [4.04, 6.01, 99.6, 0.75, 2.63, 3.80, 0.37, 99.3],
        "fastdime2plus": [3.60, 5.59, 99.7, 0.77, 2.44, 3.76, 0.32, 98.7],
        "maskdime": [0.77, 3.33, 100.0, 0.83, 2.22, 3.21, 0.79, 100.0],
        "fire": [0.73, 3.29, 100.0, 0.85, 1.81, 3.43, 0.54, 100.0],
    },
    "celebahq_smile": {
        "dime": [18.10, 27.7, 96.7, 0.67, 2.63, 1.82, 0.65, 97.0],
        "ace": [3.21, 20.2, 100.0, 0.89, 1.56, 2.61, 0.55, 95.0],  # ACE l1
        "ace_l2": [6.93, 22.0, 100.0, 0.84, 1.87, 2.21, 0.6, 95.0],
        "maskdime": [2.51, 18.1, 100.0, 0.94, 1.41, 2.67, 0.69, 99.4],
        "fire": [1.98, 17.9, 100.0, 0.93, 1.22, 2.58, 0.62, 99.9],
    },
    "celebahq_age": {
        "dime": [18.7, 27.8, 95.0, 0.66, 2.10, 4.29, 0.56, 97.0],
        "ace": [5.31, 21.7, 99.6, 0.81, 1.53, 5.4, 0.4, 95.0],  # ACE l1
        "ace_l2": [16.4, 28.2, 99.6, 0.77, 1.92, 4.21, 0.53, 95.0],
        "maskdime": [4.43, 19.4, 100.0, 0.88, 1.82, 4.67, 0.63, 99.6],
        "fire": [3.02, 18.6, 100.0, 0.90, 1.46, 4.72, 0.55, 99.9],
    },
}
_XRAY = {
    "chexpert_pacemaker": {
        "dime": [51.7, 0.088, 0.956, 0.902, 97.7],
        "fastdime": [29.2, 0.058, 0.959, 0.927, 100.0],
        "fastdime2": [30.4, 0.069, 0.953, 0.881, 99.8],
        "fastdime2plus": [38.1, 0.052, 0.954, 0.928, 100.0],
        "maskdime": [22.0, 0.053, 0.954, 0.935, 100.0],
        "fire": [17.4, 0.049, 0.960, 0.951, 100.0],
    }
}
# Table 4 (CelebA-HQ Smile ablation): our variant name -> reported row.
ABLATION = {
    "fire_one_step": [27.36, 38.5, 97.4, 0.84, 3.40, 3.11, 0.67, 41.6],
    "fire_reverse": [31.49, 42.2, 97.4, 0.85, 2.98, 2.94, 0.81, 90.3],
    "fire_fixed": [19.13, 30.2, 100.0, 0.88, 2.95, 2.41, 0.88, 95.2],
    "fire_fixed_maskdime_mask": [9.41, 25.8, 99.8, 0.88, 1.75, 2.63, 0.71, 93.7],
    "fire_fixed_fire_mask": [3.97, 24.3, 100.0, 0.91, 1.44, 2.46, 0.68, 99.9],
    "fire_no_early_stop": [3.47, 22.9, 100.0, 0.91, 1.42, 2.51, 0.66, 99.9],
    "fire": [1.98, 17.9, 100.0, 0.93, 1.22, 2.58, 0.62, 99.9],
}
# Figure 2 (CelebA Smile, 1000 CFs, batch 5).
EFFICIENCY = {"fire": {"minutes_per_1000": 6.37, "pflops_per_1000": 1.28},
              "maskdime_vs_fire": {"time_ratio": 3.0, "flops_ratio": 8.0}}


def reported(task: str) -> dict[str, dict[str, float]]:
    """method -> {metric: value} as reported in the paper for a real task (empty if none)."""
    if task in _FACES:
        return {m: dict(zip(FACE_COLS, v)) for m, v in _FACES[task].items()}
    if task in _XRAY:
        return {m: dict(zip(XRAY_COLS, v)) for m, v in _XRAY[task].items()}
    return {}
