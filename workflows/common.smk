# Input functions shared by the rule files; the logic lives in vcebench.workflow.


wildcard_constraints:
    task=wf.task_pattern(config),
    method="[A-Za-z0-9_]+",
    dataset="[a-z]+",
    role="[a-z_]+",
    i=r"\d+",
    n=r"\d+",


def data_dir(dataset):
    return wf.data_dir(dataset)


def data_inputs(dataset):
    d = data_dir(dataset)
    return [f"{d}/train.npz", f"{d}/test.npz"] if d else []


def model_inputs(task, roles):
    """Trained-model sentinels (synthetic, or a real dataset's pmf / ddpm given as training settings)
    or canonical weight paths (real; checked at DAG build)."""
    wf.check_real_task(config, task, tuple(roles))
    ds = wf.dataset_of(config, task)
    return [wf.model_input(config, ds, role) for role in roles]


def method_model_inputs(task, method):
    """model_inputs of the networks ``method`` uses on ``task``; a method that does not exist on the task (a
    truth row on a real dataset) fails here, at DAG build."""
    wf.check_runs_on(wf.get_task(config, task), method)
    return model_inputs(task, wf.method_roles(method))


def task_methods(task):
    """The rows of ``task``: config `methods` that exist on it (a real task has no truth row)."""
    return wf.task_methods(config, task, METHODS)


def seeded_methods(task):
    """The rows of ``task`` that seed reruns cover: those vcebench generates (an imported one has no seed)."""
    return [m for m in task_methods(task) if m in GENERATED]


def data_arg(dataset):
    d = data_dir(dataset)
    return wf.shell_flags("--data", [d]) if d else ""


def pareto_methods():
    from vcebench.workflow import pareto_methods as pm

    return [m for m, _, _ in pm(config)]
