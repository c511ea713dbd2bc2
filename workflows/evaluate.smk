rule fid_reference:
    """Feature statistics of the originals, computed once per task and reused by every method."""
    input:
        data=lambda wc: data_inputs(wf.dataset_of(config, wc.task)),
        models=lambda wc: model_inputs(wc.task, ["fid_features"]),
    output:
        "results/{task}/fid_ref.npz",
    log:
        "logs/evaluate/{task}/fid_ref.log",
    benchmark:
        "benchmarks/evaluate/{task}/fid_ref.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: config["threads"]
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        cfg=CFG,
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
    shell:
        "vcebench evaluate --task {wildcards.task} --reference {params.data} "
        "--out {output:q} {params.cfg} > {log:q} 2>&1"


rule evaluate:
    """Every metric of the task's protocol for one method."""
    input:
        cfs="results/{task}/{method}/counterfactuals.npz",
        ref="results/{task}/fid_ref.npz",
        models=lambda wc: model_inputs(wc.task, wf.eval_roles(config, wc.task)),
    output:
        "results/{task}/{method}/metrics.json",
    log:
        "logs/evaluate/{task}/{method}.log",
    benchmark:
        "benchmarks/evaluate/{task}/{method}.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: config["threads"]
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        cfg=CFG,
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
        n_eval=lambda wc: wf.n_eval_arg(config, wc.method),
    shell:
        "vcebench evaluate --task {wildcards.task} --method {wildcards.method} {params.n_eval} "
        "--cfs {input.cfs:q} --fid-ref {input.ref:q} {params.data} --out {output:q} {params.cfg} "
        "> {log:q} 2>&1"


rule profile:
    """FLOPs, NFE, time and memory per counterfactual: every method of a task in one job."""
    input:
        data=lambda wc: data_inputs(wf.dataset_of(config, wc.task)),
        models=lambda wc: model_inputs(
            wc.task, sorted({r for m in GENERATED for r in wf.method_roles(m)})
        ),
        timings=expand(
            "results/{{task}}/{method}/shards/timing-{i}-of-{n}.json",
            method=GENERATED,
            i=range(config["n_shards"]),
            n=config["n_shards"],
        ),
    output:
        expand("results/{{task}}/{method}/profile.json", method=GENERATED),
    log:
        "logs/profile/{task}.log",
    benchmark:
        "benchmarks/profile/{task}.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: config["threads"]
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=lambda wc: 1 if config["device"] == "cuda" else 0,
    params:
        cfg=CFG,
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
        methods=wf.shell_flags("--method", GENERATED),
        n=min(config.get("profile", {}).get("n", 8), config["n_eval"]),
        flop_n=config.get("profile", {}).get("flop_n", 2),
    shell:
        "vcebench profile task --task {wildcards.task} {params.methods} {params.data} "
        "--n {params.n} --flop-n {params.flop_n} --no-warmup --timings {input.timings:q} "
        "--out 'results/{wildcards.task}/{{method}}/profile.json' {params.cfg} > {log:q} 2>&1"
