# vcebench: FiRe vs DiME / FastDiME / MaskDiME on shared splits, classifiers and metrics.
#   snakemake --cores all                                          every configured synthetic task
#   snakemake --cores all results/synthfaces_smile.csv             one task
#   snakemake --cores all --configfile config/presets/quick.yaml   CI-size run of the same DAG
#   snakemake --cores all results/celeba_smile.csv                 real data (set datasets/models paths)
#   snakemake --cores all tune                                     pick settings on the validation split
import os
import sys

from snakemake.utils import min_version

from vcebench import workflow as wf
from vcebench.config.kernels import DEFAULT_CPU_ISA, pin_environment

min_version("8.0")


configfile: os.path.join(workflow.basedir, "config/config.yaml")


# every config value checked before any job runs (vcebench.workflow.check_config): a key written twice, the schema
# with the registry's names, hf:// weights (the local Hub cache), the method names, config/tuned/<task>.yaml
# (written by `snakemake tune`), every method and model setting (keys, types, choices, ranges), and the files as
# the jobs merge them; one line naming the key
wf.fail_fast(wf.check_config, config, workflow.configfiles, workflow.basedir)
wf.warn_empty_shards(config)
# every job's CPU kernels (config `cpu_isa`, vcebench/config/kernels.py): jobs inherit the variables set here
pin_environment(config.get("cpu_isa", DEFAULT_CPU_ISA))


envvars:
    "PATH",


# Rules call the `vcebench` CLI of the interpreter running snakemake (venv not activated is fine).
os.environ["PATH"] = (
    os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
)
# the run's merged config, read by the jobs that need the whole task view (rule resolved_config)
RESOLVED = ancient(wf.CONFIG_SNAPSHOT)
# A local run starts at most as many GPU jobs at once as GPUs are visible (`--resources gpu=N` overrides;
# cluster jobs are not limited here: each requests its GPUs from the scheduler).
if (
    config["device"] == "cuda"
    and workflow.local_exec
    and "gpu" not in workflow.global_resources
    and wf.visible_gpus() > 0
):
    workflow.global_resources["gpu"] = wf.visible_gpus()
REFERENCE = wf.reference_dir(config, workflow.basedir)
# `snakemake tune` writes here; the default run reads it
TUNED_DIR = wf.tuned_dir(config, workflow.basedir)


report: "workflows/report/workflow.rst"


workdir: os.path.join(workflow.basedir, config.get("workdir", "."))


TASKS = config["run_tasks"]
METHODS = config["methods"]
# The methods vcebench runs (explained, profiled): all but the imported `external_<name>` ones.
GENERATED = wf.generated_methods(METHODS)


include: "workflows/common.smk"
include: "workflows/settings.smk"
include: "workflows/data.smk"
include: "workflows/models.smk"
include: "workflows/counterfactuals.smk"
include: "workflows/external.smk"
include: "workflows/evaluate.smk"
include: "workflows/report.smk"
include: "workflows/tune.smk"
include: "workflows/seeds.smk"
include: "workflows/pareto.smk"


rule all:
    default_target: True
    input:
        expand("results/{task}.{ext}", task=TASKS, ext=["csv", "md", "tex"]),
        expand("results/{task}_pairs.{ext}", task=TASKS, ext=["csv", "md"]),
        "results/summary_pairs.md",
        "results/summary_cd.png",
        expand(
            "results/{task}_{fig}.png", task=TASKS, fig=["qualitative", "efficiency"]
        ),
        expand("results/{task}/{method}/gallery.png", task=TASKS, method=METHODS),
