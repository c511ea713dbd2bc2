"""`vcebench <verb> <subverb>`: each subverb parses only its own arguments, `--help` lists the subverbs, and a
user error names the subverb."""

import pytest

from vcebench import cli

SUBVERBS = {
    "profile": ("task", "compaction", "paper-scale", "gpu"),
    "report": ("task", "gallery", "paper", "regression", "accept", "seeds", "pareto", "pairs", "sets", "tolerances",
               "excerpt", "provenance", "bundle", "verify"),
    "models": ("parity", "curve", "check", "ship"),
}

# one command line per subverb, with an argument only that subverb takes; `func` is the function it runs
PARSES = [
    (["profile", "task", "--task", "t", "--method", "fire", "--method", "dime", "--timings", "a.json", "b.json",
      "--no-compaction"], "run_task", {"method": ["fire", "dime"], "timings": ["a.json", "b.json"]}),
    (["profile", "compaction", "--task", "t", "--method", "fire", "--flop-n", "2"], "run_compaction",
     {"method": "fire", "flop_n": 2}),
    (["profile", "paper-scale", "celeba", "--attempts", "2", "--no-fvcore"], "run_paper_scale",
     {"setting": ["celeba"], "attempts": 2.0, "no_fvcore": True}),
    (["profile", "paper-scale"], "run_paper_scale",
     {"setting": ["celeba", "celebahq", "chexpert"], "out_dir": "results/reference", "docs": None}),
    (["profile", "paper-scale", "chexpert", "--docs", "docs/profiling.md"], "run_paper_scale",
     {"setting": ["chexpert"], "docs": "docs/profiling.md"}),
    (["profile", "gpu", "--tiny", "--device", "cpu", "--plan", "p.json", "--repeats", "1"], "run_gpu",
     {"tiny": True, "device": "cpu", "plan": "p.json", "repeats": 1, "name": "gpu_profile"}),
    (["report", "task", "--task", "t", "--n-qualitative", "3"], "run_task", {"n_qualitative": 3, "out_dir": "results"}),
    (["report", "gallery", "--task", "t", "--n-gallery", "4", "--models", "m"], "run_gallery",
     {"n_gallery": 4, "models": "m"}),
    (["report", "paper", "--out-dir", "results/paper"], "run_paper", {"out_dir": "results/paper"}),
    (["report", "regression", "--reference", "r", "--tasks", "a", "b", "--out", "r.md"], "run_regression",
     {"reference": "r", "tasks": ["a", "b"], "out": "r.md"}),
    (["report", "accept", "--reference", "r", "--out-dir", "runs/quick/results"], "run_accept",
     {"reference": "r", "out_dir": "runs/quick/results"}),
    (["report", "seeds", "--task", "t", "--methods", "fire"], "run_seeds", {"methods": ["fire"]}),
    (["report", "pareto", "--task", "t"], "run_pareto", {"task": "t"}),
    (["report", "pairs", "--summary", "a", "b"], "run_pairs", {"summary": ["a", "b"], "task": None}),
    (["report", "tolerances", "--reference", "r", "--tasks", "a"], "run_tolerances", {"tasks": ["a"]}),
    (["report", "provenance", "results", "--json"], "run_provenance", {"results": "results", "json": True}),
    (["report", "bundle", "--task", "a", "b", "--images", "--out", "x.tar"], "run_bundle",
     {"task": ["a", "b"], "images": True, "results": "results", "models": "resources/models"}),
    (["report", "verify", "x.tar", "--models", "m", "--out", "c.md"], "run_verify",
     {"bundle": "x.tar", "models": "m", "out": "c.md", "data": None}),
    (["models", "parity", "--dataset", "synthfaces", "--out", "p.json", "--n", "8"], "run_parity",
     {"dataset": "synthfaces", "n": 8}),
    (["report", "sets", "--task", "t", "--a", "x", "--b", "y", "--out", "s.md"], "run_sets",
     {"a": "x", "b": "y", "names": ["ref1", "ref2"]}),
    (["models", "curve", "--task", "t", "--role", "pmf", "--steps", "8", "--out", "o", "--train-only"], "run_curve",
     {"train_only": True, "steps": 8}),
    (["models", "curve", "--task", "t", "--role", "ddpm", "--out", "o"], "run_curve",  # steps: the recipe's
     {"train_only": False, "steps": None, "score_only": False}),
    (["models", "curve", "--task", "t", "--role", "ddpm", "--out", "o", "--score-only"], "run_curve",
     {"score_only": True}),
    (["models", "check", "--models", "m", "--n", "5"], "run_check", {"models": "m", "n": 5}),
    (["models", "ship", "--models", "m", "--set", "s", "--out", "o", "--where", "w"], "run_ship",
     {"set_name": "s", "where": "w", "curves": None}),
]


@pytest.mark.parametrize("argv,func,values", PARSES, ids=[" ".join(p[0][:2]) for p in PARSES])
def test_each_subverb_parses_its_arguments(argv, func, values):
    args = cli.build_parser().parse_args(argv)
    assert args.verb == argv[0] and args.subverb == argv[1] and args.func.__name__ == func
    for key, value in values.items():
        assert getattr(args, key) == value, key


# (subverb command line, an argument of another subverb of the same verb)
FOREIGN = [
    (["profile", "task", "--task", "t", "--method", "m"], ["--attempts", "2"]),
    (["profile", "compaction", "--task", "t", "--method", "m"], ["--timings", "a.json"]),
    (["profile", "paper-scale"], ["--no-warmup"]),
    (["profile", "gpu"], ["--method", "fire"]),
    (["report", "task", "--task", "t"], ["--n-gallery", "4"]),
    (["report", "gallery", "--task", "t"], ["--reference", "r"]),
    (["report", "paper"], ["--task", "t"]),
    (["report", "regression"], ["--methods", "fire"]),
    (["report", "accept"], ["--out", "r.md"]),
    (["report", "seeds", "--task", "t"], ["--tasks", "a"]),
    (["report", "pareto", "--task", "t"], ["--methods", "fire"]),
    (["report", "tolerances"], ["--results", "results"]),
    (["models", "parity", "--dataset", "d", "--out", "o"], ["--task", "t"]),
    (["models", "ship", "--models", "m", "--set", "s", "--out", "o", "--where", "w"], ["--steps", "3"]),
    (["report", "sets", "--task", "t", "--a", "x", "--b", "y", "--out", "s.md"], ["--reference", "r"]),
    (["report", "bundle", "--task", "t", "--out", "x.tar"], ["--data", "d"]),
    (["report", "verify", "x.tar"], ["--images"]),
]


@pytest.mark.parametrize("argv,foreign", FOREIGN, ids=[" ".join(p[0][:2]) for p in FOREIGN])
def test_each_subverb_rejects_another_subverbs_argument(argv, foreign, capsys):
    cli.build_parser().parse_args(argv)  # parses alone
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(argv + foreign)
    assert e.value.code == 2
    assert f"unrecognized arguments: {' '.join(foreign)}" in capsys.readouterr().err


def test_a_missing_subverb_lists_them(capsys):
    with pytest.raises(SystemExit):
        cli.main(["report"])
    assert "{" + ",".join(SUBVERBS["report"]) + "}" in capsys.readouterr().err


@pytest.mark.parametrize("verb", SUBVERBS)
def test_help_lists_the_subverbs(verb, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([verb, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for sub in SUBVERBS[verb]:
        assert f"\n    {sub} " in out, sub  # one line each, with its help


def test_top_level_help_shows_the_new_forms(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for verb, subs in SUBVERBS.items():
        assert f"    {verb} " in out
        for sub in subs:
            assert f"vcebench {verb} {sub} " in out, (verb, sub)  # the docstring's examples


def test_subverb_help_says_what_it_does(capsys):
    with pytest.raises(SystemExit):
        cli.main(["report", "regression", "--help"])
    out = capsys.readouterr().out
    assert "tolerances.yaml" in out and "--reference" in out and "--n-gallery" not in out


def test_a_user_error_names_the_subverb(tmp_path, capsys):
    """`report regression` without tolerances: one line naming the command, exit status 2."""
    ref = tmp_path / "ref"
    ref.mkdir()
    assert cli.main(["report", "regression", "--reference", str(ref), "--tasks", "synthfaces_smile"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vcebench report regression: UserError: no tolerances at ") and "\n" not in err
    assert "vcebench report tolerances" in err


def test_the_gpu_timing_plan_of_the_tiny_run(tmp_path):
    """`profile gpu --tiny`: a two-row smoke plan, or the given plan shrunk to smoke-test size."""
    import json

    from vcebench.paper import timing as pt

    assert pt.load_plan(None) is None
    assert [p["method"] for p in pt.load_plan(None, tiny=True)] == ["fire", "maskdime"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"method": "fire", "variant": "tf32", "batch": 5, "n": 20}]))
    assert pt.load_plan(str(plan)) == [{"method": "fire", "variant": "tf32", "batch": 5, "n": 20}]
    assert pt.load_plan(str(plan), tiny=True)[0]["n"] == 2
    # shrunk, the rows keep their distinct updates and batches (the summary's smallest / fastest batch)
    rows = pt.shrink([{"method": "fire", "variant": "tf32", "batch": b, "n": 2 * b, "params": {"K": k}}
                      for k, b in ((15, 5), (10, 5), (3, 32))] + [{"method": "fire", "variant": "tf32", "batch": 5,
                                                                  "n": 5}])
    assert [(r["params"]["K"], r["batch"], r["n"]) for r in rows] == [(3, 2, 2), (2, 2, 2), (1, 3, 3), (3, 2, 2)]


def test_the_gpu_speed_plan_covers_the_issue_rows():
    """scripts/gpu_speed_plan.json: FiRe with all 15, 10 and 3 updates and MaskDiME with one scale, each at
    batch 5 and at a larger batch, in the same variants."""
    import json
    from pathlib import Path

    plan = json.loads((Path(__file__).resolve().parents[1] / "scripts/gpu_speed_plan.json").read_text())
    fire = {(p["params"].get("K", 15) if "params" in p else 15, p["batch"], p["variant"]) for p in plan
            if p["method"] == "fire"}
    assert all(p["early_stop"] is False for p in plan if p["method"] == "fire")
    variant = "mixed+cl+gpunoise+bench"
    for k in (15, 10, 3):
        assert (k, 5, variant) in fire and any(kk == k and b > 5 and v == variant for kk, b, v in fire)
    mask = [p for p in plan if p["method"] == "maskdime"]
    assert all(p["params"]["scales"] == [8.0] for p in mask)
    assert {p["batch"] for p in mask if p["variant"] == variant} >= {5, 16, 32}
    assert {p["variant"] for p in mask} == {p["variant"] for p in plan if p["method"] == "fire"}


def test_the_gpu_speed_plan_has_a_graphed_arm():
    """#64: FiRe 15 / 10 / 3 updates at batch 5 and MaskDiME at batch 5 / 16 / 32, eager and with ``cuda_graphs``
    (each graphed row has its eager twin: the same row without the switch)."""
    import json
    from pathlib import Path

    plan = json.loads((Path(__file__).resolve().parents[1] / "scripts/gpu_speed_plan.json").read_text())

    def arm(graphed: bool) -> set[tuple]:
        rows = [(p, p.get("params", {})) for p in plan]
        return {(p["method"], q.get("K", 15) if p["method"] == "fire" else None, p["batch"], p["variant"])
                for p, q in rows if bool(q.get("cuda_graphs")) == graphed}

    graphed, eager = arm(True), arm(False)
    variant = "mixed+cl+gpunoise+bench"
    assert {("fire", k, 5, variant) for k in (15, 10, 3)} | {("maskdime", None, b, variant) for b in (5, 16, 32)} \
        == graphed
    assert graphed <= eager


def test_no_module_keeps_a_main_of_its_own():
    """The command line is `vcebench`: the former `python -m` entry points are subverbs now."""
    from vcebench.paper import timing as paper_timing
    from vcebench.protocol import parity

    for module in (paper_timing, parity):
        assert not hasattr(module, "main")
        assert 'if __name__ == "__main__"' not in open(module.__file__).read()
