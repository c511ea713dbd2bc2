# The resolution rules: each job kind's settings resolved once from this run's config (`--config key=value`
# included) into the one file its jobs read (vcebench/protocol/resolve.py). Each rule's params hold the record, so a
# change of settings rewrites the file. A method's explain and evaluate jobs rerun when their file changes; the
# jobs that take their file as ancient() (train, tune, the FID reference, the tables and figures) keep their
# rerun triggers of before (their inputs, a training job's settings key) and read the current file when they run.
# The per-job records are written by a shell command (`vcebench settings write`, the record quoted): a `run:` job
# is spawned as a new Snakemake process that parses the whole workflow again (6-12 s per job on 2 cores). The
# merged config (rule resolved_config, one job per run, up to the whole config in size, beyond what one shell
# argument may hold) keeps its `run:` block, run in a thread (profiles/default: force-use-threads).


rule resolve_settings:
    """The one resolution of a method's settings on a task (vcebench/protocol/resolve.py), from this run's config
    (`--config key=value` included): the file every explain and evaluate job of the pair reads. Its params hold
    the record, so a change of settings rewrites it and reruns those jobs."""
    output:
        "results/{task}/{method}/settings.json",
    log:
        "logs/settings/{task}/{method}.log",
    localrule: True
    conda:
        "envs/vcebench.yaml"
    params:
        record=lambda wc: wf.settings_json(config, wc.task, wc.method),
    shell:
        "vcebench settings write {output:q} --log {log:q} --record {params.record:q}"


rule resolve_reference_settings:
    """The FID reference's settings on a task: the evaluation split's inputs and the dataset's networks."""
    output:
        "results/{task}/fid_ref.settings.json",
    log:
        "logs/settings/{task}/fid_ref.log",
    localrule: True
    conda:
        "envs/vcebench.yaml"
    params:
        record=lambda wc: wf.reference_json(config, wc.task),
    shell:
        "vcebench settings write {output:q} --log {log:q} --record {params.record:q}"


rule resolve_train_settings:
    """A training job's settings: the role's recipe, the dataset, its tasks, the seed, the runtime, the shipped
    networks."""
    output:
        "resources/settings/{dataset}/{role}.json",
    log:
        "logs/settings/{dataset}/{role}.log",
    localrule: True
    conda:
        "envs/vcebench.yaml"
    params:
        record=lambda wc: wf.train_json(
            config,
            wc.dataset,
            wc.role,
            wf.networks_dir(config, workflow.basedir),
        ),
    shell:
        "vcebench settings write {output:q} --log {log:q} --record {params.record:q}"


rule resolve_tune_settings:
    """A tuning job's settings: the methods, the search space and budget, the noise rule, the networks."""
    output:
        "results/tune/{task}.settings.json",
    log:
        "logs/settings/tune/{task}.log",
    localrule: True
    conda:
        "envs/vcebench.yaml"
    params:
        record=lambda wc: wf.tune_json(config, wc.task),
    shell:
        "vcebench settings write {output:q} --log {log:q} --record {params.record:q}"


rule resolved_config:
    """The run's merged config (the config files and `--config` overrides, checked, the tuned files attached):
    what the jobs that need the whole task view read (`--resolved-config`)."""
    output:
        wf.CONFIG_SNAPSHOT,
    log:
        "logs/settings/config.log",
    localrule: True
    params:
        # a function: the config's `{task}` placeholders (config `external`) are no wildcards
        record=lambda wc: wf.config_snapshot(config),
    run:
        wf.write_settings(output[0], params.record, log=log[0])
