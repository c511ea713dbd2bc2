"""Known-answer tests of the non-FID metrics (hand-computed values in the comments)."""

import math

import numpy as np
import pytest
import torch

from metrics import (
    COUT,
    MAD,
    MNAC,
    CorrelationDifference,
    EvalBatch,
    FaceVerification,
    FlipRate,
    GroundTruth,
    L1Distance,
    MetricError,
    OracleFlipRate,
    SigmaL,
    SimSiamSimilarity,
)
from metrics.cout import cout_scores
from metrics.evaluation import check_same_ids, run_metrics


def batch(x, cf, target=None, flipped=None, label=None, pred=None, gt_cf=None, ids=None):
    n = x.shape[0]
    return EvalBatch(
        x=x, cf=cf, sample_id=torch.arange(n) if ids is None else torch.as_tensor(ids),
        target=torch.ones(n, dtype=torch.long) if target is None else torch.as_tensor(target),
        flipped=torch.ones(n, dtype=torch.bool) if flipped is None else torch.as_tensor(flipped),
        label=torch.zeros(n, dtype=torch.long) if label is None else torch.as_tensor(label),
        pred=None if pred is None else torch.as_tensor(pred), gt_cf=gt_cf)


class ProbClassifier(torch.nn.Module):
    """Analytic 2-class classifier: p(class 1) = q(x) = clamp(a + b * sum(x)); logits = log([1 - q, q])."""

    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x):
        q = (self.a + self.b * x.double().flatten(1).sum(1)).clamp(1e-6, 1 - 1e-6)
        return torch.stack([torch.log1p(-q), torch.log(q)], 1)


class PixelOracle(torch.nn.Module):
    """Dummy oracle: attribute i is 'on' iff pixel i (flattened) is positive; logits = 10 * pixel."""

    def __init__(self, names):
        super().__init__()
        self.attribute_names = list(names)

    def forward(self, x):
        return 10 * x.flatten(1)[:, :len(self.attribute_names)]


class Flatten(torch.nn.Module):
    def forward(self, x):
        return x.flatten(1)


# ------------------------------------------------------------------ COUT
def test_cout_hand_computed_ordering_and_auc():
    # One input, 2 channels, 2 x 2 pixels: HW = 4, step = max(1, 4 // 50) = 1, S = 4 steps.
    # x = 0; cf differences (channel sums) per pixel p0..p3 = 0.1, 0.4, 0.2, 0.3 -> insertion
    # order p1, p3, p2, p0; cumulative inserted sums 0, .4, .7, .9, 1.0.
    # Classifier q = 0.05 + 0.9 * sum -> q_k = .05, .41, .68, .86, .95; f(x) = class 0 (q < .5),
    # so c = 1 - q = .95, .59, .32, .14, .05 and c' = q.
    # AUC(c') = (.05/2 + .41 + .68 + .86 + .95/2) / 4 = 2.45 / 4; AUC(c) = (.475 + 1.05 + .025) / 4 = 1.55 / 4.
    # COUT = (2.45 - 1.55) / 4 = 0.225.
    x = torch.zeros(1, 2, 2, 2)
    cf = torch.tensor([[[[0.05, 0.4], [0.1, 0.1]], [[0.05, 0.0], [0.1, 0.2]]]])
    clf = ProbClassifier(0.05, 0.9)
    assert float(cout_scores(x, cf, clf)) == pytest.approx(0.225, abs=1e-6)
    # Wrong ordering (ascending) would give q_k = .05, .14, .32, .59, .95 -> a different value:
    # (.025 + .14 + .32 + .59 + .475 - (.475 + .86 + .68 + .41 + .025)) / 4 = -0.225.
    m = COUT(clf)
    m.update(batch(x, cf, target=[1], label=[0]))
    assert m.compute()["COUT"] == pytest.approx(0.225, abs=1e-6)


def test_cout_step_convention_uneven_last_step():
    # 11 x 11: HW = 121, step = 121 // 50 = 2, S = ceil(121 / 2) = 61 steps (the last inserts 1 pixel).
    # A constant classifier q = 0.2: c = 0.8, c' = 0.2 at every one of the 62 points, so
    # AUC = 61 * value * step / HW = value * 122 / 121 and COUT = (0.2 - 0.8) * 122 / 121.
    x, cf = torch.zeros(2, 3, 11, 11), torch.rand(2, 3, 11, 11)
    assert cout_scores(x, cf, ProbClassifier(0.2, 0.0)).tolist() == pytest.approx([-0.6 * 122 / 121] * 2)


def test_cout_uses_correctly_classified_subset():
    x = torch.zeros(2, 1, 2, 2)
    cf = torch.full((2, 1, 2, 2), 0.25)  # inserting all 4 pixels: q 0.05 -> 0.95
    clf = ProbClassifier(0.05, 0.9)
    m = COUT(clf)
    m.update(batch(x, cf, label=[0, 1]))  # f(x) = 0: only the first input is correct
    assert m.compute() and m.n["COUT"] == 1


# ------------------------------------------------------------------ oracle: MNAC, CD, FR_oracle
def test_mnac_counts_changed_attributes():
    oracle = PixelOracle(["a", "b", "c"])
    x = torch.tensor([[1., -1, -1, 0], [1, 1, 1, 0], [-1, -1, -1, 0]]).view(3, 1, 2, 2)
    cf = torch.tensor([[-1., 1, -1, 0], [1, 1, 1, 0], [1, 1, 1, 0]]).view(3, 1, 2, 2)
    # changed attributes: 2, 0, 3 -> but the second is not successful -> (2 + 3) / 2
    m = MNAC(oracle)
    m.update(batch(x, cf, flipped=[True, False, True]))
    assert m.compute()["MNAC"] == pytest.approx(2.5)
    assert m.n["MNAC"] == 2


def test_cd_equals_formula_on_constructed_case():
    names = ["q", "a1", "a2", "a3"]
    # Training labels: a1 == q (corr 1), a2 independent of q (corr 0), a3 constant (NaN -> 0).
    train = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]], dtype=np.float32)
    # Oracle deltas over 4 successful CFs: q: +1 +1 -1 -1; a1: +1 0 -1 0; a2, a3: 0.
    # corr_cf: q 1; a1: cov = (1 + 0 + 1 + 0)/4 = .5, var_q = 1, var_a1 = .5 -> .5 / sqrt(.5) = 1/sqrt(2);
    # a2, a3 constant -> 0. CD = |1 - 1| + |1/sqrt2 - 1| + |0 - 0| + |0 - 0| = 1 - 1/sqrt(2).
    xq = torch.tensor([-1., -1, 1, 1])
    cfq = -xq
    xa1 = torch.tensor([-1., -1, 1, -1])
    cfa1 = torch.tensor([1., -1, -1, -1])
    zeros = torch.full((4,), -1.0)
    x = torch.stack([xq, xa1, zeros, zeros], 1).view(4, 1, 2, 2)
    cf = torch.stack([cfq, cfa1, zeros, zeros], 1).view(4, 1, 2, 2)
    m = CorrelationDifference(PixelOracle(names), "q", train, names)
    np.testing.assert_allclose(m.corr_data, [1, 1, 0, 0])
    m.update(batch(x[:2], cf[:2]))
    m.update(batch(x[2:], cf[2:], ids=[2, 3]))
    assert m.compute()["CD"] == pytest.approx(1 - 1 / math.sqrt(2), abs=1e-9)


def test_cd_errors_name_the_problem():
    with pytest.raises(MetricError, match="no training labels"):
        CorrelationDifference(PixelOracle(["q", "zz"]), "q", np.zeros((3, 1)), ["q"])
    with pytest.raises(MetricError, match="query attribute 'smile'"):
        CorrelationDifference(PixelOracle(["q"]), "smile", np.zeros((3, 1)), ["q"])


def test_fr_and_fr_oracle():
    oracle = PixelOracle(["q"])
    x = torch.full((4, 1, 1, 1), -1.0)
    cf = torch.tensor([1., 1., -1., -1.]).view(4, 1, 1, 1)  # oracle says q=1 for the first two
    b = batch(x, cf, target=[1, 1, 1, 0], flipped=[True, True, True, False])
    fr, fro = FlipRate(), OracleFlipRate(oracle, "q")
    fr.update(b)
    fro.update(b)
    assert fr.compute()["FR"] == pytest.approx(75.0)
    # target 1 & oracle 1: rows 0, 1; target 0 & oracle 0: row 3 -> 3 / 4
    assert fro.compute()["FR_oracle"] == pytest.approx(75.0)


# ------------------------------------------------------------------ embeddings, L1, MAD
def test_fva_fs_s3_identical_and_orthogonal():
    e1 = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]]).view(2, 1, 2, 2)
    orth = torch.tensor([[0.0, 3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]).view(2, 1, 2, 2)
    for cf, fs, fva in ((e1.clone(), 1.0, 100.0), (orth, 0.0, 0.0)):
        m, s3 = FaceVerification(Flatten()), SimSiamSimilarity(Flatten())
        b = batch(e1, cf, label=[0, 0])
        m.update(b)
        s3.update(b)
        out = m.compute()
        assert out["FS"] == pytest.approx(fs, abs=1e-9) and out["FVA"] == pytest.approx(fva)
        assert s3.compute()["S3"] == pytest.approx(fs, abs=1e-9)


def test_fva_threshold_is_strict():
    # cosine exactly 0.6 and 0.4 -> one of two above 0.5
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0]]).view(2, 1, 1, 2)
    cf = torch.tensor([[0.6, 0.8], [0.4, math.sqrt(1 - 0.16)]]).view(2, 1, 1, 2)
    m = FaceVerification(Flatten())
    m.update(batch(x, cf))
    out = m.compute()
    assert out["FVA"] == pytest.approx(50.0) and out["FS"] == pytest.approx(0.5)


def test_l1_and_mad_against_numpy():
    g = np.random.default_rng(0)
    xu = g.integers(0, 256, size=(5, 3, 4, 4), dtype=np.uint8)
    cu = g.integers(0, 256, size=(5, 3, 4, 4), dtype=np.uint8)
    x, cf = torch.from_numpy(xu).float() / 127.5 - 1, torch.from_numpy(cu).float() / 127.5 - 1
    l1 = L1Distance()
    l1.update(batch(x, cf))
    expect = np.abs(xu.astype(np.float64) / 255 - cu.astype(np.float64) / 255).mean()
    assert l1.compute()["L1"] == pytest.approx(expect, rel=1e-6)

    clf = ProbClassifier(0.5, 0.002)
    p = lambda a: np.clip(0.5 + 0.002 * a.reshape(5, -1).astype(np.float64).sum(1), 1e-6, 1 - 1e-6)  # noqa: E731
    mad = MAD(clf)
    mad.update(batch(x, cf))
    assert mad.compute()["MAD"] == pytest.approx(np.abs(p(x.numpy()) - p(cf.numpy())).mean(), rel=1e-6)


# ------------------------------------------------------------------ ground truth
def test_ground_truth_metrics_constructed():
    # 1 x 2 x 2 images. x = -1 everywhere; gt changes pixels 0, 1 to +1; the CF changes pixels 1, 2
    # (pixel 1 to +1, pixel 2 to 0). Region R = {0, 1}; CF-changed = {1, 2}.
    # precision = |{1}| / 2 = .5; recall = 1 / 2 = .5.
    # GT_L1 ([0, 1] units): |cf - gt| / 2 = [1, 0, .5, 0] -> mean .375; in R: (1 + 0) / 2 = .5.
    # Input: |x - gt| / 2 = [1, 1, 0, 0] -> .5; in R: 1.
    x = torch.full((1, 1, 2, 2), -1.0)
    gt = torch.tensor([1.0, 1.0, -1.0, -1.0]).view(1, 1, 2, 2)
    cf = torch.tensor([-1.0, 1.0, 0.0, -1.0]).view(1, 1, 2, 2)
    m = GroundTruth(threshold=0.05)
    m.update(batch(x, cf, gt_cf=gt))
    out = m.compute()
    assert out["GT_precision"] == pytest.approx(0.5) and out["GT_recall"] == pytest.approx(0.5)
    assert out["GT_L1"] == pytest.approx(0.375) and out["GT_L1_region"] == pytest.approx(0.5)
    assert out["GT_L1_input"] == pytest.approx(0.5) and out["GT_L1_region_input"] == pytest.approx(1.0)
    # perfect CF: 0 error, precision = recall = 1
    m = GroundTruth()
    m.update(batch(x, gt.clone(), gt_cf=gt))
    out = m.compute()
    assert out["GT_L1"] == 0 and out["GT_precision"] == 1 and out["GT_recall"] == 1


def test_ground_truth_needs_gt_and_skips_misclassified():
    x = torch.zeros(2, 1, 2, 2)
    with pytest.raises(MetricError, match="ground-truth counterfactuals"):
        GroundTruth().update(batch(x, x))
    m = GroundTruth()
    m.update(batch(x, x + 0.5, gt_cf=x + 0.5, label=[0, 1]))  # f(x) = 1 - target = 0: only row 0 correct
    m.compute()
    assert m.n["GT_L1"] == 1


# ------------------------------------------------------------------ checks, subsets, sigma_L
def test_shape_and_id_checks():
    with pytest.raises(MetricError, match="aligned one to one"):
        batch(torch.zeros(2, 1, 2, 2), torch.zeros(3, 1, 2, 2))
    with pytest.raises(MetricError, match="different sample ids"):
        check_same_ids(np.array([1, 2, 3]), np.array([1, 2, 4]))
    check_same_ids(np.array([3, 1, 2]), np.array([1, 2, 3]))
    with pytest.raises(MetricError, match="label -1"):
        batch(torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1), label=[-1]).subset("correct")


def test_run_metrics_skips_with_reason_and_rejects_duplicates():
    x = torch.zeros(3, 1, 2, 2)
    mnac = MNAC(PixelOracle(["q"]))
    out = run_metrics([FlipRate(), mnac], [batch(x, x, flipped=[False] * 3)])
    assert out["metrics"]["FR"] == 0.0 and out["n"]["FR"] == 3
    assert out["metrics"]["MNAC"] is None and "MNAC needs at least 1" in out["skipped"]["MNAC"]
    assert out["subsets"]["MNAC"] == "successful" and out["subsets"]["sizes"]["successful"] == 0
    with pytest.raises(MetricError, match="duplicate sample ids"):
        run_metrics([FlipRate()], [batch(x, x), batch(x, x)])
    with pytest.raises(MetricError, match="MNAC needs at least 1 sample"):
        run_metrics([MNAC(PixelOracle(["q"]))], [batch(x, x, flipped=[False] * 3)], strict=True)


def test_sigma_l_mean_pairwise_distance():
    l1 = lambda a, b: (a - b).abs().flatten(1).mean(1)  # noqa: E731
    x = torch.zeros(2, 1, 1, 1)
    seeds = torch.tensor([0.0, 0.2, 0.6]).view(3, 1, 1, 1, 1).expand(3, 2, 1, 1, 1)
    b = batch(x, x)
    b.extra["cf_seeds"] = seeds
    m = SigmaL(l1)
    m.update(b)
    assert m.compute()["sigma_L"] == pytest.approx((0.2 + 0.6 + 0.4) / 3)


def _cout_reference_transcription(imgs, cfs, model):
    """ACE eval_utils/cout_metrics.py `calculate_cout` (binary=False branch with softmax over 2 logits),
    transcribed loop for loop: min-max normalised abs mask, argsort, cumulative insertion, trapezoid."""
    n, _, h, w = imgs.shape
    step = max(1, (h * w) // 50)
    masks = (cfs - imgs).view(n, imgs.shape[1], -1).abs().sum(1)
    masks = masks - masks.min(1, keepdim=True)[0]
    masks = masks / masks.max(1, keepdim=True)[0]
    label = model(imgs).argmax(1)
    probs = lambda im: torch.softmax(model(im).double(), 1)  # noqa: E731
    l_ = torch.arange(n)
    c_curve, cp_curve = [probs(imgs)[l_, label]], [1 - probs(imgs)[l_, label]]
    num_pixels = h * w
    cur_mask = torch.zeros(n, num_pixels)
    elements = torch.argsort(masks, dim=1, descending=True)
    for pixels in range(0, num_pixels, step):
        indices = elements[l_, pixels:pixels + step].view(n, -1)
        cur_mask[l_, indices.permute(1, 0)] = 1
        up = cur_mask.view(-1, 1, h, w)
        pr = probs(cfs * up + imgs * (1 - up))
        c_curve.append(pr[l_, label])
        cp_curve.append(1 - pr[l_, label])
    auc = lambda c: (c[0] / 2 + sum(c[1:-1]) + c[-1] / 2) * step / (h * w)  # noqa: E731
    return auc(cp_curve) - auc(c_curve)


def test_cout_matches_reference_transcription_with_sparse_edits():
    g = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, 2, 1), torch.nn.Tanh(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 6 * 6, 2)).double()
    x = torch.rand(5, 3, 12, 12, generator=g, dtype=torch.float64) * 2 - 1
    cf = x.clone()
    cf[:, :, 2:7, 3:9] += torch.rand(5, 3, 5, 6, generator=g, dtype=torch.float64)  # 30 of 144 pixels edited
    cf[4] = x[4] + torch.rand(3, 12, 12, generator=g, dtype=torch.float64) * 0.3  # dense edit
    expect = _cout_reference_transcription(x, cf, net)
    np.testing.assert_allclose(cout_scores(x, cf, net).numpy(), expect.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_flip_rate_counts_the_class_the_classifier_reads_each_input_and_counterfactual_as():
    """f(x) = 1 - y'; f(cf) = y' where it flipped, else f(x). A regeneration reads every counterfactual as one
    class whatever the input: the inputs of the other class flip, the rest cannot."""
    x = torch.zeros(5, 1, 2, 2)
    fr = FlipRate()
    run_metrics([fr], [batch(x, x, target=[1, 1, 0, 0, 0], flipped=[True, True, False, False, True])])
    assert fr.record == {"classifier_reads": {"inputs": [2, 3], "counterfactuals": [1, 4]}}
    regen = FlipRate()
    out = run_metrics([regen], [batch(x[:4], x[:4], target=[1, 1, 0, 0], flipped=[True, True, False, False])])
    assert regen.record["classifier_reads"] == {"inputs": [2, 2], "counterfactuals": [0, 4]}
    assert out["metrics"]["FR"] == 50.0  # the share of inputs of the other class, no flip of anything
    many = FlipRate()
    run_metrics([many], [batch(x[:2], x[:2], target=[2, 0], flipped=[True, False])])
    assert many.record == {}  # more than two classes: not counted
