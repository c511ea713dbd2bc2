"""FID / sFID: parity with clean-fid and torchmetrics, invariants, streaming, seeded splits."""

import numpy as np
import pytest
import torch

from metrics import FID, SFID, EvalBatch, FeatureStats, FIDReference, MetricError, frechet_distance
from metrics.base import InsufficientSamples
from metrics.fid import fid_from_stats, sfid_halves


def _feats(n, d, seed, shift=0.0):
    g = np.random.default_rng(seed)
    a = g.normal(size=(d, d)) / np.sqrt(d)
    return g.normal(size=(n, d)) @ a + shift


class Project(torch.nn.Module):
    """Dummy feature extractor: a fixed random projection of the flattened image (no weights to download)."""

    def __init__(self, in_dim, d=8, seed=0):
        super().__init__()
        self.w = torch.randn(in_dim, d, generator=torch.Generator().manual_seed(seed))

    def forward(self, x):
        return torch.tanh(x.flatten(1) @ self.w)


def _batch(x, cf, ids, flipped):
    n = x.shape[0]
    return EvalBatch(x=x, cf=cf, sample_id=torch.as_tensor(ids), target=torch.ones(n, dtype=torch.long),
                     flipped=torch.as_tensor(flipped), label=torch.zeros(n, dtype=torch.long))


def test_frechet_matches_cleanfid_and_torchmetrics():
    from cleanfid.fid import frechet_distance as clean_fd
    from torchmetrics.image.fid import _compute_fid

    a, b = _feats(400, 24, 0), _feats(300, 24, 1, shift=0.3)
    mu1, s1 = a.mean(0), np.cov(a, rowvar=False)
    mu2, s2 = b.mean(0), np.cov(b, rowvar=False)
    ours = frechet_distance(mu1, s1, mu2, s2)
    ref_clean = clean_fd(mu1, s1, mu2, s2)
    ref_tm = float(_compute_fid(*(torch.from_numpy(v) for v in (mu1, s1, mu2, s2))))
    assert ours > 1.0
    assert ours == pytest.approx(ref_clean, rel=1e-6)
    assert ours == pytest.approx(ref_tm, rel=1e-6)
    assert frechet_distance(mu1, s1, mu2, s2, method="eigvals") == pytest.approx(ref_clean, rel=1e-6)
    with pytest.raises(MetricError, match="frechet_method"):
        frechet_distance(mu1, s1, mu2, s2, method="svd")
    # and through our streamed statistics
    streamed = fid_from_stats(FeatureStats().update(a[:150]).update(a[150:]), FeatureStats().update(b))
    assert streamed == pytest.approx(ref_clean, rel=1e-6)


def test_streaming_and_merge_equal_one_shot():
    a = _feats(257, 10, 3, shift=5.0)  # a large mean stresses the sum-of-outer-products formula
    one = FeatureStats().update(a)
    shards = [FeatureStats().update(a[i:i + 50]) for i in range(0, 257, 50)]
    merged = FeatureStats()
    for s in shards:
        merged.merge(s)
    mu, cov = merged.mean_cov()
    np.testing.assert_allclose(mu, a.mean(0), rtol=1e-12)
    np.testing.assert_allclose(cov, np.cov(a, rowvar=False), rtol=1e-9, atol=1e-12)
    assert merged.n == one.n == 257
    rt = FeatureStats.from_arrays(merged.to_arrays("p_"), "p_")
    np.testing.assert_array_equal(rt.outer, merged.outer)


def test_fid_of_a_set_with_itself_is_zero_and_shift_is_not():
    a = _feats(300, 12, 4)
    s = FeatureStats().update(a)
    assert abs(fid_from_stats(s, s)) < 1e-6
    shifted = FeatureStats().update(a + 1.0)
    assert fid_from_stats(s, shifted) == pytest.approx(12.0, rel=1e-6)  # ||mu shift||^2 = 12 * 1^2


def test_fid_metric_streams_over_successful_subset_and_uses_reference():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(40, 1, 4, 4, generator=g) * 2 - 1
    cf = (x + 0.3).clamp(-1, 1)
    ids = torch.arange(100, 140)
    flipped = torch.arange(40) % 4 != 0
    net = Project(16)
    m = FID(net)
    for i in range(0, 40, 16):
        m.update(_batch(x[i:i + 16], cf[i:i + 16], ids[i:i + 16], flipped[i:i + 16]))
    val = m.compute()["FID"]
    expect = fid_from_stats(FeatureStats().update(net(x)), FeatureStats().update(net(cf[flipped])))
    assert val == pytest.approx(expect, rel=1e-9)
    assert m.n["FID"] == 30 and m.n["FID_originals"] == 40
    # the same through precomputed reference features, stored and reloaded
    ref = FIDReference(ids.numpy(), net(x).numpy(), "proj")
    m2 = FID(net, reference=ref, extractor="proj")
    m2.update(_batch(x, cf, ids, flipped))
    assert m2.compute()["FID"] == pytest.approx(expect, rel=1e-5)
    with pytest.raises(MetricError, match="feature extractor"):
        FID(net, reference=ref, extractor="inception")


def test_fid_reference_roundtrip_and_missing_ids(tmp_path):
    feats = _feats(10, 4, 0).astype(np.float32)
    ref = FIDReference(np.arange(10), feats, "proj")
    ref.save(tmp_path / "ref.npz")
    back = FIDReference.load(tmp_path / "ref.npz")
    assert back.extractor == "proj"
    np.testing.assert_array_equal(back.lookup(np.array([3, 1])), feats[[3, 1]])
    with pytest.raises(MetricError, match="lacks 1 of the explained sample ids"):
        back.lookup(np.array([1, 99]))
    with pytest.raises(FileNotFoundError, match="--reference"):
        FIDReference.load(tmp_path / "nope.npz")


def test_fid_needs_two_samples():
    x = torch.zeros(3, 1, 2, 2)
    m = FID(Project(4))
    m.update(_batch(x, x, [0, 1, 2], [True, False, False]))
    with pytest.raises(InsufficientSamples, match="at least 2 sample"):
        m.compute()


def test_sfid_halves_seeded():
    ids = np.arange(11) * 7
    h1, h2 = sfid_halves(ids, 0)
    assert len(h1) == len(h2) == 5 and not set(h1) & set(h2)
    a1, a2 = sfid_halves(ids[::-1], 0)  # order of arrival does not matter
    np.testing.assert_array_equal(h1, a1)
    np.testing.assert_array_equal(h2, a2)
    assert not np.array_equal(sfid_halves(ids, 1)[0], h1)


def test_sfid_deterministic_and_matches_direct_computation():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(60, 1, 4, 4, generator=g) * 2 - 1
    cf = (x * 0.5 + 0.2).clamp(-1, 1)
    ids = torch.arange(60)
    flipped = torch.ones(60, dtype=torch.bool)
    net = Project(16, d=4)

    def run(bs, seeds):
        m = SFID(net, seeds)
        for i in range(0, 60, bs):
            m.update(_batch(x[i:i + bs], cf[i:i + bs], ids[i:i + bs], flipped[i:i + bs]))
        return m.compute()

    r1, r2 = run(60, [0, 1, 2]), run(7, [0, 1, 2])
    assert r1["sFID"] == pytest.approx(r2["sFID"], rel=1e-9)
    assert r1["sFID_std"] > 0
    fx, fc = net(x).double().numpy(), net(cf).double().numpy()
    h1, h2 = sfid_halves(ids.numpy(), 0)
    direct = 0.5 * (fid_from_stats(FeatureStats().update(fx[h1]), FeatureStats().update(fc[h2]))
                    + fid_from_stats(FeatureStats().update(fx[h2]), FeatureStats().update(fc[h1])))
    assert run(60, [0])["sFID"] == pytest.approx(direct, rel=1e-9)
