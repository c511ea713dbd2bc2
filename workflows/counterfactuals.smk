rule explain_shard:
    """Counterfactuals for one shard of the evaluation sample ids."""
    input:
        settings="results/{task}/{method}/settings.json",
        data=lambda wc: data_inputs(wf.dataset_of(config, wc.task)),
        models=lambda wc: method_model_inputs(wc.task, wc.method),
    output:
        cf="results/{task}/{method}/shards/shard-{i}-of-{n}.npz",
        timing="results/{task}/{method}/shards/timing-{i}-of-{n}.json",
    log:
        "logs/explain/{task}/{method}/shard-{i}-of-{n}.log",
    benchmark:
        "benchmarks/explain/{task}/{method}/shard-{i}-of-{n}.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: config["threads"]
    resources:
        mem_mb=6000,
        runtime=240,
        gpu=lambda wc: 1 if config["device"] == "cuda" else 0,
    params:
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
    shell:
        "vcebench explain --settings {input.settings:q} "
        "--shard {wildcards.i} --n-shards {wildcards.n} {params.data} "
        "--out {output.cf:q} > {log:q} 2>&1"


rule merge_counterfactuals:
    """Merge the shards (sorted by sample id; checks none is missing or duplicated) and their costs (time,
    peak memory, FLOPs per network call) into the method's profile.json."""
    input:
        shards=expand(
            "results/{{task}}/{{method}}/shards/shard-{i}-of-{n}.npz",
            i=range(config["n_shards"]),
            n=config["n_shards"],
        ),
        timings=expand(
            "results/{{task}}/{{method}}/shards/timing-{i}-of-{n}.json",
            i=range(config["n_shards"]),
            n=config["n_shards"],
        ),
    output:
        cfs="results/{task}/{method}/counterfactuals.npz",
        profile="results/{task}/{method}/profile.json",
    log:
        "logs/explain/{task}/{method}/merge.log",
    benchmark:
        "benchmarks/explain/{task}/{method}/merge.tsv"
    wildcard_constraints:
        method="(?!external_)[A-Za-z0-9_]+",  # an imported method's counterfactuals: rule import_external
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "vcebench explain --merge {input.shards:q} --out {output.cfs:q} --profile-out {output.profile:q} "
        "> {log:q} 2>&1"
