rule report_task:
    """Comparison tables (CSV / Markdown / LaTeX) and figures of one task."""
    input:
        config=RESOLVED,
        metrics=lambda wc: expand(
            "results/{task}/{method}/metrics.json",
            task=wc.task,
            method=task_methods(wc.task),
        ),
        profiles=lambda wc: expand(
            "results/{task}/{method}/profile.json",
            task=wc.task,
            method=[m for m in GENERATED if m in task_methods(wc.task)],
        ),
        cfs=lambda wc: expand(
            "results/{task}/{method}/counterfactuals.npz",
            task=wc.task,
            method=task_methods(wc.task),
        ),
        samples=lambda wc: expand(
            "results/{task}/{method}/samples.npz",
            task=wc.task,
            method=task_methods(wc.task),
        ),
    output:
        csv=report(
            "results/{task}.csv",
            caption="report/table.rst",
            category="{task}",
            subcategory="table",
            labels={"task": "{task}", "figure": "table"},
        ),
        md="results/{task}.md",
        tex="results/{task}.tex",
        validity="results/{task}_validity.json",
        qual=report(
            "results/{task}_qualitative.png",
            caption="report/qualitative.rst",
            category="{task}",
            subcategory="figures",
            labels={"task": "{task}", "figure": "qualitative"},
        ),
        eff=report(
            "results/{task}_efficiency.png",
            caption="report/efficiency.rst",
            category="{task}",
            subcategory="figures",
            labels={"task": "{task}", "figure": "efficiency"},
        ),
    log:
        "logs/report/{task}.log",
    benchmark:
        "benchmarks/report/{task}.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
        methods=lambda wc: wf.shell_words(task_methods(wc.task)),
    shell:
        "vcebench report task --task {wildcards.task} --methods {params.methods} {params.data} "
        "--out-dir results --resolved-config {input.config:q} > {log:q} 2>&1"


rule pairs:
    """Paired tests between the task's ranked rows (docs/protocol.md, "Paired comparisons"): the verdict behind the
    table's marks."""
    input:
        config=RESOLVED,
        metrics=lambda wc: expand(
            "results/{task}/{method}/metrics.json",
            task=wc.task,
            method=task_methods(wc.task),
        ),
        samples=lambda wc: expand(
            "results/{task}/{method}/samples.npz",
            task=wc.task,
            method=task_methods(wc.task),
        ),
    output:
        csv=report(
            "results/{task}_pairs.csv",
            caption="report/pairs.rst",
            category="{task}",
            subcategory="table",
            labels={"task": "{task}", "figure": "paired tests"},
        ),
        md="results/{task}_pairs.md",
    log:
        "logs/report/{task}_pairs.log",
    benchmark:
        "benchmarks/report/{task}_pairs.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        methods=lambda wc: wf.shell_words(task_methods(wc.task)),
    shell:
        "vcebench report pairs --task {wildcards.task} --methods {params.methods} "
        "--out-dir results --resolved-config {input.config:q} > {log:q} 2>&1"


rule summary_pairs:
    """Wins / ties / losses of the paired tests over the tasks and the mean-rank (critical-difference) diagram."""
    input:
        config=RESOLVED,
        tables=expand("results/{task}_pairs.csv", task=TASKS),
    output:
        md="results/summary_pairs.md",
        cd=report(
            "results/summary_cd.png",
            caption="report/summary_cd.rst",
            category="summary",
            labels={"figure": "mean ranks"},
        ),
    log:
        "logs/report/summary_pairs.log",
    benchmark:
        "benchmarks/report/summary_pairs.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        tasks=wf.shell_words(TASKS),
    shell:
        "vcebench report pairs --summary {params.tasks} --out-dir results "
        "--resolved-config {input.config:q} > {log:q} 2>&1"


rule gallery:
    """A gallery of counterfactuals per method (one |diff| scale for all methods of the task)."""
    input:
        config=RESOLVED,
        cfs=expand("results/{{task}}/{method}/counterfactuals.npz", method=METHODS),
        models=lambda wc: model_inputs(wc.task, ["classifier"]),
    output:
        [
            report(
                f"results/{{task}}/{method}/gallery.png",
                caption="report/gallery.rst",
                category="{task}",
                subcategory="galleries",
                labels={"task": "{task}", "figure": f"gallery: {method}"},
            )
            for method in METHODS
        ],
    log:
        "logs/report/{task}_gallery.log",
    benchmark:
        "benchmarks/report/{task}_gallery.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        data=lambda wc: data_arg(wf.dataset_of(config, wc.task)),
        methods=" ".join(METHODS),
    shell:
        "vcebench report gallery --task {wildcards.task} --methods {params.methods} {params.data} "
        "--out-dir results --resolved-config {input.config:q} > {log:q} 2>&1"


rule paper_tables:
    """The FiRe paper's Tables 1-6 and Figure 2 for the configured tasks (synthetic analogues by default)."""
    input:
        config=RESOLVED,
        metrics=expand(
            "results/{task}/{method}/metrics.json",
            task=TASKS,
            method=METHODS + config.get("paper_methods", []),
        ),
        samples=expand(  # the per-input records behind each table's marks (its paired tests)
            "results/{task}/{method}/samples.npz",
            task=TASKS,
            method=METHODS + config.get("paper_methods", []),
        ),
        profiles=expand(
            "results/{task}/{method}/profile.json", task=TASKS, method=GENERATED
        ),
    output:
        "results/paper/tables.md",
        "results/paper/tables.tex",
        "results/paper/figure2.png",
        expand(
            "results/paper/{name}_pairs.{ext}",
            name=TASKS + ["table4", "table5", "table6"],
            ext=["csv", "md"],
        ),
    log:
        "logs/report/paper.log",
    benchmark:
        "benchmarks/report/paper.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "vcebench report paper --out-dir results/paper --resolved-config {input.config:q} "
        "> {log:q} 2>&1"


rule paper:
    input:
        rules.paper_tables.output,


rule regression:
    """Compare the run's tables with results/reference/<preset>/ (CI); fails on a regression."""
    input:
        config=RESOLVED,
        tables=expand("results/{task}.csv", task=TASKS),
    output:
        "results/regression.md",
    log:
        "logs/report/regression.log",
    benchmark:
        "benchmarks/report/regression.tsv"
    conda:
        "envs/vcebench.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        ref=REFERENCE,
        tasks=wf.shell_words(TASKS),
    shell:
        "vcebench report regression --reference {params.ref:q} --tasks {params.tasks} "
        "--out {output:q} --resolved-config {input.config:q} > {log:q} 2>&1"
