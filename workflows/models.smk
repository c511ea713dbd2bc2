rule train_model:
    """Train one network role on a synthetic dataset (real datasets use canonical weights)."""
    input:
        # the job's settings (rule resolve_train_settings); ancient: it reruns on its settings key (params), as before
        settings=ancient("resources/settings/{dataset}/{role}.json"),
        data=lambda wc: data_inputs(wc.dataset),
        # networks a role's quality gate uses: the oracle attacks the classifier it must not be
        # fooled by; the ddpm's FID uses fid_features; the pmf is compared with the ddpm's Tweedie
        # estimate and must keep the classifier's labels (vcebench.workflow.gate_inputs)
        gate=lambda wc: [
            f"resources/models/{wc.dataset}/{r}/metrics.json"
            for r in wf.gate_roles(config, wc.dataset, wc.role)
        ],
        # the shipped network (config key `networks`), installed instead of trained when its recipe is the config's
        shipped=lambda wc: wf.shipped_card(
            config, workflow.basedir, wc.dataset, wc.role
        ),
    output:
        "resources/models/{dataset}/{role}/metrics.json",
    log:
        "logs/models/{dataset}/{role}.log",
    benchmark:
        "benchmarks/models/{dataset}/{role}.tsv"
    conda:
        "envs/vcebench.yaml"
    # ddpm / pmf with `device: cuda` and `gpus_per_train: N > 1`: torchrun starts N processes, one per GPU
    # (vcebench.models.training.distributed), each with `train_threads` threads
    threads: lambda wc: wf.train_threads(config) * wf.train_processes(config, wc.role)
    resources:
        mem_mb=6000,
        runtime=120,
        gpu=lambda wc: wf.train_gpus(config, wc.role),
    params:
        launcher=lambda wc: wf.train_launcher(config, wc.role),
        settings=lambda wc: wf.settings_key(config, "model", wc.dataset, wc.role),
        data=lambda wc: data_arg(wc.dataset),
    shell:
        "{params.launcher} train {wildcards.role} --settings {input.settings:q} {params.data} "
        "--out resources/models/{wildcards.dataset}/{wildcards.role} > {log:q} 2>&1"


rule networks:
    """Every network of the run's synthetic datasets (`make networks` trains them from scratch and ships them)."""
    input:
        wf.trained_networks(config),
