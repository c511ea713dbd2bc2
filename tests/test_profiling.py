"""vcebench.costs.measure, vcebench.paper.scale and `vcebench profile` (over 400 lines: one cost model, measured
three ways, shares its tiny networks and analytic counts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods.base import Counterfactuals
from vcebench.costs.measure import (
    conv2d_flops,
    count_flops,
    linear_flops,
    nfe_by_network,
    nfe_total,
    profile_run,
)

ROOT = Path(__file__).resolve().parents[1]


class TinyConvNet(nn.Module):
    """conv 3->8 (3x3, pad 1) on 8x8, ReLU, conv 8->4 (3x3, stride 2, pad 1) -> 4x4, linear 64 -> 5."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 4, 3, stride=2, padding=1)
        self.fc = nn.Linear(64, 5)

    def forward(self, x):
        return self.fc(F.relu(self.c2(F.relu(self.c1(x)))).flatten(1))


def analytic_forward(batch: int) -> int:
    # By hand: c1 = 2*B*8*8*8*3*9 = 27648 B, c2 = 2*B*4*4*4*8*9 = 9216 B, fc = 2*B*64*5 = 640 B.
    return batch * (27648 + 9216 + 640)


def test_conv_net_flops_equal_analytic_count():
    net = TinyConvNet().requires_grad_(False)
    x = torch.randn(2, 3, 8, 8)
    _, fc = count_flops(net, x)
    assert fc.total == analytic_forward(2)
    assert conv2d_flops(3, 8, 3, 8, 8, batch=2) + conv2d_flops(8, 4, 3, 4, 4, batch=2) \
        + linear_flops(64, 5, batch=2) == analytic_forward(2)

    # Backward to the input only (frozen weights): every layer's input gradient costs its forward.
    def fwd_bwd():
        xg = x.clone().requires_grad_(True)
        net(xg).sum().backward()

    _, both = count_flops(fwd_bwd)
    assert both.total == 2 * analytic_forward(2)


def test_attention_is_counted_with_math_backend():
    b, h, length, d = 2, 3, 16, 8
    q, k, v = (torch.randn(b, h, length, d) for _ in range(3))
    _, fc = count_flops(F.scaled_dot_product_attention, q, k, v)
    assert fc.total == 2 * (2 * b * h * length * length * d)  # QK^T and AV


def test_nfe_by_network_aggregates_means_and_rejects_bad_keys():
    info = {"nfe_classifier_fwd": torch.tensor([3.0, 5.0]), "nfe_classifier_bwd": torch.tensor([2.0, 4.0]),
            "nfe_pmf_fwd": torch.tensor([1.0, 2.0]), "failed": torch.tensor([False, False])}
    nets = nfe_by_network(info)
    assert nets == {"classifier": {"fwd": 4.0, "bwd": 3.0}, "pmf": {"fwd": 1.5, "bwd": 0.0}}
    assert nfe_total(nets) == 5.5
    with pytest.raises(ValueError, match="nfe_<network>"):
        nfe_by_network({"nfe_classifier": torch.zeros(1)})


# PeakMemory measures the RSS *increase*: in a long-lived process (the test session) an allocation can
# reuse pages that earlier tests freed but the allocator kept resident, so the tests measure in a fresh
# interpreter, as `vcebench profile` does.
_PEAK_SCRIPT = """
import sys, time, torch
import vcebench.costs.measure as profiling
if sys.argv[1] == "sampling":
    profiling._reset_rss_peak = lambda: False
with profiling.PeakMemory("cpu", interval=0.001) as mem:
    big = torch.ones(64, 1024, 1024)  # 256 MiB, touched
    big += 1
    if sys.argv[1] == "sampling":
        time.sleep(0.2)  # held long enough for the sampling thread to see it
    del big
print(mem.kind, mem.peak_mb, mem._hwm)
"""


@pytest.mark.parametrize("how", ["hwm", "sampling"])
def test_peak_memory_sees_a_large_cpu_allocation(how):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, how], capture_output=True, text=True, check=True)
    kind, peak_mb, hwm = out.stdout.split()
    assert kind == "cpu_peak_rss_increase"
    assert 200 < float(peak_mb) < 400, out.stdout
    if how == "sampling":
        assert hwm == "False"


class FakeMethod:
    """Sample i runs ``i % 3 + 1`` batched classifier calls (its "steps"), counted like methods/ do."""

    def __init__(self):
        self.net = TinyConvNet().requires_grad_(False)

    def __call__(self, x, target, ids):
        steps = torch.tensor([int(i) % 3 + 1 for i in ids])
        count = torch.zeros(len(x))
        for s in range(int(steps.max())):
            rows = torch.nonzero(steps > s).flatten()  # compaction: finished rows leave the batch
            self.net(x[rows])
            count[rows] += 1
        return Counterfactuals(images=x.clone(), flipped=steps > 1, steps=steps,
                               info={"nfe_classifier_fwd": count, "failed": torch.zeros(len(x), dtype=torch.bool)})


def test_profile_run_aggregates_flops_nfe_and_steps():
    x = torch.randn(5, 3, 8, 8)
    ids = [10, 11, 12, 13, 14]  # steps 2, 3, 1, 2, 3
    r = profile_run(FakeMethod(), x, torch.zeros(5, dtype=torch.long), ids, batch_size=2)
    assert r["mean_steps"] == pytest.approx(11 / 5)
    assert r["nfe_by_network"] == {"classifier": {"fwd": pytest.approx(11 / 5), "bwd": 0.0}}
    assert r["nfe_per_cf"] == pytest.approx(11 / 5)
    assert r["flops_per_cf"] == pytest.approx(analytic_forward(1) * 11 / 5)
    assert r["steps_histogram"] == {1: 1, 2: 2, 3: 2}
    assert r["flip_rate"] == pytest.approx(4 / 5)
    assert r["batch_size"] == 2 and r["n"] == 5 and r["sec_per_cf"] > 0
    # FLOPs on a subset: stated, and per CF over that subset only (steps 2 and 3).
    r2 = profile_run(FakeMethod(), x, torch.zeros(5, dtype=torch.long), ids, batch_size=2, flop_n=2)
    assert r2["flop_n"] == 2 and r2["flops_per_cf"] == pytest.approx(analytic_forward(1) * 5 / 2)


# --------------------------------------------------------------------------- the real methods


def _fire_params(cfg, **over):
    from vcebench.protocol.noise import resolve_method

    p = resolve_method(cfg, "synthfaces_smile", "fire")[0]
    p.update({"K": 3, "smoothgrad_n": 4, **over})
    return p


def test_fire_profile_on_tiny_models_matches_algorithm_nfe(cfg):
    from methods import get_method
    from vcebench.core.rng import SampleGenerators
    from vcebench.costs.standins import tiny_standins
    from vcebench.paper.nfe import fire_nfe

    models = tiny_standins()
    method = get_method("fire", _fire_params(cfg))
    x = torch.rand(3, 3, 8, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    target = 1 - models.classifier(x).argmax(1)

    def call(xb, tb, idb):
        return method(xb, tb, models, SampleGenerators(0, idb))

    r = profile_run(call, x, target, [0, 1, 2], batch_size=2)
    expected = {k: v for k, v in fire_nfe(r["mean_steps"], 4).items() if v["fwd"] or v["bwd"]}
    got = {k: v for k, v in r["nfe_by_network"].items() if v["fwd"] or v["bwd"]}
    assert got.keys() == expected.keys()
    for net in got:
        assert got[net] == pytest.approx(expected[net])
    assert r["tflops_per_cf"] > 0


def test_paper_nfe_counters_match_analytic_counts(cfg):
    from vcebench.paper.nfe import measured_paper_nfe

    out = measured_paper_nfe(cfg, methods=("fire", "maskdime", "fastdime2plus"))
    for name, d in out.items():
        assert d["match"], (name, d["nfe"], d["analytic"])
    assert out["maskdime"]["nfe"]["unet"]["fwd"] == pytest.approx(out["maskdime"]["mean_steps"])  # 1 per step


def test_ddpm_family_nfe_follows_the_reference_loops():
    from vcebench.paper.nfe import ddpm_family_nfe

    dime = ddpm_family_nfe("dime", 60)
    assert dime["unet"]["fwd"] == 60 + sum(range(60))  # guided step + recursive unguided denoising
    assert ddpm_family_nfe("maskdime", 60, attempts=3)["unet"]["fwd"] == 180
    assert ddpm_family_nfe("fastdime2", 60)["perceptual"]["bwd"] == 120


def test_paper_scale_report_is_consistent_with_its_own_table():
    from vcebench.costs.flops import flops_from_nfe
    from vcebench.costs.paper_nets import CELEBA
    from vcebench.paper.nfe import fire_nfe
    from vcebench.paper.scale import format_dataset, paper_scale_report

    r = paper_scale_report("celeba", fvcore=False)
    calls = r["networks"]
    assert calls["unet"]["fwd_flops"] > 50 * calls["classifier"]["fwd_flops"]
    assert set(r["fire"]["implied"]) == {"released", "unet"}
    for pmf, d in r["fire"]["implied"].items():
        c = {**calls, "pmf": calls["pmf" if pmf == "unet" else "pmf_released"]}
        steps = d["mean_updates_for_1.28_PFLOPs"]
        assert flops_from_nfe(fire_nfe(steps, CELEBA.smoothgrad_n), c) == pytest.approx(1.28e12)
    assert "MaskDiME / FiRe" in format_dataset(r)


@pytest.mark.parametrize("resolution,patch", [(128, 8), (256, 16), (512, 32)])
def test_released_dit_flops_match_the_standard_dit_count(resolution, patch):
    """FiRe's released PMF backbone, counted by the FLOP counter, against the DiT count formula (and a net with
    the wrong patch size, the planted fault, is far from it)."""
    from vcebench.costs.flops import per_call_flops
    from vcebench.costs.paper_nets import DiTSize, PMFNet, ReleasedDiT, dit_formula_flops, released_dit

    size = released_dit(resolution)
    assert (size.patch, size.tokens, size.hidden, size.depth, size.heads) == (patch, 256, 768, 12, 12)
    with torch.device("meta"):
        net = PMFNet(ReleasedDiT(size), "dit").requires_grad_(False)
        wrong = PMFNet(ReleasedDiT(DiTSize(resolution, 2 * patch)), "dit").requires_grad_(False)
    counted = per_call_flops({"pmf": net}, resolution)["pmf"]
    assert counted["fwd_flops"] == pytest.approx(dit_formula_flops(size), rel=0.01)
    # the transformer blocks alone: 12 x (12 N d^2 + 2 N^2 d) multiply-accumulates, x 2
    blocks = 2 * 12 * (12 * 256 * 768**2 + 2 * 256**2 * 768)
    assert counted["fwd_flops"] == pytest.approx(blocks, rel=0.06)
    assert counted["fwd_flops"] > 40e9 and counted["bwd_flops"] > counted["fwd_flops"]
    wrong_fwd = per_call_flops({"pmf": wrong}, resolution)["pmf"]["fwd_flops"]
    assert wrong_fwd != pytest.approx(dit_formula_flops(size), rel=0.5)


def test_released_dit_rejects_an_unreleased_resolution():
    from vcebench.costs.paper_nets import build_networks, released_dit

    with pytest.raises(ValueError, match="released PMF backbones exist at"):
        released_dit(64)
    with pytest.raises(ValueError, match="pmf architecture must be one of"):
        build_networks(pmf="dit_b16", include=("pmf",))


def test_released_dit_conditions_on_t_h_omega_and_class():
    from vcebench.costs.paper_nets import DiTSize, ReleasedDiT

    torch.manual_seed(0)
    net = ReleasedDiT(DiTSize(16, 4, hidden=32, depth=2, heads=2)).eval()
    z, t = torch.randn(2, 3, 16, 16), torch.full((2,), 0.4)
    base = net(z, t, t)
    assert base.shape == z.shape
    for kw in ({"h": t * 0.5}, {"y": torch.zeros(2, dtype=torch.long)}, {"omega": torch.full((2,), 2.0)}):
        args = {"h": t, **kw}
        assert not torch.allclose(net(z, t, args.pop("h"), **args), base)


def test_paper_scale_summary_per_dataset_and_the_docs_block(tmp_path):
    """The summary covers every dataset with its released backbone; the docs block is replaced whole."""
    from vcebench.cli.profile import PAPER_DATASETS
    from vcebench.costs.paper_nets import SETTINGS
    from vcebench.paper import scale as ps

    assert PAPER_DATASETS == tuple(SETTINGS)
    rs = {"datasets": {}, "summary": [
        {"dataset": d, "resolution": res, "pmf": f"DiT-B/{p}", "tokens": 256, "pmf_fwd_gflops": 46.0,
         "fire_tflops_per_update": 0.2, "fire_tflops_K": 3.0, "fire_tflops_paper_profile": 2.0,
         "maskdime_tflops": 10.0, "maskdime_all_scales_tflops": 30.0, "ratio_K": 10 / 3, "ratio_paper_profile": 5.0,
         "implied_updates_1.28_PFLOPs": 6.25 if d == "celeba" else None, "implied_updates_8x": 6.5}
        for d, res, p in (("celeba", 128, 8), ("celebahq", 256, 16), ("chexpert", 512, 32))]}
    md = ps.summary_markdown(rs)
    assert md.count("(256 tokens)") == 3 and "**6.25 refinement updates per CF**" in md and md.count("imply") == 1
    page = f"intro\n{ps.DOCS_BEGIN}\nold numbers\n{ps.DOCS_END}\nafter\n"
    new = ps.replace_docs_block(page, md)
    assert "old numbers" not in new and new.startswith("intro\n") and new.endswith("after\n") and md in new
    assert ps.replace_docs_block(new, md) == new
    with pytest.raises(ValueError, match="marker lines"):
        ps.replace_docs_block("no markers here", md)


def test_docs_paper_scale_block_is_the_committed_report():
    """docs/profiling.md's paper-scale summary is what the command writes from the committed
    results/reference/paper_scale_flops.json (rerun `vcebench profile paper-scale --docs docs/profiling.md`)."""
    from vcebench.paper import scale as ps

    report = json.loads((ROOT / "results/reference/paper_scale_flops.json").read_text())
    page = (ROOT / "docs/profiling.md").read_text()
    assert ps.replace_docs_block(page, ps.summary_markdown(report)) == page
    assert [r["dataset"] for r in report["summary"]] == ["celeba", "celebahq", "chexpert"]
    md = (ROOT / "results/reference/paper_scale_flops.md").read_text()
    assert md == ps.format_markdown(report)


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def tiny_load(monkeypatch, cfg):
    """Replace data + trained-model loading by tiny stand-ins (the profile logic is what is tested)."""
    from methods import get_method
    from vcebench.costs.standins import tiny_standins
    from vcebench.steps import profile as cmd

    def fake_load(settings, *, n, device):
        params = {**settings.params, "K": 3, "smoothgrad_n": 4}  # overrides (compaction) are in settings.params
        models = tiny_standins()
        x = torch.rand(n, 3, 8, 8, generator=torch.Generator().manual_seed(1)) * 2 - 1
        target = 1 - models.classifier(x).argmax(1)
        return params, get_method(settings.method, params), models, x, target, list(range(n))

    monkeypatch.setattr(cmd, "_load", fake_load)
    return cmd


REQUIRED = ("sec_per_cf", "tflops_per_cf", "nfe_per_cf", "nfe_by_network", "peak_mem_mb", "mean_steps",
            "batch_size", "device", "flop_convention", "torch", "threads")


def test_profile_command_writes_every_field(tiny_load, tmp_path):
    from vcebench.cli import main

    out = tmp_path / "profile.json"
    timing = tmp_path / "timing-0-of-1.json"
    timing.write_text(json.dumps({"seconds": 3.0, "n": 6, "batch_size": 2}))
    assert main(["profile", "task", "--task", "synthfaces_smile", "--method", "fire", "--n", "3",
                 "--batch-size", "2", "--out", str(out), "--timings", str(timing)]) == 0
    d = json.loads(out.read_text())
    for key in REQUIRED:
        assert key in d, key
    assert d["sec_per_cf"] == pytest.approx(0.5) and d["sec_per_cf_profile_run"] > 0
    assert d["batch_size"] == 2 and d["n"] == 3


def test_profile_command_profiles_several_methods_in_one_process(tiny_load, tmp_path):
    """One job per task: each method gets its own profile.json, with the timings its explain run recorded,
    and the same FLOPs / NFE as when it is profiled alone."""
    from vcebench.cli import main

    timings = []
    for m, sec in (("fire", 3.0), ("fire_K5", 1.5)):
        t = tmp_path / m / "timing-0-of-1.json"
        t.parent.mkdir()
        t.write_text(json.dumps({"seconds": sec, "n": 6, "batch_size": 2, "method": m}))
        timings.append(str(t))
    common = ["--task", "synthfaces_smile", "--n", "3", "--batch-size", "2", "--timings", *timings]
    assert main(["profile", "task", "--method", "fire", "--method", "fire_K5", *common,
                 "--out", str(tmp_path / "out" / "{method}.json")]) == 0
    both = {m: json.loads((tmp_path / "out" / f"{m}.json").read_text()) for m in ("fire", "fire_K5")}
    assert both["fire"]["sec_per_cf"] == pytest.approx(0.5) and both["fire_K5"]["sec_per_cf"] == pytest.approx(0.25)
    assert both["fire"]["method"] == "fire" and both["fire_K5"]["method"] == "fire_K5"
    assert main(["profile", "task", "--method", "fire", "--task", "synthfaces_smile", "--n", "3",
                 "--batch-size", "2", "--out", str(tmp_path / "alone.json")]) == 0
    alone = json.loads((tmp_path / "alone.json").read_text())
    assert alone["flops_per_cf"] == both["fire"]["flops_per_cf"] and alone["nfe_per_cf"] == both["fire"]["nfe_per_cf"]
    # several methods need {method} in --out; a method without a timing file is named
    assert main(["profile", "task", "--method", "fire", "--method", "fire_K5", *common,
                 "--out", str(tmp_path / "x.json")]) == 2
    assert main(["profile", "task", "--method", "fire", "--method", "fire_K10", "--task", "synthfaces_smile",
                 "--n", "3", "--timings", *timings, "--out", str(tmp_path / "{method}.json")]) == 2


def test_cli_parses_without_importing_torch():
    """Every workflow job starts `vcebench`; light verbs (merge, report) must not pay torch's import."""
    import subprocess
    import sys

    code = "import sys, vcebench.cli as c; c.build_parser(); print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_compare_compaction_runs_both_settings(tiny_load, tmp_path):
    from vcebench.cli import main

    out = tmp_path / "compaction.json"
    assert main(["profile", "compaction", "--task", "synthfaces_smile", "--method", "fire", "--n", "3",
                 "--batch-size", "3", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["with_compaction"]["compaction"] is True and d["without_compaction"]["compaction"] is False
    # Without compaction finished samples still ride along: never fewer FLOPs.
    assert d["without_compaction"]["flops_per_cf"] >= d["with_compaction"]["flops_per_cf"]


def test_profile_command_needs_task_and_method():
    from vcebench.cli import main

    for argv in (["profile", "task", "--method", "fire"], ["profile", "task", "--task", "synthfaces_smile"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2


# --------------------------------------------------------------------------- paper-scale timing (GPU script)


def test_paper_timing_runs_every_variant_kind_on_cpu(tmp_path):
    """The GPU timing script's code path on tiny networks: rows, errors table, Markdown and JSON written."""
    import json

    from vcebench.paper import timing as pt

    plan = [{"method": "fire", "variant": "fp32", "batch": 2, "n": 2, "early_stop": False,
             "params": {"K": 2, "smoothgrad_n": 2}},
            {"method": "fire", "variant": "mixed+cl", "batch": 2, "n": 2, "early_stop": False,
             "params": {"K": 2, "smoothgrad_n": 2}},
            {"method": "maskdime", "variant": "tf32", "batch": 1, "n": 2,
             "params": {"scales": [8.0], "start_step": 2, "respacing": 10}},
            {"method": "fire", "variant": "nonsense", "batch": 1, "n": 1}]
    r = pt.run(tmp_path, pt.TINY, "cpu", plan, log=lambda m: None)
    rows = r["rows"]
    assert [("error" in x) for x in rows] == [False, False, False, True]
    assert "must start with fp32" in rows[3]["error"]
    fire = rows[0]
    assert fire["mean_steps"] == 2.0 and fire["n"] == 2  # early stopping off: all K updates
    assert fire["sec_per_update"] == pytest.approx(fire["seconds"] / 4)
    # FLOPs per CF = NFE x per-call FLOPs; the PMF runs K + 1 forwards and K backwards
    assert fire["nfe"]["pmf"] == {"fwd": 3.0, "bwd": 2.0}
    assert fire["tflops_per_cf"] > 0 and rows[2]["mean_attempts"] == 1.0
    # fp32 is the reference; tf32 on a CPU is fp32; mixed casts only the UNets to bf16
    assert all(v == 0.0 for v in r["errors"]["fp32"].values())
    mixed = r["errors"]["mixed+cl"]
    assert mixed["classifier_input_grad"] == 0.0 and 0 < mixed["pmf_clean"] < 0.2
    assert "edit_rel_diff_vs_fp32" in rows[1]
    saved = json.loads((tmp_path / "gpu_profile.json").read_text())
    assert len(saved["rows"]) == 4
    md = (tmp_path / "gpu_profile.md").read_text()
    assert "| fire | mixed+cl | 2 |" in md and "error" in md
    # each row: the median of 3 timed passes and their spread; the machine in the report
    assert len(fire["sec_per_cf_runs"]) == fire["repeats"] == 3
    assert fire["sec_per_cf_min"] <= fire["sec_per_cf"] <= fire["sec_per_cf_max"]
    assert saved["device"].startswith("cpu") and saved["torch"] == torch.__version__
    # FiRe runs its released-backbone-shaped DiT PMF; a CPU has no peak in the table, the GPUs do
    assert saved["pmf"] == "released" and fire["share_of_peak"] is None and "| n/a |" in md
    assert "Variants (median s/CF" in md and "| fire | 2 updates | fp32 |" in md
    assert pt.peak_tflops("cuda (NVIDIA H200)", "mixed") == pt.PEAK_TFLOPS["H200"]["bf16"]
    assert pt.peak_tflops("cuda (NVIDIA H100 80GB HBM3)", "fp32") == pt.PEAK_TFLOPS["H100"]["fp32"]
    assert pt.peak_tflops(saved["device"], "fp32") is None


def test_paper_timing_time_limit_skips_the_rest(tmp_path):
    from vcebench.paper import timing as pt

    plan = [{"method": "fire", "variant": "fp32", "batch": 1, "n": 1, "early_stop": False,
             "params": {"K": 1, "smoothgrad_n": 1}}] * 2
    r = pt.run(tmp_path, pt.TINY, "cpu", plan, time_limit=0.0, log=lambda m: None)
    assert r["rows"] == [] and len(r["skipped"]) == 2


def test_sample_generators_device_argument_keeps_the_cpu_streams():
    from vcebench.core.rng import SampleGenerators

    a = SampleGenerators(3, [0, 5]).fork("x").randn(4)
    b = SampleGenerators(3, [0, 5], device="cpu").fork("x").randn(4)
    assert torch.equal(a, b)
    sub = SampleGenerators(3, [0, 5], device="cpu").subset([1])
    assert sub.device == torch.device("cpu") and torch.equal(sub.randn(4)[0], SampleGenerators(3, [5]).randn(4)[0])

