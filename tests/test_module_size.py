"""Modules by duty: no module under vcebench/, methods/ or metrics/ runs past 400 lines unless one of its first
lines says why, as a comment ``# over 400 lines: <reason>`` (the marker, :data:`MARKER`)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vcebench", "methods", "metrics")
MAX_LINES = 400
MARKER = "# over 400 lines:"
HEAD = 3  # the marker is one of a module's first lines


def has_reason(text: str) -> bool:
    """Whether one of the first :data:`HEAD` lines is the marker followed by a reason."""
    for line in text.splitlines()[:HEAD]:
        if line.startswith(MARKER) and line[len(MARKER):].strip():
            return True
    return False


def oversized(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """The modules under ``root/<package>`` longer than :data:`MAX_LINES` lines without a reason, with their
    line counts."""
    found = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            n = len(text.splitlines())
            if n > MAX_LINES and not has_reason(text):
                found.append(f"{path.relative_to(root)}: {n} lines")
    return found


def test_no_module_runs_past_400_lines_without_a_reason():
    over = oversized(ROOT)
    assert not over, (f"modules over {MAX_LINES} lines: split them by duty, or give a reason on one of their "
                      f"first {HEAD} lines (`{MARKER} <reason>`):\n" + "\n".join(over))


def test_the_check_flags_a_long_module_and_accepts_a_reason(tmp_path):
    pkg = tmp_path / "vcebench"
    pkg.mkdir()
    body = '"""A module."""\n' + "x = 1\n" * MAX_LINES
    (pkg / "long.py").write_text(body)
    (pkg / "short.py").write_text("x = 1\n" * MAX_LINES)
    (pkg / "empty_reason.py").write_text(f"{MARKER}\n" + body)
    (pkg / "late_reason.py").write_text(body + f"{MARKER} too late\n")
    (pkg / "reasoned.py").write_text(f"{MARKER} one table read together\n" + body)
    assert oversized(tmp_path, ("vcebench",)) == [
        f"vcebench/empty_reason.py: {MAX_LINES + 2} lines", f"vcebench/late_reason.py: {MAX_LINES + 2} lines",
        f"vcebench/long.py: {MAX_LINES + 1} lines"]
