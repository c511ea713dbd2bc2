"""The built-in methods, metrics and datasets (the registry starts from these; plug-ins add to them)."""

from __future__ import annotations

from .specs import MethodSpec, MetricSpec

# datasets: name -> (task kind, synthetic). The task kind picks the metric protocol: `faces` (ACE) or
# `xray` (FastDiME's medical protocol); synthetic datasets add the ground-truth metrics.
DATASETS = {"synthfaces": ("faces", True), "synthxray": ("xray", True), "celeba": ("faces", False),
            "celebahq": ("faces", False), "chexpert": ("xray", False)}

_DDPM_ROLES = ("classifier", "ddpm", "perceptual")
BUILTIN_METHODS: tuple[MethodSpec, ...] = (
    MethodSpec("fire", "FiRe", ("classifier", "pmf", "perceptual"), "methods.fire:FireParams", "methods.fire:FiRe",
               noise="flow"),
    MethodSpec("dime", "DiME", _DDPM_ROLES, "methods.dime:DimeParams", "methods.dime:DiME", noise="ddpm"),
    MethodSpec("fastdime", "FastDiME", _DDPM_ROLES, "methods.fastdime:FastDimeParams", "methods.fastdime:FastDiME",
               {"passes": 1, "first_pass_mask": True}, noise="ddpm"),
    MethodSpec("fastdime2", "FastDiME-2", _DDPM_ROLES, "methods.fastdime:FastDimeParams",
               "methods.fastdime:FastDiME", {"passes": 2, "first_pass_mask": False}, noise="ddpm"),
    MethodSpec("fastdime2plus", "FastDiME-2+", _DDPM_ROLES, "methods.fastdime:FastDimeParams",
               "methods.fastdime:FastDiME", {"passes": 2, "first_pass_mask": True}, noise="ddpm"),
    MethodSpec("maskdime", "MaskDiME", _DDPM_ROLES, "methods.maskdime:MaskDimeParams", "methods.maskdime:MaskDiME",
               noise="ddpm"),
    # ACE (methods/ace.py): a PGD pre-explanation through the DDPM filter, then inpainting; `ace_l1` / `ace_l2`
    MethodSpec("ace", "ACE", ("classifier", "ddpm"), "methods.ace:AceParams", "methods.ace:ACE", noise="ddpm"),
    # PGD on the pixels, no generator (methods/pixel.py): a ranked method that is no counterfactual; `pixel_attack`
    MethodSpec("pixel", "Pixel PGD", ("classifier",), "methods.pixel:PixelParams", "methods.pixel:PixelAttack",
               attack=True),
    # the do-nothing row: the input as its own "counterfactual" (methods/identity.py)
    MethodSpec("input", "Input (no edit)", ("classifier",), "methods.identity:IdentityParams",
               "methods.identity:Identity", baseline=True),
    # the true counterfactual: the synthetic renderer's image with the query attribute set to the target
    # (methods/ground_truth.py); synthetic tasks only
    MethodSpec("truth", "Ground truth", ("classifier",), "methods.ground_truth:GroundTruthParams",
               "methods.ground_truth:GroundTruth", baseline=True, truth=True),
)

# In evaluation order; the tables show each kind's metrics in this order, ranked columns first, then the
# unranked ones (the ground-truth floors). Protocol and subsets: metrics/__init__.py, docs/protocol.md.
_B = "metrics.builders:"
BUILTIN_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("FID", (("FID", False),), _B + "fid", ("fid_features",)),
    MetricSpec("sFID", (("sFID", False),), _B + "sfid", ("fid_features",), kinds=("faces",)),
    MetricSpec("KID", (("KID", False),), _B + "kid", ("fid_features",)),
    MetricSpec("FVA", (("FVA", True), ("FS", True)), _B + "fva", ("identity",), kinds=("faces",)),
    MetricSpec("MNAC", (("MNAC", False),), _B + "mnac", ("oracle",), kinds=("faces",)),
    MetricSpec("CD", (("CD", False),), _B + "cd", ("oracle",), kinds=("faces",)),
    MetricSpec("COUT", (("COUT", True),), _B + "cout", ("classifier",), kinds=("faces",)),
    MetricSpec("L1", (("L1", False),), _B + "l1", (), table_kinds=("xray",)),
    MetricSpec("MAD", (("MAD", True),), _B + "mad", ("classifier",), kinds=("xray",)),
    MetricSpec("S3", (("S3", True),), _B + "s3", ("simsiam",), kinds=("xray",), labels=(("S3", "S$^3$"),)),
    MetricSpec("FR", (("FR", True),), _B + "fr", ("classifier",), labels=(("FR", "FR(%)"),)),
    MetricSpec("GT", (("GT_L1", False), ("GT_L1_region", False), ("GT_precision", True), ("GT_recall", True),
                      ("GT_L1_input", None), ("GT_L1_region_input", None)), _B + "ground_truth", (),
               synthetic_only=True, labels=(("GT_L1_input", "GT_L1 (input)"),
                                            ("GT_L1_region_input", "GT_L1_region (input)"))),
    MetricSpec("FR_oracle", (("FR_oracle", True),), _B + "fr_oracle", ("oracle",), synthetic_only=True),
)
