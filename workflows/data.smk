rule render_data:
    """Render a synthetic dataset (all splits + attribute table) once."""
    input:
        config=RESOLVED,
    output:
        train="resources/data/{dataset}/train.npz",
        val="resources/data/{dataset}/val.npz",
        test="resources/data/{dataset}/test.npz",
        table="resources/data/{dataset}/attributes.csv",
    log:
        "logs/data/{dataset}.log",
    benchmark:
        "benchmarks/data/{dataset}.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: config["threads"]
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        settings=lambda wc: wf.settings_key(config, "data", wc.dataset),
    shell:
        "vcebench data render {wildcards.dataset} --out resources/data/{wildcards.dataset} "
        "--resolved-config {input.config:q} > {log:q} 2>&1"
