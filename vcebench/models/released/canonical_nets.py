"""The published networks that canonical checkpoints are loaded into (``canonical.LOADERS``):
DiME's DenseNet-121, the ACE oracle's ResNet-50, FaceNet, SimSiam's ResNet-50, the FID Inception-v3,
VGG-19 features and LPIPS, each with the input convention of its checkpoint.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DiMEDenseNet(nn.Module):
    """DiME / ACE / BTE DenseNet-121 classifier (``feat_extract.feat_extract`` = torchvision DenseNet-121)."""

    def __init__(self, num_outputs: int = 40):
        super().__init__()
        import torchvision  # here, not at import: config checks and synthetic runs need none

        dn = torchvision.models.densenet121(weights=None)
        dn.classifier = nn.Identity()
        self.feat_extract = nn.Module()
        self.feat_extract.feat_extract = dn
        self.classifier = nn.Linear(1024, num_outputs)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        return self.classifier(self.feat_extract.feat_extract(x))


class Resnet50_128(nn.Module):
    """VGGFace2 ResNet-50 with a 128-d feature layer (caffe-converted; BTE / ACE oracle), named as the reference."""

    MEAN_BGR = (131.0912, 103.8827, 91.4953)

    def __init__(self):
        super().__init__()
        self.conv1_7x7_s2 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.conv1_7x7_s2_bn = nn.BatchNorm2d(64)
        self.blocks: list[tuple[str, bool]] = []
        ci = 64
        for stage, (n, mid) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)], start=2):
            for b in range(1, n + 1):
                p = f"conv{stage}_{b}"
                stride = 2 if (b == 1 and stage > 2) else 1
                co = 4 * mid
                for name, conv in ((f"{p}_1x1_reduce", nn.Conv2d(ci, mid, 1, stride, bias=False)),
                                   (f"{p}_3x3", nn.Conv2d(mid, mid, 3, 1, 1, bias=False)),
                                   (f"{p}_1x1_increase", nn.Conv2d(mid, co, 1, 1, bias=False))):
                    self.add_module(name, conv)
                    self.add_module(name + "_bn", nn.BatchNorm2d(conv.out_channels))
                if b == 1:
                    self.add_module(f"{p}_1x1_proj", nn.Conv2d(ci, co, 1, stride, bias=False))
                    self.add_module(f"{p}_1x1_proj_bn", nn.BatchNorm2d(co))
                self.blocks.append((p, b == 1))
                ci = co
        self.feat_extract = nn.Conv2d(2048, 128, 1, 1, bias=False)
        self.register_buffer("mean", torch.tensor(self.MEAN_BGR).view(1, 3, 1, 1) / 255.0, persistent=False)

    def _cbr(self, name: str, x: Tensor, relu: bool = True) -> Tensor:
        y = getattr(self, name + "_bn")(getattr(self, name)(x))
        return F.relu(y) if relu else y

    def forward(self, x: Tensor) -> Tensor:
        x = (x + 1) / 2
        x = x[:, [2, 1, 0]] - self.mean
        x = F.interpolate(x, size=(224, 224), mode="bicubic", align_corners=False)
        x = F.max_pool2d(self._cbr("conv1_7x7_s2", x), 3, 2, ceil_mode=True)
        for p, first in self.blocks:
            h = self._cbr(f"{p}_1x1_reduce", x)
            h = self._cbr(f"{p}_3x3", h)
            h = self._cbr(f"{p}_1x1_increase", h, relu=False)
            skip = self._cbr(f"{p}_1x1_proj", x, relu=False) if first else x
            x = F.relu(h + skip)
        x = F.adaptive_avg_pool2d(x, 1)  # the reference's AvgPool2d(7) on its 7x7 map
        return self.feat_extract(x).flatten(1)


class ACEOracle(nn.Module):
    def __init__(self):
        super().__init__()
        self.feat_extract = Resnet50_128()
        self.classifier = nn.Linear(128, 40)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.feat_extract(x))


class FacenetIdentity(nn.Module):
    """facenet-pytorch InceptionResnetV1 on [-1, 1] images: resize to 160, ``(255 x - 127.5) / 128`` standardisation."""

    def __init__(self):
        super().__init__()
        from facenet_pytorch import InceptionResnetV1

        self.net = InceptionResnetV1(pretrained=None, classify=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != 160 or x.shape[-2] != 160:
            x = F.interpolate(x, size=(160, 160), mode="bilinear", align_corners=False)
        return self.net(x * (127.5 / 128.0))


def simsiam_encoder(dim: int = 2048) -> nn.Module:
    """torchvision ResNet-50 whose ``fc`` is SimSiam's 3-layer projector (facebookresearch/simsiam builder.py)."""
    import torchvision

    enc = torchvision.models.resnet50(weights=None, num_classes=dim)
    prev = enc.fc.weight.shape[1]
    enc.fc = nn.Sequential(nn.Linear(prev, prev, bias=False), nn.BatchNorm1d(prev), nn.ReLU(inplace=True),
                           nn.Linear(prev, prev, bias=False), nn.BatchNorm1d(prev), nn.ReLU(inplace=True),
                           enc.fc, nn.BatchNorm1d(dim, affine=False))
    return enc


class ImageNetInput(nn.Module):
    """[-1, 1] (grey or RGB) -> ImageNet-normalised RGB, then ``net``."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net
        self.register_buffer("mu", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("sigma", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        return self.net(((x.clamp(-1, 1) + 1) / 2 - self.mu) / self.sigma)


def fid_inception() -> nn.Module:
    """pytorch-fid's FID Inception-v3 (TF 2015-12-05 graph), built offline from clean-fid's block classes."""
    import torchvision
    from cleanfid.inception_pytorch import FIDInceptionA, FIDInceptionC, FIDInceptionE_1, FIDInceptionE_2

    net = torchvision.models.Inception3(num_classes=1008, aux_logits=False, init_weights=False)
    net.Mixed_5b = FIDInceptionA(192, pool_features=32)
    net.Mixed_5c = FIDInceptionA(256, pool_features=64)
    net.Mixed_5d = FIDInceptionA(288, pool_features=64)
    net.Mixed_6b = FIDInceptionC(768, channels_7x7=128)
    net.Mixed_6c = FIDInceptionC(768, channels_7x7=160)
    net.Mixed_6d = FIDInceptionC(768, channels_7x7=160)
    net.Mixed_6e = FIDInceptionC(768, channels_7x7=192)
    net.Mixed_7b = FIDInceptionE_1(1280)
    net.Mixed_7c = FIDInceptionE_2(2048)
    return net


class InceptionPool3(nn.Module):
    """pool3 (2048-d) of the FID Inception on [-1, 1] input, resized bilinearly to 299 (pytorch-fid default)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net, self.dim = net, 2048

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        x = F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False)
        n = self.net
        for m in (n.Conv2d_1a_3x3, n.Conv2d_2a_3x3, n.Conv2d_2b_3x3):
            x = m(x)
        x = F.max_pool2d(x, 3, 2)
        x = n.Conv2d_4a_3x3(n.Conv2d_3b_1x1(x))
        x = F.max_pool2d(x, 3, 2)
        for m in (n.Mixed_5b, n.Mixed_5c, n.Mixed_5d, n.Mixed_6a, n.Mixed_6b, n.Mixed_6c, n.Mixed_6d, n.Mixed_6e,
                  n.Mixed_7a, n.Mixed_7b, n.Mixed_7c):
            x = m(x)
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


def vgg19_features() -> nn.Sequential:
    """torchvision VGG-19 ``features`` (config 'E') without building the 120M-parameter classifier."""
    from torchvision.models.vgg import cfgs, make_layers

    return make_layers(cfgs["E"], batch_norm=False)


class VGGFeatureMSE(nn.Module):
    """DiME ``PerceptualLoss``: per-sample MSE of VGG-19 ``features[:layer]`` on ImageNet-normalised inputs."""

    def __init__(self, features: nn.Module):
        super().__init__()
        self.features = ImageNetInput(features)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        fx, fy = self.features(x), self.features(y)
        return (fx - fy).pow(2).flatten(1).mean(1)


class LPIPSDistance(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x, y = x.expand(-1, 3, -1, -1), y.expand(-1, 3, -1, -1)
        return self.model(x, y, normalize=False).flatten()
