"""Bootstrap intervals (coverage, weighting, determinism) and KID (reference parity, bias, subsets)."""

import numpy as np
import pytest
import torch

from metrics import FID, KID, SFID, FlipRate, frechet_distance
from metrics.bootstrap import Resamples, Samples, percentile_interval, resample_counts, weighted_means
from metrics.evaluation import run_metrics
from metrics.fid import weighted_frechet
from metrics.kid import kid, mmd2_unbiased, polynomial_kernel, weighted_mmd2
from tests.fakes import eval_batches


def test_resample_counts_sum_to_n_and_are_seeded():
    c = resample_counts(7, 50, seed=3)
    assert c.shape == (50, 7) and (c.sum(1) == 7).all() and (c >= 0).all()
    assert (c == resample_counts(7, 50, seed=3)).all()
    assert not (c == resample_counts(7, 50, seed=4)).all()


def test_percentile_bootstrap_covers_a_known_mean_at_the_nominal_rate():
    """200 data sets of n = 50 normal draws (mean 1.5): the 95 % interval covers 1.5 in 90-99 % of them."""
    rng = np.random.default_rng(0)
    ids = np.arange(50)
    covered = 0
    for rep in range(200):
        s = Samples()
        s.add(torch.as_tensor(ids), torch.as_tensor(rng.normal(1.5, 2.0, size=50)))
        lo, hi = percentile_interval(weighted_means(s, Resamples.draw(ids, 1000, seed=rep)))
        covered += lo <= 1.5 <= hi
    assert 0.90 <= covered / 200 <= 0.99


def test_weighted_means_follow_the_subset_of_the_drawn_inputs():
    """A subset metric over rows {1, 3}: the resample's value averages only the drawn rows of the subset."""
    s = Samples()
    s.add(torch.tensor([1, 3]), torch.tensor([10.0, 20.0]))
    r = Resamples(np.arange(5), np.array([[1, 2, 0, 1, 1], [3, 0, 2, 0, 0], [1, 1, 1, 1, 1]]))
    v = weighted_means(s, r)
    assert v[0] == pytest.approx((2 * 10 + 1 * 20) / 3)
    assert np.isnan(v[1])  # neither subset row drawn
    assert v[2] == pytest.approx(15.0)
    assert percentile_interval(v, min_valid=0.9) is None  # a third of the resamples undefined


def test_resamples_reject_unknown_ids():
    with pytest.raises(ValueError, match="not among the explained inputs"):
        Resamples.draw([1, 2, 3], 4, 0).weights([2, 9])


def test_weighted_frechet_all_ones_equals_frechet_distance():
    g = np.random.default_rng(1)
    a, b = g.normal(size=(60, 6)), g.normal(size=(40, 6)) * 1.3 + 0.4
    ref = frechet_distance(a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False))
    got = weighted_frechet(a, np.ones((1, 60)), b, np.ones((1, 40)))
    assert got[0] == pytest.approx(ref, rel=1e-8)


def test_weighted_frechet_counts_equal_repeated_rows():
    """Counts (2, 0, 1, ...) give the FID of the multiset that repeats the rows: the bootstrap's definition."""
    g = np.random.default_rng(2)
    a, b = g.normal(size=(12, 4)), g.normal(size=(9, 4)) + 0.5
    wa, wb = g.integers(0, 3, size=12), g.integers(0, 3, size=9)
    wa[:2], wb[:2] = 1, 1  # at least 2 rows each
    ra, rb = np.repeat(a, wa, axis=0), np.repeat(b, wb, axis=0)
    ref = frechet_distance(ra.mean(0), np.cov(ra, rowvar=False), rb.mean(0), np.cov(rb, rowvar=False), eps=0)
    assert weighted_frechet(a, wa[None].astype(float), b, wb[None].astype(float))[0] == pytest.approx(ref, rel=1e-6)


# --- KID -----------------------------------------------------------------------------------------

def test_kid_matches_torchmetrics_and_cleanfid_when_subsets_are_the_whole_sets():
    from cleanfid.fid import kernel_distance
    from torchmetrics.image.kid import poly_mmd

    g = np.random.default_rng(3)
    a, b = g.normal(size=(80, 16)), g.normal(size=(80, 16)) + 0.3
    ours, std = kid(a, b)
    assert std == 0.0
    assert ours == pytest.approx(float(poly_mmd(torch.from_numpy(a), torch.from_numpy(b))), rel=1e-9)
    assert ours == pytest.approx(kernel_distance(a, b, num_subsets=3, max_subset_size=1000), rel=1e-9)


def _moments(a):
    return a, a * a + 1, a ** 3 + 3 * a  # E X, E X^2, E X^3 of N(a, 1)


def _exact_mmd2_1d(a, b):
    """MMD^2 of N(a, 1) and N(b, 1) under k(x, y) = (x y + 1)^3 = x^3 y^3 + 3 x^2 y^2 + 3 x y + 1 (D = 1)."""
    def ek(p, q):
        (p1, p2, p3), (q1, q2, q3) = _moments(p), _moments(q)
        return p3 * q3 + 3 * p2 * q2 + 3 * p1 * q1 + 1
    return ek(a, a) + ek(b, b) - 2 * ek(a, b)


def test_kid_is_unbiased_on_a_known_gaussian_example():
    """n = 8 per set, 4000 repetitions: the mean KID is the exact MMD^2 (the biased V-statistic is not)."""
    rng = np.random.default_rng(4)
    exact = _exact_mmd2_1d(0.0, 0.5)
    ours, vstat = [], []
    for _ in range(4000):
        x, y = rng.normal(0.0, 1.0, (8, 1)), rng.normal(0.5, 1.0, (8, 1))
        ours.append(kid(x, y)[0])
        kxx, kyy, kxy = polynomial_kernel(x, x), polynomial_kernel(y, y), polynomial_kernel(x, y)
        vstat.append(kxx.mean() + kyy.mean() - 2 * kxy.mean())
    se = np.std(ours) / np.sqrt(len(ours))
    assert abs(np.mean(ours) - exact) < 3 * se
    assert np.mean(vstat) - exact > 10 * se


def test_kid_of_a_set_against_itself_resampled_is_near_zero_and_a_shift_is_positive():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(100, 32))
    same = [kid(x, x[rng.integers(0, 100, 100)])[0] for _ in range(50)]
    other = [kid(rng.normal(size=(100, 32)), rng.normal(size=(100, 32)))[0] for _ in range(50)]
    shifted = kid(x, rng.normal(size=(100, 32)) + 0.5)[0]
    assert abs(np.mean(other)) < 3 * np.std(other) / np.sqrt(50)  # independent sets of one law: 0 on average
    assert np.max(np.abs(same)) < 0.2 * shifted and shifted > 0
    assert kid(x, x)[0] <= 0  # the unbiased estimate of a set against itself is -O(1/n)


def test_kid_subsets_when_a_set_exceeds_subset_size():
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(300, 8)), rng.normal(size=(200, 8)) + 0.4
    full = kid(x, y)[0]
    v1, s1 = kid(x, y, subsets=50, subset_size=100, seed=1)
    assert s1 > 0 and v1 == kid(x, y, subsets=50, subset_size=100, seed=1)[0]
    assert abs(v1 - full) < 4 * s1 / np.sqrt(50)


def test_weighted_mmd2_all_ones_equals_the_estimator_and_ignores_duplicate_pairs():
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(10, 3)), rng.normal(size=(7, 3))
    kxx, kyy, kxy = polynomial_kernel(x, x), polynomial_kernel(y, y), polynomial_kernel(x, y)
    w = weighted_mmd2(kxx, kyy, kxy, np.ones((1, 10)), np.ones((1, 7)))
    assert w[0] == pytest.approx(mmd2_unbiased(kxx, kyy, kxy))
    # doubling every count changes nothing: pairs of two draws of one input are left out
    w2 = weighted_mmd2(kxx, kyy, kxy, 2 * np.ones((1, 10)), 2 * np.ones((1, 7)))
    assert w2[0] == pytest.approx(w[0])


# --- end to end through run_metrics ------------------------------------------------------------

class Project(torch.nn.Module):
    def __init__(self, d=6):
        super().__init__()
        self.w = torch.randn(3 * 4 * 4, d, generator=torch.Generator().manual_seed(0))

    def forward(self, x):
        return x.flatten(1) @ self.w


def _batches(n=40, bs=16, seed=0):
    return eval_batches(n, bs, seed=seed, p_flip=0.7, id_offset=100)


def test_run_metrics_writes_an_interval_around_every_value():
    net = Project()
    metrics = [FlipRate(), FID(net), SFID(net, [0, 1]), KID(net)]
    out = run_metrics(metrics, _batches(), bootstrap={"resamples": 300, "feature_resamples": 100, "seed": 1})
    for k in ("FR", "KID"):
        lo, hi = out["intervals"][k]
        assert lo <= out["metrics"][k] <= hi and lo < hi, k
    for k in ("FID", "sFID"):  # a resample repeats rows, which raises FID's small-n bias: the interval may lie
        lo, hi = out["intervals"][k]  # above the value (docs/results.md), but it is there and not degenerate
        assert np.isfinite([lo, hi]).all() and 0 < lo < hi, k
    assert "sFID_std" not in out["intervals"]
    assert out["bootstrap"]["resamples"] == 300 and out["bootstrap"]["n_inputs"] == 40
    again = run_metrics([FlipRate(), FID(net), SFID(net, [0, 1]), KID(net)], _batches(bs=7),
                        bootstrap={"resamples": 300, "feature_resamples": 100, "seed": 1})
    for k, v in out["intervals"].items():  # batch size does not matter (float32 features: rounding only)
        assert again["intervals"][k] == pytest.approx(v, rel=1e-5), k
    off = run_metrics([FlipRate()], _batches(), bootstrap={"resamples": 0})
    assert "intervals" not in off


def test_kept_resamples_are_the_same_draws_for_every_metric_and_every_run():
    """``keep_resamples`` (the tuner's pick stability): each output's value in each resample, the feature metrics'
    fewer resamples being the first rows of the same count matrix, so resample b is one draw for FR and KID alike
    and for every setting scored on the same inputs (paired); FR's values are the weighted flip means."""
    net = Project()
    cfg = {"resamples": 60, "feature_resamples": 20, "seed": 1}
    out = run_metrics([FlipRate(), KID(net)], _batches(), bootstrap=cfg, keep_resamples=True)
    assert len(out["resampled"]["FR"]) == 60 and len(out["resampled"]["KID"]) == 20
    flips = torch.cat([b.flipped for b in _batches()]).double().numpy() * 100
    w = resample_counts(40, 60, seed=1)
    assert out["resampled"]["FR"] == pytest.approx((w @ flips / w.sum(1)).tolist())
    assert "resampled" not in run_metrics([FlipRate()], _batches(), bootstrap=cfg)
    head = run_metrics([FlipRate(), KID(net)], _batches(), bootstrap={**cfg, "resamples": 20}, keep_resamples=True)
    assert head["resampled"]["FR"] == out["resampled"]["FR"][:20]  # the first 20 draws are the same draws
    assert head["resampled"]["KID"] == pytest.approx(out["resampled"]["KID"], rel=1e-6)
