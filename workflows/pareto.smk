# `snakemake pareto` (not in the default run): every method of config `pareto` at several budgets and starting
# log-SNRs (its variants), each explained (with its costs) and evaluated like a table row, then plotted.


rule pareto_task:
    """Quality against TFLOPs / seconds per CF (front highlighted) and against the starting log-SNR."""
    input:
        config=RESOLVED,
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
    shell:
        "vcebench report pareto --task {wildcards.task} --out-dir results --resolved-config {input.config:q} "
        "> {log:q} 2>&1"


rule pareto:
    input:
        expand("results/{task}_pareto.png", task=TASKS),
