"""`snakemake --report`: the regression preset's HTML report holds every task's table and figures and a
gallery per method, and (where Debian's chromium is installed) renders in a headless browser without script
errors.

Slow: it runs the regression preset (`runs/regression/`, reused when up to date; .ci/run calls this test after
`make regression`, so there only the galleries are new).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PRESET = ROOT / "config/presets/regression.yaml"


def _smk(*args, timeout=3000):
    exe = shutil.which("snakemake", path=str(BIN)) or "snakemake"
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    return subprocess.run([exe, "--cores", "2", "--configfile", str(PRESET), *args], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=timeout)


def _preset_config() -> tuple[list[str], list[str]]:
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg.update(yaml.safe_load(PRESET.read_text()))
    return cfg["run_tasks"], cfg["methods"]


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> Path:
    run = _smk()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = tmp_path_factory.mktemp("report") / "report.html"
    r = _smk("--report", str(out), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def _embedded_results(html: str) -> list[str]:
    """The result file names the report embeds (its data is JSON inside the page)."""
    return sorted(set(re.findall(r"results/[A-Za-z0-9_./-]+\.(?:png|csv)", html)))


@pytest.mark.slow
def test_report_holds_every_table_and_figure(report_html):
    html = report_html.read_text()
    names = _embedded_results(html)
    tasks, methods = _preset_config()
    for t in tasks:
        for f in (f"results/{t}.csv", f"results/{t}_qualitative.png", f"results/{t}_efficiency.png"):
            assert f in names, (f, names)
        for m in methods:
            assert f"results/{t}/{m}/gallery.png" in names, (t, m)
    # the captions are rendered with the task's name (Jinja templates in workflows/report/)
    assert "Gallery of one method on" in html and "Cost against quality on" in html
    assert "{{ snakemake" not in html


@pytest.mark.slow
def test_report_renders_without_script_errors(report_html, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser: install Debian's `chromium` (apt-get install chromium), "
                    "as .ci/run does, to check that the report renders")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=15000", "--dump-dom", report_html.resolve().as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and not r.stdout:
        pytest.skip(f"{browser} could not start headless here (exit {r.returncode}): {r.stderr[-500:]}")
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln]
    errors = [ln for ln in console if re.search(r"Uncaught|Error|error", ln)]
    assert not errors, "\n".join(errors)
    # the page was built by its scripts: the static file has no <nav>, the rendered page has the report's
    # navigation, with the task categories
    dom = r.stdout
    assert "<nav" not in report_html.read_text() and "<nav" in dom, dom[:2000]
    tasks, _ = _preset_config()
    assert all(t in dom for t in tasks)
