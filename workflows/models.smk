rule train_model:
    """Train one network role on a synthetic dataset (real datasets use canonical weights)."""
    input:
        data=lambda wc: data_inputs(wc.dataset),
        # the oracle's transfer gate attacks the classifier it must not be fooled by
        classifier=lambda wc: (
            [f"resources/models/{wc.dataset}/classifier/metrics.json"]
            if wc.role == "oracle"
            else []
        ),
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
