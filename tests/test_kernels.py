"""The CPU kernels' instruction-set pin (vcebench/config/kernels.py): set before torch starts, lifted by config."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from vcebench.config.kernels import ENV_VAR, check_isa, describe, isa_from_config_files, pin_environment
from vcebench.core.errors import ConfigError

PINNED = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", ENV_VAR)
x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the pin is for x86-64 CPUs")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in PINNED}


def _capability(code: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_pin_sets_and_native_lifts_the_variables():
    env: dict[str, str] = {}
    pinned = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}
    assert pin_environment("avx2", env) == pinned
    assert env == {ENV_VAR: "avx2", **pinned}
    pin_environment("native", env)
    assert env == {ENV_VAR: "native"}
    # a user's own setting of a variable (not vcebench's value) survives `native`
    env = {"ATEN_CPU_CAPABILITY": "default"}
    pin_environment("native", env)
    assert env["ATEN_CPU_CAPABILITY"] == "default"


def test_config_files_choose_and_env_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("cpu_isa: avx2\nseed: 0\n")
    b.write_text("cpu_isa: native\n")
    assert isa_from_config_files([a]) == "avx2"
    assert isa_from_config_files([a, b]) == "native"  # later files are merged over earlier ones
    assert isa_from_config_files([tmp_path / "missing.yaml"]) == "avx2"  # the default
    monkeypatch.setenv(ENV_VAR, "native")
    assert isa_from_config_files([a]) == "native"
    with pytest.raises(ConfigError, match="cpu_isa.*avx512.*one of avx2, native"):
        check_isa("avx512")


def test_schema_accepts_only_known_values(cfg):
    from vcebench.config.load import validate

    validate({**cfg, "cpu_isa": "native"})
    with pytest.raises(ConfigError, match="cpu_isa"):
        validate({**cfg, "cpu_isa": "sse"})


@x86_only
def test_cli_start_pins_torch_before_it_runs_and_native_does_not(tmp_path):
    """What a job's torch reports: AVX2 when pinned (on any x86-64 CPU with AVX2), the CPU's own choice
    with ``native``; the record says which."""
    probe = ("import json, sys; from vcebench.config.kernels import pin_for_argv, record; pin_for_argv(sys.argv[1:]); "
             "import torch; torch.ones(2).sum(); print(json.dumps(record()))")
    native_cfg = tmp_path / "native.yaml"
    native_cfg.write_text("cpu_isa: native\n")
    env = _clean_env()
    own = _capability("import json, torch; print(json.dumps({'c': torch.backends.cpu.get_cpu_capability()}))", env)
    pinned = _capability(probe, env)
    assert pinned["cpu_isa"] == "avx2" and pinned["ATEN_CPU_CAPABILITY"] == "avx2"
    if own["c"] in ("AVX2", "AVX512"):
        assert pinned["torch_cpu_capability"] == "AVX2"
    native = subprocess.run([sys.executable, "-c", probe, "--config", str(native_cfg)], env=env,
                            capture_output=True, text=True, check=True)
    rec = json.loads(native.stdout.strip().splitlines()[-1])
    assert rec["cpu_isa"] == "native" and rec["torch_cpu_capability"] == own["c"]
    assert rec["ATEN_CPU_CAPABILITY"] is None


def test_footer_phrase_names_the_pin():
    rec = {"cpu_isa": "avx2", "torch_cpu_capability": "AVX2", "machine": "x86_64"}
    assert describe(rec) == "CPU kernels AVX2 (pinned, config `cpu_isa: avx2`; x86_64)"
    assert "not pinned" in describe({**rec, "cpu_isa": "native", "torch_cpu_capability": "AVX512"})
    assert describe(None) is None


def test_footer_states_the_kernels_of_the_rows():
    import pandas as pd

    from vcebench.report.footer import task_footer

    df = pd.DataFrame({"method": ["fire", "dime"], "FR": [90.0, 80.0]})
    rec = {"cpu_isa": "avx2", "torch_cpu_capability": "AVX2", "machine": "x86_64"}
    lines = task_footer(df, {"fire": {"kernels": rec}, "dime": {"kernels": rec}})
    assert any("CPU kernels AVX2 (pinned" in line for line in lines)
    lines = task_footer(df, {"fire": {"kernels": rec}, "dime": {"kernels": {**rec, "cpu_isa": "native"}}})
    assert any("CPU kernels differ between rows" in line for line in lines)


def test_record_names_the_kind_of_cpu():
    """metrics.json's `kernels` names the CPU (vendor and model): the kind a regression reference is kept for."""
    from vcebench.config.kernels import cpu_identity, cpu_kind, record

    cpu, kind = cpu_identity(), cpu_kind()
    assert record()["cpu"] == kind and kind
    assert kind == " ".join(v for v in (cpu["vendor"], cpu["model"]) if v) or not (cpu["vendor"] or cpu["model"])
    if os.path.exists("/proc/cpuinfo") and platform.machine() in ("x86_64", "AMD64"):
        assert cpu["vendor"] and cpu["model"]  # vendor_id and model name are read


def test_kernel_fingerprint_repeats_and_names_what_differs(tmp_path):
    """scripts/kernel_fingerprint.py: every probe hashes the same in a second process (pinned), and a
    comparison names exactly the probes whose hash differs (exit 1)."""
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "kernel_fingerprint.py")
    env = _clean_env()
    first = tmp_path / "a.json"
    subprocess.run([sys.executable, script, "--out", str(first)], env=env, check=True, capture_output=True)
    data = json.loads(first.read_text())
    assert data["kernels"]["cpu_isa"] == "avx2" and len(data["probes"]) >= 30
    assert {"conv2d_fwd[aten_im2col]", "matmul_256x512x384", "net_ddpm_unet_input_grad"} <= set(data["probes"])
    same = subprocess.run([sys.executable, script, "--compare", str(first)], env=env, capture_output=True, text=True)
    assert same.returncode == 0 and f"0 of {len(data['probes'])} probes differ" in same.stdout
    data["probes"]["sdpa"] = "0" * 16
    other = tmp_path / "b.json"
    other.write_text(json.dumps(data))
    # the comparison itself, of two saved files (no probe runs): it names the one probe that differs
    diff = subprocess.run([sys.executable, script, "--fingerprint", str(first), "--compare", str(other)], env=env,
                          capture_output=True, text=True)
    assert diff.returncode == 1 and diff.stdout.strip().endswith("sdpa") and "1 of" in diff.stdout
