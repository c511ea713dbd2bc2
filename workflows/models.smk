rule train_model:
    """Train one network role on a synthetic dataset (real datasets use canonical weights)."""
    input:
        lambda wc: data_inputs(wc.dataset),
    output:
        "resources/models/{dataset}/{role}/metrics.json",
    log:
        "logs/models/{dataset}/{role}.log",
    benchmark:
        "benchmarks/models/{dataset}/{role}.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: config["threads"]
    resources:
        mem_mb=6000,
        runtime=120,
        gpu=lambda wc: 1 if config["device"] == "cuda" else 0,
    params:
        cfg=CFG,
        task=lambda wc: wf.task_for_dataset(config, wc.dataset),
        data=lambda wc: data_arg(wc.dataset),
    shell:
        "vcebench train {wildcards.role} --task {params.task} {params.data} "
        "--out resources/models/{wildcards.dataset}/{wildcards.role} {params.cfg} > {log} 2>&1"
