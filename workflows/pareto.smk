# `snakemake pareto` (not in the default run): every method of config `pareto` at several budgets and starting
# log-SNRs (its variants), each explained, evaluated and profiled like a table row, then plotted.


ruleorder: profile > profile_one


rule profile_one:
    """FLOPs per call, NFE, time and memory of one method outside config `methods` (a Pareto variant)."""
    input:
        data=lambda wc: data_inputs(wf.dataset_of(config, wc.task)),
        models=lambda wc: model_inputs(wc.task, wf.method_roles(wc.method)),
        timings=expand(
            "results/{{task}}/{{method}}/shards/timing-{i}-of-{n}.json",
            i=range(config["n_shards"]),
            n=config["n_shards"],
        ),
    output:
        "results/{task}/{method}/profile.json",
    log:
        "logs/profile/{task}/{method}.log",
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
        n=min(config.get("profile", {}).get("n", 8), config["n_eval"]),
        flop_n=config.get("profile", {}).get("flop_n", 2),
    shell:
        "vcebench profile task --task {wildcards.task} --method {wildcards.method} {params.data} "
        "--n {params.n} --flop-n {params.flop_n} --no-warmup --timings {input.timings:q} "
        "--out {output:q} {params.cfg} > {log:q} 2>&1"


rule pareto_task:
    """Quality against TFLOPs / seconds per CF (front highlighted) and against the starting log-SNR."""
    input:
        metrics=lambda wc: expand(
            "results/{task}/{method}/metrics.json",
            task=wc.task,
            method=pareto_methods(),
        ),
        profiles=lambda wc: expand(
            "results/{task}/{method}/profile.json",
            task=wc.task,
            method=pareto_methods(),
        ),
    output:
        png="results/{task}_pareto.png",
        snr="results/{task}_pareto_snr.png",
        csv="results/{task}_pareto.csv",
    log:
        "logs/report/{task}_pareto.log",
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        cfg=CFG,
    shell:
        "vcebench report pareto --task {wildcards.task} --out-dir results {params.cfg} > {log:q} 2>&1"


rule pareto:
    input:
        expand("results/{task}_pareto.png", task=TASKS),
