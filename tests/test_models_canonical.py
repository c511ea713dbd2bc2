"""Canonical (paper-setting) weights: random-weight networks saved in each reference format load offline,
give the reference forward, and wrong class counts / architectures / corrupt files fail clearly."""

from __future__ import annotations

import pytest
import torch
import torchvision

from vcebench.config.load import deep_merge
from vcebench.models import CheckpointError, load_task_models
from vcebench.models.released.canonical import CELEBA_ATTRIBUTES
from vcebench.models.released.canonical_nets import (
    ACEOracle,
    DiMEDenseNet,
    fid_inception,
    simsiam_encoder,
    vgg19_features,
)


def _cfg(cfg, dataset, role, **spec):
    return deep_merge(cfg, {"models": {dataset: {role: spec}}})


@pytest.fixture(scope="module")
def densenet_ckpt(tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("dime")
    nets = {}
    for n_out in (40, 2):
        net = DiMEDenseNet(n_out).eval()
        torch.save({"feat_extract": net.feat_extract.state_dict(), "classifier": net.classifier.state_dict()},
                   d / f"classifier{n_out}.pth")
        nets[n_out] = net
    return d, nets


def test_dime_densenet_1logit_picks_the_query_column(cfg, densenet_ckpt):
    d, nets = densenet_ckpt
    c = _cfg(cfg, "celeba", "classifier", weights=str(d / "classifier40.pth"))
    m = load_task_models(c, "celeba_age", ("classifier",))
    x = torch.rand(2, 3, 64, 64) * 2 - 1
    ref = nets[40](x)[:, CELEBA_ATTRIBUTES.index("Young")]
    out = m.classifier(x)
    assert out.shape == (2, 2) and torch.allclose(out[:, 1], ref, atol=1e-5) and torch.all(out[:, 0] == 0)
    assert CELEBA_ATTRIBUTES.index("Smiling") == 31 and CELEBA_ATTRIBUTES.index("Young") == 39
    assert "output 39" in m.names["classifier"]


def test_dime_densenet_2logit_head(cfg, densenet_ckpt):
    d, nets = densenet_ckpt
    c = _cfg(cfg, "celeba", "classifier", weights=str(d / "classifier2.pth"), head="2logit", num_outputs=2)
    m = load_task_models(c, "celeba_smile", ("classifier",))
    x = torch.rand(1, 3, 64, 64) * 2 - 1
    assert torch.allclose(m.classifier(x), nets[2](x), atol=1e-5)


def test_wrong_number_of_classes_names_role_path_and_mismatch(cfg, densenet_ckpt):
    d, _ = densenet_ckpt
    path = d / "classifier2.pth"
    c = _cfg(cfg, "celeba", "classifier", weights=str(path), head="1logit", num_outputs=40)
    msg = rf"role 'classifier'.*{path.name}.*2 outputs.*40.*wrong number of classes"
    with pytest.raises(CheckpointError, match=msg):
        load_task_models(c, "celeba_smile", ("classifier",))


def test_wrong_architecture_and_corrupt_file(cfg, densenet_ckpt, tmp_path):
    d, _ = densenet_ckpt
    wrong = tmp_path / "resnet.pth"
    torch.save({"feat_extract": torchvision.models.resnet18(weights=None).state_dict(),
                "classifier": torch.nn.Linear(1024, 40).state_dict()}, wrong)
    c = _cfg(cfg, "celeba", "classifier", weights=str(wrong))
    with pytest.raises(CheckpointError, match=r"role 'classifier'.*resnet\.pth.*missing key"):
        load_task_models(c, "celeba_smile", ("classifier",))
    corrupt = tmp_path / "corrupt.pth"
    corrupt.write_bytes((d / "classifier40.pth").read_bytes()[:5000])
    c = _cfg(cfg, "celeba", "classifier", weights=str(corrupt))
    with pytest.raises(CheckpointError, match=r"role 'classifier'.*corrupt\.pth.*corrupt"):
        load_task_models(c, "celeba_smile", ("classifier",))
    c = _cfg(cfg, "celeba", "classifier", weights=str(corrupt), format="simsiam_official")
    with pytest.raises(CheckpointError, match=r"format.*simsiam_official.*dime_densenet121"):
        load_task_models(c, "celeba_smile", ("classifier",))


def test_ace_oracle_format(cfg, tmp_path):
    torch.manual_seed(0)
    net = ACEOracle().eval()
    path = tmp_path / "oracle.pth"
    torch.save({"feat_extract": net.feat_extract.state_dict(), "classifier": net.classifier.state_dict()}, path)
    m = load_task_models(_cfg(cfg, "celeba", "oracle", weights=str(path)), "celeba_smile", ("oracle",))
    x = torch.rand(1, 3, 32, 32) * 2 - 1
    assert m.oracle.attribute_names == CELEBA_ATTRIBUTES
    assert torch.allclose(m.oracle(x), net(x), atol=1e-5) and m.oracle(x).shape == (1, 40)
    keys = set(net.feat_extract.state_dict())  # the reference module names (BTE / ACE Resnet50_128)
    assert {"conv1_7x7_s2.weight", "conv2_1_1x1_proj_bn.running_mean", "conv5_3_1x1_increase.weight",
            "feat_extract.weight"} <= keys and len([k for k in keys if k.endswith("_bn.weight")]) == 53


def test_facenet_vggface2_format(cfg, tmp_path):
    from facenet_pytorch import InceptionResnetV1

    torch.manual_seed(0)
    net = InceptionResnetV1(pretrained=None, classify=True, num_classes=8631).eval()
    path = tmp_path / "20180402-114759-vggface2.pt"
    torch.save(net.state_dict(), path)  # the released file includes the 8631-way logits
    m = load_task_models(_cfg(cfg, "celeba", "identity", weights=str(path)), "celeba_smile", ("identity",))
    x = torch.rand(2, 3, 64, 64) * 2 - 1
    e = m.identity(x)
    assert e.shape == (2, 512) and torch.allclose(e.norm(dim=1), torch.ones(2), atol=1e-5)
    assert "VGGFace2" in m.names["identity"]


def test_simsiam_official_format(cfg, tmp_path):
    torch.manual_seed(0)
    enc = simsiam_encoder(2048).eval()
    state = {f"module.encoder.{k}": v for k, v in enc.state_dict().items()}
    state.update({"module.predictor.0.weight": torch.zeros(512, 2048), "module.predictor.3.bias": torch.zeros(2048)})
    path = tmp_path / "checkpoint_0099.pth.tar"
    torch.save({"epoch": 100, "arch": "resnet50", "state_dict": state}, path)
    m = load_task_models(_cfg(cfg, "chexpert", "simsiam", weights=str(path)), "chexpert_pacemaker", ("simsiam",))
    x = torch.rand(2, 1, 32, 32) * 2 - 1
    mu, sd = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    ref = enc((((x + 1) / 2).expand(-1, 3, -1, -1) - mu) / sd)
    assert torch.allclose(m.simsiam(x), ref, atol=1e-4) and m.simsiam(x).shape == (2, 2048)


def test_pytorch_fid_inception_format(cfg, tmp_path):
    torch.manual_seed(0)
    net = fid_inception().eval()
    path = tmp_path / "pt_inception-2015-12-05-6726825d.pth"
    torch.save(net.state_dict(), path)
    m = load_task_models(_cfg(cfg, "celeba", "fid_features", weights=str(path)), "celeba_smile", ("fid_features",))
    x = torch.rand(1, 3, 32, 32) * 2 - 1
    f = m.fid_features(x)
    assert f.shape == (1, 2048) and m.names["fid_features"].startswith("inception-v3-pool3 (pytorch-fid weights")
    from cleanfid.inception_pytorch import InceptionV3

    ref = InceptionV3.__new__(InceptionV3)  # pytorch-fid's block wiring around our weights, without a download
    torch.nn.Module.__init__(ref)
    ref.blocks = torch.nn.ModuleList([
        torch.nn.Sequential(net.Conv2d_1a_3x3, net.Conv2d_2a_3x3, net.Conv2d_2b_3x3, torch.nn.MaxPool2d(3, 2)),
        torch.nn.Sequential(net.Conv2d_3b_1x1, net.Conv2d_4a_3x3, torch.nn.MaxPool2d(3, 2)),
        torch.nn.Sequential(net.Mixed_5b, net.Mixed_5c, net.Mixed_5d, net.Mixed_6a, net.Mixed_6b, net.Mixed_6c,
                            net.Mixed_6d, net.Mixed_6e),
        torch.nn.Sequential(net.Mixed_7a, net.Mixed_7b, net.Mixed_7c, torch.nn.AdaptiveAvgPool2d(1))])
    ref.resize_input, ref.normalize_input, ref.output_blocks, ref.last_needed_block = False, False, [3], 3
    xr = torch.nn.functional.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False)
    assert torch.allclose(f, ref(xr)[0].flatten(1), atol=1e-4)


def test_perceptual_vgg19_and_lpips_formats(cfg, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "vgg19.pth"  # torchvision layout; only the features.* keys are read
    torch.save({f"features.{k}": v for k, v in vgg19_features().state_dict().items()}, path)
    m = load_task_models(_cfg(cfg, "celeba", "perceptual", weights=str(path)), "celeba_smile", ("perceptual",))
    x, y = torch.rand(2, 3, 32, 32) * 2 - 1, torch.rand(2, 3, 32, 32) * 2 - 1
    d = m.perceptual(x, y)
    assert d.shape == (2,) and bool((d > 0).all()) and torch.allclose(m.perceptual(x, x), torch.zeros(2))
    alex = tmp_path / "alexnet-owt-7be5be79.pth"
    nn = torch.nn  # torchvision AlexNet ``features`` layout (the loader reads only features.* keys)
    features = nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2), nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(),
        nn.MaxPool2d(3, 2), nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(), nn.Conv2d(384, 256, 3, padding=1),
        nn.ReLU(), nn.Conv2d(256, 256, 3, padding=1))
    torch.save({f"features.{k}": v for k, v in features.state_dict().items()}, alex)
    c = _cfg(cfg, "celeba", "perceptual", weights=str(alex), format="lpips", net="alex")
    m = load_task_models(c, "celeba_smile", ("perceptual",))
    d = m.perceptual(x, y)
    assert d.shape == (2,) and bool((d > 0).all()) and torch.allclose(m.perceptual(x, x), torch.zeros(2))
    assert m.names["perceptual"].startswith("lpips-alex")


def test_uninitialised_networks_load_to_the_same_outputs():
    """A released network built without its random initialisation (meta device, then CPU storage) and loaded
    strictly computes what the normally built one computes; a non-persistent buffer (which no state dict
    restores) makes it build normally, keeping that buffer's value."""
    import torch
    from torch import nn

    from vcebench.models.checkpoints import load_state_strict, uninitialised
    from vcebench.models.released.canonical_nets import ACEOracle, vgg19_features

    torch.manual_seed(0)
    ref = vgg19_features()[:4].eval()
    net = uninitialised(lambda: vgg19_features()[:4]).eval()
    load_state_strict("perceptual", "ref", net, ref.state_dict())
    x = torch.randn(1, 3, 16, 16)
    torch.testing.assert_close(net(x), ref(x), rtol=0, atol=0)

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("scale", torch.tensor(3.0), persistent=False)

    s = uninitialised(Scaled)
    assert s.scale.item() == 3.0 and not s.lin.weight.is_meta
    oracle = uninitialised(ACEOracle)  # its input mean is such a buffer
    torch.testing.assert_close(dict(oracle.named_buffers())["feat_extract.mean"],
                               dict(ACEOracle().named_buffers())["feat_extract.mean"])
