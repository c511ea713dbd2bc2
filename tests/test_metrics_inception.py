"""FID features from a pytorch-fid Inception weights file equal clean-fid's `legacy_pytorch` features.

A random-weight FID Inception is saved in the canonical format (a pytorch-fid state dict, no
download) and read through `vcebench.models.released.canonical`; clean-fid's own extractor gets the same
file in place of its download. Inputs are uint8 images as on disk: ours go in as [-1, 1] at
32 x 32 (the wrapper resizes), clean-fid's as [0, 255] resized with its `legacy_pytorch` resizer.
"""

import numpy as np
import pytest
import torch


@pytest.mark.slow
def test_inception_features_match_cleanfid_legacy_pytorch(tmp_path, monkeypatch):
    import cleanfid.inception_pytorch as ip
    from cleanfid.features import feature_extractor
    from cleanfid.resize import make_resizer

    from vcebench.config.load import load_config
    from vcebench.config.tasks import get_task
    from vcebench.core.io import from_uint8
    from vcebench.models.released.canonical import load_canonical
    from vcebench.models.released.canonical_nets import fid_inception

    torch.manual_seed(0)
    path = tmp_path / "pt_inception-2015-12-05-6726825d.pth"
    torch.save(fid_inception().state_dict(), path)
    task = get_task(load_config(), "celeba_smile")
    ours, name = load_canonical("fid_features", {"format": "pytorch_fid_inception", "weights": str(path)}, task,
                                "models.celeba.fid_features")
    ours.eval()

    monkeypatch.setattr(ip, "load_state_dict_from_url", lambda *a, **k: torch.load(path, weights_only=True))
    theirs = feature_extractor("pytorch_inception", device=torch.device("cpu"), use_dataparallel=False)
    resize = make_resizer("PyTorch", False, "bilinear", (299, 299))

    imgs = np.random.default_rng(0).integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8)  # H W C, as PNGs
    with torch.no_grad():
        f_ours = ours(from_uint8(imgs.transpose(0, 3, 1, 2))).double().numpy()
        batch = torch.from_numpy(np.stack([resize(im) for im in imgs]).transpose(0, 3, 1, 2).copy())
        f_theirs = theirs(batch).double().numpy()
    assert f_ours.shape == f_theirs.shape == (3, 2048)
    assert np.abs(f_theirs).max() > 0
    np.testing.assert_allclose(f_ours, f_theirs, rtol=1e-4, atol=1e-5 * np.abs(f_theirs).max())
