"""The built-in methods, metrics and datasets (the registry starts from these; plug-ins add to them)."""

from __future__ import annotations

from .specs import DatasetSpec, MethodSpec, MetricSpec

# Datasets. The kind picks the metric protocol: `faces` (ACE) or `xray` (FastDiME's medical protocol); synthetic
# datasets add the ground-truth metrics. `config`: the keys of the config section `datasets.<name>`.
_RESOLUTION = {"type": "integer", "minimum": 8, "description": "image side (px)"}
_SEED = {"type": "integer", "description": "renderer seed"}
_ROOT = {"type": ["string", "null"], "description": "the dataset's folder"}
_MIN_SIZE = {"type": "integer", "minimum": 1,
             "description": "an image with a shorter side below this (px) fails its sample"}
_ALLOW = {"type": "boolean", "description": "a split or label file that differs from its expected or first-seen "
          "sha256 is a warning, not an error (your own split; vcebench/data/fingerprints.py)"}
CELEBA_ATTRIBUTES = (
    "5_o_Clock_Shadow", "Arched_Eyebrows", "Attractive", "Bags_Under_Eyes", "Bald", "Bangs", "Big_Lips", "Big_Nose",
    "Black_Hair", "Blond_Hair", "Blurry", "Brown_Hair", "Bushy_Eyebrows", "Chubby", "Double_Chin", "Eyeglasses",
    "Goatee", "Gray_Hair", "Heavy_Makeup", "High_Cheekbones", "Male", "Mouth_Slightly_Open", "Mustache",
    "Narrow_Eyes", "No_Beard", "Oval_Face", "Pale_Skin", "Pointy_Nose", "Receding_Hairline", "Rosy_Cheeks",
    "Sideburns", "Smiling", "Straight_Hair", "Wavy_Hair", "Wearing_Earrings", "Wearing_Hat", "Wearing_Lipstick",
    "Wearing_Necklace", "Wearing_Necktie", "Young")
# The split and label files of the real datasets, with their expected sha256: no published hash is known (none
# could be checked when this was written, 2026-12-03; docs/real-data.md), so every one is None and the first file
# seen is recorded (vcebench/data/fingerprints.py). Alternatives (.txt or .csv) are each
# listed; those not present are skipped.
_CELEBA_PARTITION = (("list_eval_partition.txt", None), ("list_eval_partition.csv", None))
_CELEBA_FILES = (*_CELEBA_PARTITION, ("list_attr_celeba.txt", None), ("list_attr_celeba.csv", None),
                 ("identity_CelebA.txt", None))
BUILTIN_DATASETS: tuple[DatasetSpec, ...] = (
    DatasetSpec("synthfaces", "faces", True,
                ("Bangs", "Black_Hair", "Blond_Hair", "Brown_Hair", "Eyeglasses", "Gray_Hair", "Heavy_Makeup",
                 "Male", "Mouth_Slightly_Open", "No_Beard", "Smiling", "Wearing_Lipstick", "Young"),
                "vcebench.data.synthfaces:from_config",
                {"resolution": _RESOLUTION, "seed": _SEED,
                 "n_identities": {"type": "integer", "minimum": 10},
                 "images_per_identity": {"type": "integer", "minimum": 8}}),
    DatasetSpec("synthxray", "xray", True, ("Cardiomegaly", "Effusion", "Male", "Pacemaker"),
                "vcebench.data.synthxray:from_config",
                {"resolution": _RESOLUTION, "seed": _SEED,
                 "n_patients": {"type": "integer", "minimum": 20},
                 "images_per_patient": {"type": "integer", "minimum": 1}}),
    # CelebA: evaluated on `minival` (the seeded 1000 of the validation partition, as in DiME / ACE), tuned on
    # the rest of the validation partition
    DatasetSpec("celeba", "faces", False, CELEBA_ATTRIBUTES, "vcebench.data.celeba:load_celeba",
                {"root": _ROOT, "resolution": {"type": "integer"},
                 "minival": {"type": "integer", "minimum": 1}, "min_image_size": _MIN_SIZE,
                 "allow_modified_splits": _ALLOW},
                eval_split="minival", tune_split="tune",
                source="https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html (Kaggle mirror: "
                       "https://www.kaggle.com/datasets/jessicali9530/celeba-dataset)",
                layout="img_align_celeba/*.jpg, list_attr_celeba.txt|csv, list_eval_partition.txt|csv",
                split_files=tuple(("root", f, h) for f, h in _CELEBA_FILES)),
    DatasetSpec("celebahq", "faces", False, CELEBA_ATTRIBUTES, "vcebench.data.celeba:load_celebahq",
                {"root": _ROOT, "celeba_root": _ROOT, "resolution": {"type": "integer"},
                 "min_image_size": _MIN_SIZE, "allow_modified_splits": _ALLOW},
                source="https://github.com/switchablenorms/CelebAMask-HQ",
                layout="CelebA-HQ-img/*.jpg, CelebAMask-HQ-attribute-anno.txt, CelebA-HQ-to-CelebA-mapping.txt "
                       "(+ datasets.celebahq.celeba_root for list_eval_partition)",
                split_files=(("root", "CelebAMask-HQ-attribute-anno.txt", None),
                             ("root", "CelebA-HQ-to-CelebA-mapping.txt", None),
                             *(("celeba_root", f, h) for f, h in (*_CELEBA_PARTITION, ("identity_CelebA.txt", None))))),
    DatasetSpec("chexpert", "xray", False, ("Cardiomegaly", "Effusion", "Male", "Pacemaker"),
                "vcebench.data.chexpert:load_chexpert",
                {"root": _ROOT, "pacemaker_csv": _ROOT, "resolution": {"type": "integer"},
                 "min_image_size": _MIN_SIZE, "allow_modified_splits": _ALLOW},
                source="https://stanfordmlgroup.github.io/competitions/chexpert/ (pacemaker labels: your own CSV "
                       "with columns Path,Pacemaker, e.g. from the FastDiME_Med annotations)",
                layout="CheXpert-v1.0(-small)/train.csv, valid.csv with a Path column "
                       "(+ datasets.chexpert.pacemaker_csv with columns Path,Pacemaker)",
                split_files=(("root", "train.csv", None), ("root", "valid.csv", None), ("pacemaker_csv", "", None))),
)

_DDPM_ROLES = ("classifier", "ddpm", "perceptual")
BUILTIN_METHODS: tuple[MethodSpec, ...] = (
    MethodSpec("fire", "FiRe", ("classifier", "pmf", "perceptual"), "methods.params:FireParams", "methods.fire:FiRe",
               noise="flow"),
    MethodSpec("dime", "DiME", _DDPM_ROLES, "methods.params:DimeParams", "methods.dime:DiME", noise="ddpm"),
    MethodSpec("fastdime", "FastDiME", _DDPM_ROLES, "methods.params:FastDimeParams", "methods.fastdime:FastDiME",
               {"passes": 1, "first_pass_mask": True}, noise="ddpm"),
    MethodSpec("fastdime2", "FastDiME-2", _DDPM_ROLES, "methods.params:FastDimeParams",
               "methods.fastdime:FastDiME", {"passes": 2, "first_pass_mask": False}, noise="ddpm"),
    MethodSpec("fastdime2plus", "FastDiME-2+", _DDPM_ROLES, "methods.params:FastDimeParams",
               "methods.fastdime:FastDiME", {"passes": 2, "first_pass_mask": True}, noise="ddpm"),
    MethodSpec("maskdime", "MaskDiME", _DDPM_ROLES, "methods.params:MaskDimeParams", "methods.maskdime:MaskDiME",
               noise="ddpm"),
    # ACE (methods/ace.py): a PGD pre-explanation through the DDPM filter, then inpainting; `ace_l1` / `ace_l2`
    MethodSpec("ace", "ACE", ("classifier", "ddpm"), "methods.params:AceParams", "methods.ace:ACE", noise="ddpm"),
    # PGD on the pixels, no generator (methods/pixel.py): a ranked method that is no counterfactual; `pixel_attack`
    MethodSpec("pixel", "Pixel PGD", ("classifier",), "methods.params:PixelParams", "methods.pixel:PixelAttack",
               attack=True),
    # the do-nothing row: the input as its own "counterfactual" (methods/no_edit.py)
    MethodSpec("input", "Input (no edit)", ("classifier",), "methods.params:NoEditParams",
               "methods.no_edit:NoEdit", baseline=True),
    # the true counterfactual: the synthetic renderer's image with the query attribute set to the target
    # (methods/ground_truth.py); synthetic tasks only
    MethodSpec("truth", "Ground truth", ("classifier",), "methods.params:GroundTruthParams",
               "methods.ground_truth:GroundTruth", baseline=True, truth=True),
)

# In evaluation order; the tables show each kind's metrics in this order, ranked columns first, then the
# unranked ones (the ground-truth floors). Protocol and subsets: metrics/__init__.py, docs/protocol.md.
_B = "metrics.builders:"
BUILTIN_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("FID", (("FID", False),), _B + "fid", ("fid_features",), inputs=("fid_reference",)),
    MetricSpec("sFID", (("sFID", False),), _B + "sfid", ("fid_features",), kinds=("faces",),
               inputs=("fid_reference",)),
    MetricSpec("KID", (("KID", False),), _B + "kid", ("fid_features",), inputs=("fid_reference",)),
    MetricSpec("FVA", (("FVA", True), ("FS", True)), _B + "fva", ("identity",), kinds=("faces",)),
    MetricSpec("MNAC", (("MNAC", False),), _B + "mnac", ("oracle",), kinds=("faces",)),
    MetricSpec("CD", (("CD", False),), _B + "cd", ("oracle",), kinds=("faces",), inputs=("train_labels",)),
    MetricSpec("COUT", (("COUT", True),), _B + "cout", ("classifier",), kinds=("faces",)),
    MetricSpec("L1", (("L1", False),), _B + "l1", (), table_kinds=("xray",)),
    MetricSpec("MAD", (("MAD", True),), _B + "mad", ("classifier",), kinds=("xray",)),
    MetricSpec("S3", (("S3", True),), _B + "s3", ("simsiam",), kinds=("xray",), labels=(("S3", "S$^3$"),)),
    MetricSpec("FR", (("FR", True),), _B + "fr", ("classifier",), labels=(("FR", "FR(%)"),)),
    MetricSpec("GT", (("GT_L1", False), ("GT_L1_region", False), ("GT_precision", True), ("GT_recall", True),
                      ("GT_L1_input", None), ("GT_L1_region_input", None)), _B + "ground_truth", (),
               synthetic_only=True, labels=(("GT_L1_input", "GT_L1 (input)"),
                                            ("GT_L1_region_input", "GT_L1_region (input)")),
               inputs=("ground_truth",)),
    MetricSpec("FR_oracle", (("FR_oracle", True),), _B + "fr_oracle", ("oracle",), synthetic_only=True),
)
