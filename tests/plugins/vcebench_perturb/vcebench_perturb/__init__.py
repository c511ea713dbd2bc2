"""A tiny out-of-tree vcebench plug-in (tests/test_plugins.py): the method ``perturb`` and the metric ``Linf``.

Registration only (no torch here): the method is a :class:`~vcebench.registry.MethodSpec` the entry point
``vcebench.methods: perturb`` points at, with its dataclass and factory as lazy import strings; the metric
registers itself with the ``@vcebench.registry.metric`` decorator in ``linf.py`` (entry point
``vcebench.metrics: Linf`` points at that module).
"""

from vcebench.registry import method_spec

PERTURB = method_spec("perturb", "Perturb (plug-in)", roles=("classifier",),
                      params="vcebench_perturb.method:PerturbParams", factory="vcebench_perturb.method:Perturb")
