"""Canonical (paper-setting) weights from user paths, in the formats the reference code ships.

Never downloads; every ``.pth`` goes through ``torch.load(weights_only=True)``.
Formats (config ``models.<dataset>.<role>.format``):

==========================  ================  ===================================================================
format                      roles             checkpoint layout / source
==========================  ================  ===================================================================
``dime_densenet121``        classifier,       ``{'feat_extract': {...}, 'classifier': {weight, bias}}``: torchvision
                            oracle            DenseNet-121 (``classifier = Identity``) + ``Linear(1024, num_outputs)``,
                                              input in [-1, 1] (DiME ``core/classifier/densenet.py``; ACE
                                              ``models/dive/densenet.py`` wraps it in ``Normalizer(0.5, 0.5)`` on
                                              [0, 1] images, the same thing). ``head``: ``1logit`` (column of the
                                              query attribute; 40 CelebA outputs) or ``2logit`` (2 outputs).
``ace_oracle_resnet50``     oracle            ``{'feat_extract': ..., 'classifier': ...}``: VGGFace2 ResNet-50-128
                                              (BTE / ACE ``eval_utils/oracle_celeba_metrics.py``) + ``Linear(128,
                                              40)``; its forward maps [-1, 1] to BGR minus the VGGFace2 mean and
                                              resizes to 224 (bicubic), as the reference.
``facenet_vggface2``        identity          facenet-pytorch ``InceptionResnetV1`` state dict (``logits.*`` of the
                                              8631-way VGGFace2 head ignored); input resized to 160, fixed image
                                              standardisation; L2-normalised 512-d output.
``simsiam_official``        simsiam           facebookresearch/simsiam ``checkpoint_0099.pth.tar``: ``state_dict``
                                              with ``module.encoder.*`` (ResNet-50 + 3-layer projector); the
                                              predictor is dropped (ACE ``eval_utils/simsiam.py``); ImageNet
                                              normalisation of [0, 1] images; grey images repeated to 3 channels.
``pytorch_fid_inception``   fid_features      pytorch-fid ``pt_inception-2015-12-05-6726825d.pth`` (the same file
                                              clean-fid's ``legacy_pytorch`` mode uses): FID Inception-v3, bilinear
                                              resize to 299, pool3 2048-d.
``vgg19_dime``              perceptual        torchvision VGG-19 state dict; ``features[:18]`` with ImageNet
                                              normalisation, per-sample feature MSE (DiME ``PerceptualLoss``).
``lpips``                   perceptual        lpips package (linear layers ship in its wheel) with ``net: vgg|alex``;
                                              ``weights`` = the torchvision backbone file, e.g. the torch hub
                                              cache's ``vgg16-397923af.pth`` / ``alexnet-owt-7be5be79.pth``.
``guided_diffusion``        ddpm              guided-diffusion UNet state dict; flags as keys or a pasted
                                              ``model_flags`` string (:mod:`vcebench.models.released.guided_unet`).
``fastdime_chexpert``       ddpm              FastDiME_Med's folder: ``ckpt.tar`` + ``config.pickle``.
``torch_module``            classifier, pmf,  a class from the user's environment (``class``, ``kwargs``), the state
                            ddpm              dict under ``state_dict``, a declared call convention
                                              (:mod:`vcebench.models.released.torch_module`).
==========================  ================  ===================================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...config.tasks import Task
from ...core.errors import CheckpointError
from ..base import BinaryHead
from ..checkpoints import load_state_strict, uninitialised
from ..synthetic.nets import AttributeClassifier
from .canonical_nets import (
    ACEOracle,
    DiMEDenseNet,
    FacenetIdentity,
    ImageNetInput,
    InceptionPool3,
    LPIPSDistance,
    VGGFeatureMSE,
    fid_inception,
    simsiam_encoder,
    vgg19_features,
)
from .fastdime_unet import TIMESTEPS, FastDiMEUNet, UnsafePickleError, read_plain_pickle
from .formats import FORMAT_DEFAULTS, check_spec, guided_block_flags
from .guided_unet import GuidedUNet
from .torch_module import load_torch_module
from .unet_ddpm import UNetDDPM

CELEBA_ATTRIBUTES = [
    "5_o_Clock_Shadow", "Arched_Eyebrows", "Attractive", "Bags_Under_Eyes", "Bald", "Bangs", "Big_Lips", "Big_Nose",
    "Black_Hair", "Blond_Hair", "Blurry", "Brown_Hair", "Bushy_Eyebrows", "Chubby", "Double_Chin", "Eyeglasses",
    "Goatee", "Gray_Hair", "Heavy_Makeup", "High_Cheekbones", "Male", "Mouth_Slightly_Open", "Mustache",
    "Narrow_Eyes", "No_Beard", "Oval_Face", "Pale_Skin", "Pointy_Nose", "Receding_Hairline", "Rosy_Cheeks",
    "Sideburns", "Smiling", "Straight_Hair", "Wavy_Hair", "Wearing_Earrings", "Wearing_Hat", "Wearing_Lipstick",
    "Wearing_Necklace", "Wearing_Necktie", "Young",
]
Loaded = tuple[nn.Module, str]


def torch_load(role: str, path: str | Path) -> Any:
    """``torch.load(weights_only=True)`` with a CheckpointError naming role and path on failure."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"role {role!r}: cannot read {path} as a torch checkpoint with weights_only=True "
                              f"(corrupt, truncated, or pickled code): {type(e).__name__}: {e}") from e


def _sub(role: str, path: Any, ck: Any, key: str) -> dict[str, Tensor]:
    if not isinstance(ck, dict) or key not in ck or not isinstance(ck[key], dict):
        have = list(ck)[:5] if isinstance(ck, dict) else type(ck).__name__
        raise CheckpointError(f"role {role!r}: {path} has no {key!r} state dict (found {have}); "
                              f"is it in the expected format?")
    return ck[key]


def strip_prefix(state: Any, prefix: str) -> dict[str, Tensor]:
    if not isinstance(state, dict):
        raise CheckpointError(f"expected a state dict, got {type(state).__name__}")
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}


def _fix_densenet_keys(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Old torchvision DenseNet keys (``norm.1``) -> current (``norm1``), as torchvision's own loader does."""
    pattern = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\."
                         r"((?:[12])\.(?:weight|bias|running_mean|running_var))$")
    out = {}
    for k, v in state.items():
        m = pattern.match(k)
        out[m.group(1) + m.group(2) if m else k] = v
    return out


# ----------------------------------------------------------------------------- networks


# ----------------------------------------------------------------------------- loaders

class _Dim(nn.Module):
    """Embedding wrapper exposing ``dim`` and ``name``."""

    def __init__(self, net: nn.Module, dim: int, name: str):
        super().__init__()
        self.net, self.dim, self.name = net, dim, name

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def _query_index(role: str, spec: dict, names: list[str], task: Task, key: str) -> int:
    if spec.get("index") is not None:
        return int(spec["index"])
    if task.attribute not in names:
        raise CheckpointError(f"role {role!r}: query attribute {task.attribute!r} of task {task.name!r} is not among "
                              f"the checkpoint's outputs {names}; set `{key}.index` or `{key}.attribute_names`")
    return names.index(task.attribute)


def _load_dime_densenet121(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    head = spec["head"]
    n_out = int(spec.get("num_outputs", 2 if head == "2logit" else 40))
    if head == "2logit" and n_out != 2:
        raise CheckpointError(f"role {role!r}: `{key}.head: 2logit` needs num_outputs 2, got {n_out}")
    ck = torch_load(role, path)
    feat = _fix_densenet_keys(strip_prefix(_sub(role, path, ck, "feat_extract"), "module."))
    cls = strip_prefix(_sub(role, path, ck, "classifier"), "module.")
    w = cls.get("weight")
    if w is None or w.ndim != 2:
        raise CheckpointError(f"role {role!r}: {path}['classifier'] has no 2-D 'weight'")
    if w.shape[0] != n_out:
        raise CheckpointError(f"role {role!r}: {path} has {w.shape[0]} outputs but config key "
                              f"`{key}.num_outputs` (head {head}) expects {n_out} (wrong number of classes)")
    net = uninitialised(lambda: DiMEDenseNet(n_out))
    load_state_strict(role, path, net.feat_extract, feat)
    load_state_strict(role, path, net.classifier, cls)
    names = list(spec.get("attribute_names") or (CELEBA_ATTRIBUTES if n_out == 40 else []))
    if role == "oracle":
        if len(names) != n_out:
            raise CheckpointError(f"role 'oracle': {path} has {n_out} outputs; set `{key}.attribute_names` "
                                  f"to their {n_out} names")
        return AttributeClassifier(net, names, name or "densenet121-oracle"), \
            f"{name or 'densenet121'} (DiME/ACE format, {path.name})"
    if head == "2logit":
        return BinaryHead(net, "2logit"), f"{name or 'densenet121'} (DiME/ACE format, 2-logit, {path.name})"
    if n_out == 1:
        idx = 0
    else:
        idx = _query_index(role, spec, names or [f"out{i}" for i in range(n_out)], task, key)
    return BinaryHead(net, "1logit", idx), f"{name or 'densenet121'} (DiME/ACE format, output {idx}, {path.name})"


def _load_ace_oracle_resnet50(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    ck = torch_load(role, path)
    net = uninitialised(ACEOracle)
    cls = strip_prefix(_sub(role, path, ck, "classifier"), "module.")
    if "weight" in cls and cls["weight"].ndim == 2 and cls["weight"].shape[0] != 40:
        raise CheckpointError(f"role 'oracle': {path} has {cls['weight'].shape[0]} outputs, the ACE oracle "
                              f"format has 40 (CelebA attributes) (wrong number of classes)")
    load_state_strict(role, path, net.feat_extract, strip_prefix(_sub(role, path, ck, "feat_extract"), "module."))
    load_state_strict(role, path, net.classifier, cls)
    return AttributeClassifier(net, CELEBA_ATTRIBUTES, name or "ace-oracle"), \
        f"{name or 'vggface2-resnet50-128 oracle'} (ACE format, {path.name})"


def _load_facenet_vggface2(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    state = torch_load(role, path)
    if not isinstance(state, dict):
        raise CheckpointError(f"role 'identity': {path} is not a state dict")
    state = {k: v for k, v in strip_prefix(state, "module.").items() if not k.startswith("logits.")}
    net = uninitialised(FacenetIdentity)
    load_state_strict(role, path, net.net, state)
    return _Dim(net, 512, name or "facenet-inceptionresnetv1-vggface2"), \
        f"{name or 'facenet InceptionResnetV1'} (VGGFace2 weights, {path.name}, 512-d)"


def _load_simsiam_official(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    ck = torch_load(role, path)
    state = _sub(role, path, ck, "state_dict")
    enc_state = {k[len("module.encoder."):]: v for k, v in state.items() if k.startswith("module.encoder.")}
    if not enc_state:
        enc_state = {k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}
    if not enc_state:
        raise CheckpointError(f"role 'simsiam': {path}['state_dict'] has no 'module.encoder.*' keys "
                              f"(found e.g. {list(state)[:3]}); expected the official SimSiam checkpoint")
    dim = int(enc_state.get("fc.6.weight", torch.empty(2048, 1)).shape[0])
    enc = uninitialised(lambda: simsiam_encoder(dim))
    load_state_strict(role, path, enc, enc_state)
    return _Dim(ImageNetInput(enc), dim, name or "simsiam-resnet50"), \
        f"{name or 'simsiam-resnet50'} (official checkpoint, {path.name}, projector {dim}-d)"


def _load_pytorch_fid_inception(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    state = torch_load(role, path)
    if not isinstance(state, dict):
        raise CheckpointError(f"role 'fid_features': {path} is not a state dict")
    net = uninitialised(fid_inception)
    load_state_strict(role, path, net, state)
    return _Dim(InceptionPool3(net), 2048, name or "inception-v3-pool3"), \
        f"{name or 'inception-v3-pool3'} (pytorch-fid weights, {path.name})"


def _load_vgg19_dime(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    state = strip_prefix(torch_load(role, path), "module.")
    features = uninitialised(vgg19_features)
    load_state_strict(role, path, features, {k[len("features."):]: v for k, v in state.items()
                                             if k.startswith("features.")})
    return VGGFeatureMSE(features[:18]), f"{name or 'vgg19-features18-mse'} (DiME perceptual loss, {path.name})"


def _load_lpips(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    """LPIPS v0.1 (Zhang et al. 2018): lpips package linear layers + a torchvision backbone from ``path``."""
    import lpips

    net = spec["net"]
    model = lpips.LPIPS(pretrained=False, net=net, pnet_rand=True, verbose=False)
    lin = torch_load(role, Path(lpips.__file__).parent / "weights" / "v0.1" / f"{net}.pth")
    model.load_state_dict(lin, strict=False)
    backbone = torch_load(role, path)
    own = model.net.state_dict()
    mapped = {}
    for k in own:  # net.sliceK.<i>.<param>  <-  features.<i>.<param>
        _, i, p = k.split(".", 2)
        src = f"features.{i}.{p}"
        if src not in backbone:
            raise CheckpointError(f"role {role!r}: {path} lacks {src!r}; expected a torchvision {net} state dict "
                                  f"(e.g. {'vgg16-397923af.pth' if net == 'vgg' else 'alexnet-owt-7be5be79.pth'})")
        mapped[k] = backbone[src]
    load_state_strict(role, path, model.net, mapped)
    return LPIPSDistance(model), f"lpips-{net}-v0.1 ({path.name})"


def _load_guided_diffusion(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    """A guided-diffusion (improved-diffusion) UNet state dict (DiME / ACE / FastDiME / MaskDiME ``.pt``)."""

    flags = guided_block_flags(role, spec, key)
    try:
        unet = uninitialised(lambda: GuidedUNet(**flags))  # ~100 M parameters that the checkpoint overwrites
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"role {role!r}: bad guided-diffusion flags under `{key}`: {e}") from e
    state = torch_load(role, path)
    if isinstance(state, dict) and isinstance(state.get("model"), dict) and "time_embed.0.weight" not in state:
        state = state["model"]
    load_state_strict(role, path, unet, strip_prefix(state, "module."))
    f = unet.flags
    if f["use_fp16"]:
        unet.convert_to_fp16()
    model = UNetDDPM(unet, int(f["diffusion_steps"]), str(f["noise_schedule"])).eval()
    desc = (f"{f['image_size']} px, {f['num_channels']} ch, T={f['diffusion_steps']} {f['noise_schedule']}"
            f"{', learned sigma' if f['learn_sigma'] else ''}{', fp16' if f['use_fp16'] else ''}")
    model.name = f"{name or 'guided-diffusion UNet'} ({desc}, {path.name})"
    return model, model.name


def _load_fastdime_chexpert(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    """FastDiME_Med's DDPM folder: ``ckpt.tar`` (``model`` state dict) + ``config.pickle`` (plain values)."""

    ckpt, cfg_file = path / "ckpt.tar", path / "config.pickle"
    missing = [str(p) for p in (ckpt, cfg_file) if not p.is_file()]
    if missing:
        raise CheckpointError(f"role {role!r}: `{key}.weights` must be FastDiME's model folder holding ckpt.tar "
                              f"and config.pickle; missing {', '.join(missing)}")
    try:
        config = read_plain_pickle(cfg_file)
        unet = uninitialised(lambda: FastDiMEUNet.from_config(config))
        steps = int(config["TrainingConfig"].get("TIMESTEPS", TIMESTEPS))  # config.pickle's own field
    except UnsafePickleError as e:
        raise CheckpointError(f"role {role!r}: {e}") from e
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"role {role!r}: {cfg_file} is not FastDiME's training config "
                              f"(ModelConfig / TrainingConfig): {type(e).__name__}: {e}") from e
    load_state_strict(role, ckpt, unet, strip_prefix(_sub(role, ckpt, torch_load(role, ckpt), "model"), "module."))
    model = UNetDDPM(unet, steps, "linear").eval()
    mc = config["ModelConfig"]
    model.name = (f"{name or 'FastDiME medical UNet'} ({unet.in_channels} ch in, base {mc['BASE_CH']} x "
                  f"{tuple(mc['BASE_CH_MULT'])}, T={steps} linear, {path.name})")
    return model, model.name


def _load_torch_module(role: str, spec: dict, path: Path, task: Task, key: str, name: str | None) -> Loaded:
    """A network defined by its own code (``vcebench/models/released/torch_module.py``)."""
    return load_torch_module(role, spec, path, key, name)


# format -> its loader (the formats' roles, keys and checks: ``formats.FORMAT_SPECS``)
LOADERS: dict[str, Callable[..., Loaded]] = {
    "dime_densenet121": _load_dime_densenet121,
    "ace_oracle_resnet50": _load_ace_oracle_resnet50,
    "facenet_vggface2": _load_facenet_vggface2,
    "simsiam_official": _load_simsiam_official,
    "pytorch_fid_inception": _load_pytorch_fid_inception,
    "vgg19_dime": _load_vgg19_dime,
    "lpips": _load_lpips,
    "guided_diffusion": _load_guided_diffusion,
    "fastdime_chexpert": _load_fastdime_chexpert,
    "torch_module": _load_torch_module,
}


def load_canonical(role: str, spec: dict, task: Task, key: str) -> Loaded:
    """Build the role's module from ``spec['weights']`` in ``spec['format']``; return (module, name)."""
    check_spec(role, spec, key)
    fmt = spec["format"]
    spec = {**FORMAT_DEFAULTS.get(fmt, {}), **spec}
    return LOADERS[fmt](role, spec, Path(spec["weights"]), task, key, spec.get("name"))
