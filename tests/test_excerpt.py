"""The README's table excerpt is cut from results/reference/default and fails here when they differ."""

import shutil
from pathlib import Path

import pytest

from vcebench.cli import main
from vcebench.report.excerpt import ExcerptError, sync, table_excerpt

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "results/reference/default"


def test_the_readme_excerpts_equal_the_default_snapshot():
    text = (ROOT / "README.md").read_text()
    assert "<!-- begin:excerpt synthfaces_smile" in text
    assert sync(text, SNAPSHOT) == text, "README.md's excerpt differs: `vcebench report excerpt README.md`"


def test_a_changed_snapshot_cell_makes_the_check_fail(tmp_path, capsys):
    snap = tmp_path / "snap"
    shutil.copytree(SNAPSHOT, snap, ignore=shutil.ignore_patterns("*.png", "paper", "speed"))
    readme = tmp_path / "README.md"
    shutil.copyfile(ROOT / "README.md", readme)
    assert main(["report", "excerpt", "--check", "--snapshot", str(snap), str(readme)]) == 0
    md = snap / "synthfaces_smile.md"
    fire = next(ln for ln in md.read_text().splitlines() if ln.startswith("| FiRe |"))
    fid = fire.split("|")[2]  # FiRe's FID cell, whatever the snapshot holds
    md.write_text(md.read_text().replace(fire, fire.replace(f"|{fid}|", "| 99.99 ± 1 |", 1)))
    assert main(["report", "excerpt", "--check", "--snapshot", str(snap), str(readme)]) == 1
    assert "differs from" in capsys.readouterr().out
    assert main(["report", "excerpt", "--snapshot", str(snap), str(readme)]) == 0  # rewrites it
    assert "| FiRe | 99.99 ± 1 |" in readme.read_text()
    assert main(["report", "excerpt", "--check", "--snapshot", str(snap), str(readme)]) == 0


def test_an_unknown_row_or_column_is_one_clear_error():
    md = (SNAPSHOT / "synthfaces_smile.md").read_text()
    assert table_excerpt(md, ["truth"], ["FR"]).splitlines()[2] == "| *Ground truth* | 98.00 ± 2.5 |"
    with pytest.raises(ExcerptError, match="column S3"):
        table_excerpt(md, ["fire"], ["S3"])  # an x-ray column on a faces table
    with pytest.raises(ExcerptError, match="row nope"):
        table_excerpt(md, ["nope"], ["FR"])
