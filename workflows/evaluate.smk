rule fid_reference:
    """Feature statistics of the originals, computed once per task and reused by every method."""
    input:
        settings=ancient("results/{task}/fid_ref.settings.json"),
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
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
    shell:
        "vcebench evaluate --settings {input.settings:q} --reference {params.data} "
        "--out {output:q} > {log:q} 2>&1"


rule evaluate:
    """Every metric of the task's protocol for one method."""
    input:
        settings="results/{task}/{method}/settings.json",
        cfs="results/{task}/{method}/counterfactuals.npz",
        ref="results/{task}/fid_ref.npz",
        models=lambda wc: model_inputs(wc.task, wf.eval_roles(config, wc.task)),
    output:
        metrics="results/{task}/{method}/metrics.json",
        samples="results/{task}/{method}/samples.npz",
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
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
    shell:
        "vcebench evaluate --settings {input.settings:q} "
        "--cfs {input.cfs:q} --fid-ref {input.ref:q} {params.data} --out {output.metrics:q} > {log:q} 2>&1"
