# Counterfactuals of other code bases (config key `external`), scored as method `external_<name>`:
# their explain step is `vcebench import` (docs/import.md).


ruleorder: import_external > merge_counterfactuals


rule import_external:
    """DiME/ACE, PEAL/SCE, RCSB or generic counterfactuals -> counterfactuals.npz (same ids as explain)."""
    input:
        config=RESOLVED,
        data=lambda wc: data_inputs(wf.dataset_of(config, wc.task)),
        models=lambda wc: model_inputs(wc.task, wf.method_roles(wc.method)),
        source=lambda wc: wf.external_inputs(
            config, wc.task, wc.method, workflow.basedir
        ),
    output:
        "results/{task}/{method}/counterfactuals.npz",
    log:
        "logs/import/{task}/{method}.log",
    benchmark:
        "benchmarks/import/{task}/{method}.tsv"
    wildcard_constraints:
        method="external_[A-Za-z0-9_]+",
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
        source=lambda wc: wf.import_args(config, wc.task, wc.method, workflow.basedir),
    shell:
        "vcebench import --task {wildcards.task} {params.source} {params.data} "
        "--out {output:q} --resolved-config {input.config:q} > {log:q} 2>&1"
