rule tune_task:
    """Every method's settings picked on the validation split (vcebench/protocol/tune.py); the default run reads the
    file it writes (protocol.tuned_dir, committed). Not part of `all`: run `snakemake tune`.
    """
    input:
        settings=ancient("results/tune/{task}.settings.json"),
        data=lambda wc: data_inputs(wf.dataset_of(config, wc.task)),
        val=lambda wc: [
            f"{d}/val.npz" for d in [data_dir(wf.dataset_of(config, wc.task))] if d
        ],
        models=lambda wc: model_inputs(wc.task, wf.tune_roles(config, wc.task)),
    output:
        tuned=os.path.join(TUNED_DIR, "{task}.yaml"),
        md="results/tune/{task}.md",
    log:
        "logs/tune/{task}.log",
    benchmark:
        "benchmarks/tune/{task}.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: config["threads"]
    resources:
        mem_mb=6000,
        runtime=120,
        gpu=lambda wc: 1 if config["device"] == "cuda" else 0,
    params:
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
    shell:
        "vcebench tune --settings {input.settings:q} {params.data} --out {output.tuned:q} --md {output.md:q} "
        "> {log:q} 2>&1"


rule tune:
    input:
        expand(os.path.join(TUNED_DIR, "{task}.yaml"), task=TASKS),
