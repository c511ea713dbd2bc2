# `snakemake seeds`: generation and evaluation again with every seed of config `seeds.seeds` on the same
# trained networks (the config's own seed is the main run); the spread per metric -> results/<task>_seeds.md.
# `vcebench report tolerances` derives the CI regression tolerances from it (vcebench/report/seeds.py).


rule explain_seed:
    """Counterfactuals of one method with another generation seed (one shard)."""
    input:
        settings="results/{task}/{method}/settings.json",
        data=lambda wc: data_inputs(wf.dataset_of(config, wc.task)),
        models=lambda wc: model_inputs(wc.task, wf.method_roles(wc.method)),
    output:
        "results/{task}/seeds/{seed}/{method}/counterfactuals.npz",
    log:
        "logs/seeds/{task}/{seed}/{method}/explain.log",
    benchmark:
        "benchmarks/seeds/{task}/{seed}/{method}/explain.tsv"
    wildcard_constraints:
        seed=r"\d+",
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
        "vcebench explain --settings {input.settings:q} --seed {wildcards.seed} "
        "{params.data} --out {output:q} > {log:q} 2>&1"


rule evaluate_seed:
    """Every metric of one seed's counterfactuals."""
    input:
        settings="results/{task}/{method}/settings.json",
        cfs="results/{task}/seeds/{seed}/{method}/counterfactuals.npz",
        ref="results/{task}/fid_ref.npz",
        models=lambda wc: model_inputs(wc.task, wf.eval_roles(config, wc.task)),
    output:
        "results/{task}/seeds/{seed}/{method}/metrics.json",
    log:
        "logs/seeds/{task}/{seed}/{method}/evaluate.log",
    benchmark:
        "benchmarks/seeds/{task}/{seed}/{method}/evaluate.tsv"
    wildcard_constraints:
        seed=r"\d+",
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
        "--cfs {input.cfs:q} --fid-ref {input.ref:q} {params.data} --out {output:q} > {log:q} 2>&1"


rule seeds_task:
    """The spread of every cell over the seeds (of the methods vcebench runs: an imported one has no seed)."""
    input:
        config=RESOLVED,
        main=lambda wc: expand(
            "results/{task}/{method}/metrics.json",
            task=wc.task,
            method=seeded_methods(wc.task),
        ),
        profiles=lambda wc: expand(
            "results/{task}/{method}/profile.json",
            task=wc.task,
            method=seeded_methods(wc.task),
        ),
        seeds=lambda wc: expand(
            "results/{task}/seeds/{seed}/{method}/metrics.json",
            task=wc.task,
            seed=wf.other_seeds(config),
            method=seeded_methods(wc.task),
        ),
    output:
        md="results/{task}_seeds.md",
        csv="results/{task}_seeds.csv",
    log:
        "logs/seeds/{task}/table.log",
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        methods=lambda wc: wf.shell_words(seeded_methods(wc.task)),
    shell:
        "vcebench report seeds --task {wildcards.task} --methods {params.methods} --out-dir results "
        "--resolved-config {input.config:q} > {log:q} 2>&1"


rule seeds:
    input:
        expand("results/{task}_seeds.md", task=TASKS),


rule seeds_reference:
    """The main seed's tables and every task's spread over the seeds: what `make reference` accepts and derives
    the per-cell tolerances from (`vcebench report tolerances`)."""
    input:
        expand("results/{task}.csv", task=TASKS),
        expand("results/{task}_seeds.md", task=TASKS),
