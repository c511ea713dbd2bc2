"""The CPU kernels' code paths, pinned so that one commit computes the same numbers on any x86-64 CPU.

PyTorch picks its vectorised kernels (ATen), oneDNN its convolution code paths and MKL its matrix
products by what the CPU offers, and MKL also by who made it: an AVX-512 machine and an AVX2 machine, or
an Intel and an AMD one, run different float reductions, so the same training or counterfactual job gives
different weights, images and table cells on the two. vcebench pins all three for every job, through the
environment variables the libraries read when their first kernel runs (config key ``cpu_isa``):

- ``avx2`` (the default): ATen's AVX2 kernels (``ATEN_CPU_CAPABILITY``), oneDNN capped at AVX2
  (``ONEDNN_MAX_CPU_ISA``), and MKL's conditional-numerical-reproducibility branch ``COMPATIBLE``
  (``MKL_CBWR``: SSE2 without approximate instructions, fixed reductions; the one MKL branch Intel documents
  as giving the same results on Intel and non-Intel CPUs; its other branches are Intel-only);
- ``native``: the libraries choose (faster on an AVX-512 CPU); the tables may then differ from the
  committed ones.

Measured on an Intel Xeon (AVX-512): MKL's default branch, its AVX2 branch and COMPATIBLE give three
different float32 products of the same matrices, and a training step costs the same under each (the
UNets' time goes to oneDNN convolutions). docs/internals.md ("Identical numbers on every machine") has the
measurements and what is still machine-dependent.

The variables take effect only before torch runs its first kernel, so the pin happens where a process
starts: ``vcebench.cli.main`` (every job) and the Snakefile (which passes them to its jobs), and
``tests/conftest.py``. This module imports no torch; :func:`record` reads what torch actually chose, which
goes into every metrics.json and explain timing file and the table footer.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterable, Mapping

CPU_ISAS = ("avx2", "native")
DEFAULT_CPU_ISA = "avx2"
# The variable that overrides the config for a process and passes the choice from the Snakefile to its jobs.
ENV_VAR = "VCEBENCH_CPU_ISA"
# What each choice sets: ATen's dispatch (ATEN_CPU_CAPABILITY: default | avx2 | avx512), oneDNN's ISA cap and
# MKL's reproducible branch.
PIN_ENV: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
    "native": {},
}


def check_isa(isa: object, where: str = "config key `cpu_isa`") -> str:
    """``isa`` as one of :data:`CPU_ISAS`, or a :class:`~vcebench.core.errors.ConfigError` naming ``where``."""
    if isa is None:
        return DEFAULT_CPU_ISA
    if isa not in CPU_ISAS:
        from ..core.errors import ConfigError

        raise ConfigError(f"{where}: unknown CPU instruction set {isa!r} (one of {', '.join(CPU_ISAS)})")
    return str(isa)


def pin_environment(isa: str, environ: dict | None = None) -> dict[str, str]:
    """Set the variables of ``isa`` in ``environ`` (default ``os.environ``) and ``$VCEBENCH_CPU_ISA``;
    ``native`` removes vcebench's pin (a variable the user set to another value is left alone). Returns
    what was set. Call it before torch runs a kernel: afterwards it changes nothing in this process."""
    env = os.environ if environ is None else environ
    isa = check_isa(isa)
    env[ENV_VAR] = isa
    for values in PIN_ENV.values():
        for k, v in values.items():
            if env.get(k) == v and k not in PIN_ENV[isa]:
                del env[k]
    env.update(PIN_ENV[isa])
    return dict(PIN_ENV[isa])


def isa_from_config_files(paths: Iterable[str] | None) -> str:
    """The ``cpu_isa`` of the deep-merged config files (default ``config/config.yaml`` when it exists),
    read without validating the rest (the job validates it later); ``$VCEBENCH_CPU_ISA`` overrides."""
    if os.environ.get(ENV_VAR):
        return check_isa(os.environ[ENV_VAR], f"${ENV_VAR}")
    from .load import DEFAULT_CONFIG, read_yaml

    files = list(paths or ([DEFAULT_CONFIG] if DEFAULT_CONFIG.exists() else []))
    isa = None
    for f in files:
        try:
            data = read_yaml(f)
        except Exception:  # noqa: BLE001 (a broken file is reported by the config loader, with its name)
            continue
        if isinstance(data, Mapping) and "cpu_isa" in data:
            isa = data["cpu_isa"]
    return check_isa(isa)


def isa_from_settings_file(path: str) -> str:
    """The ``cpu_isa`` of a job's settings file (:mod:`vcebench.protocol.resolve`: JSON, read as YAML);
    ``$VCEBENCH_CPU_ISA`` overrides."""
    if os.environ.get(ENV_VAR):
        return check_isa(os.environ[ENV_VAR], f"${ENV_VAR}")
    from .load import read_yaml

    data = read_yaml(path)
    config = data.get("config") if isinstance(data, Mapping) else None
    return check_isa(config.get("cpu_isa") if isinstance(config, Mapping) else None, f"{path}: `config.cpu_isa`")


def pin_for_argv(argv: list[str]) -> None:
    """Pin the kernels of this process for the ``--config`` files on a command line (or the ``--settings`` file
    of a job: its ``config.cpu_isa``), before torch starts. A process that already imported torch is left as it
    is (:func:`record` then says what it runs)."""
    if "torch" in sys.modules:
        return
    configs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"]
    configs += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    settings = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--settings"]
    try:
        isa = isa_from_settings_file(settings[-1]) if settings else isa_from_config_files(configs)
    except Exception:  # noqa: BLE001 (a bad value is the config check's error, not a crash before it)
        isa = DEFAULT_CPU_ISA
    pin_environment(isa)


def cpu_identity() -> dict[str, str]:
    """This CPU's ``vendor`` (``vendor_id``: ``GenuineIntel``, ``AuthenticAMD``, ...) and ``model`` (``model
    name``) from /proc/cpuinfo; ``platform.processor()`` (or empty strings) where there is no such file."""
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("vendor_id", "model name") and key not in found:
                    found[key] = value.strip()
                if len(found) == 2:
                    break
    except OSError:
        pass
    return {"vendor": found.get("vendor_id", ""), "model": found.get("model name", platform.processor())}


def cpu_kind() -> str:
    """One line naming this kind of CPU, ``vendor model`` (e.g. ``AuthenticAMD AMD EPYC``): the pin makes the
    instruction sets equal, but not every reduction order (module docstring), so training from scratch can
    still round differently on another kind (``vcebench.report.regression`` keeps a reference per kind)."""
    cpu = cpu_identity()
    return " ".join(v for v in (cpu["vendor"], cpu["model"]) if v) or platform.machine() or "unknown"


def record() -> dict[str, object]:
    """What this process's kernels run: the requested pin, the variables, the capability torch chose
    (``torch.backends.cpu.get_cpu_capability()``, e.g. ``AVX2``) and the CPU, for metrics.json and the
    timing files."""
    import torch

    return {
        "cpu_isa": os.environ.get(ENV_VAR, "unset"),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{k: os.environ.get(k) for k in PIN_ENV["avx2"]},
        "machine": platform.machine(),
        "cpu": cpu_kind(),
    }


def describe(rec: Mapping | None) -> str | None:
    """One phrase for the table footer: ``CPU kernels AVX2 (pinned, config `cpu_isa`)``."""
    if not rec:
        return None
    cap = rec.get("torch_cpu_capability", "?")
    how = "pinned, config `cpu_isa: avx2`" if rec.get("cpu_isa") == "avx2" else "not pinned (`cpu_isa: native`)"
    return f"CPU kernels {cap} ({how}; {rec.get('machine', '?')})"
