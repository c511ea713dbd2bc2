"""The table excerpts of the README and docs/ are cut from results/reference/default and fail here when they
differ; a table that quotes results outside an excerpt is an archive of a named commit, or it fails."""

import shutil
import subprocess
from pathlib import Path

import pytest

from vcebench.cli import main
from vcebench.report.excerpt import ExcerptError, archives, csv_excerpt, sync, table_excerpt, unmarked_quotes

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "results/reference/default"


DOCS = sorted((ROOT / "docs").glob("*.md"))  # README.md: the test above


def test_the_readme_excerpts_equal_the_default_snapshot():
    text = (ROOT / "README.md").read_text()
    assert "<!-- begin:excerpt synthfaces_smile" in text
    assert sync(text, SNAPSHOT) == text, "README.md's excerpt differs: `vcebench report excerpt README.md`"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_docs_files_excerpts_equal_the_default_snapshot(doc):
    text = doc.read_text()
    assert sync(text, SNAPSHOT) == text, f"{doc.name}'s excerpts differ: `vcebench report excerpt {doc}`"


@pytest.mark.parametrize("doc", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_no_document_quotes_a_results_table_outside_an_excerpt_or_an_archive(doc):
    assert unmarked_quotes(doc.read_text(), SNAPSHOT) == []


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="a copy without its git history")
def test_every_archive_block_names_a_commit_of_this_history():
    named = [(doc.name, line, c) for doc in DOCS for line, c in archives(doc.read_text())]
    assert named, "docs/results.md archives earlier rounds' tables"
    for name, line, commit in named:
        found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
        assert found.returncode == 0, f"{name}:{line}: archive commit {commit} is not in this history"


_QUOTE = "| row | FID | FR (%) |\n|---|---:|---:|\n| FiRe | 3.30 ± 2.3 | 100 |\n| DiME (paper) | 44.1 | 24 |"


def test_a_hand_typed_results_table_fails_unless_it_is_an_excerpt_or_an_archive(tmp_path, capsys):
    doc = f"# notes\n\nMeasured today:\n\n{_QUOTE}\n"
    assert unmarked_quotes(doc, SNAPSHOT) == ["line 5: | row | FID | FR (%) |"]
    by_task = "| task | FiRe | DiME |\n|---|---|---|\n| synthfaces_smile | #5: 3.63 / 100 | #0: 3.88 / 100 |"
    assert unmarked_quotes(by_task, SNAPSHOT) == ["line 1: | task | FiRe | DiME |"]
    archived = f"<!-- begin:archive 0b63793 the smile table before the refresh -->\n{_QUOTE}\n<!-- end:archive -->"
    assert unmarked_quotes(archived, SNAPSHOT) == [] and archives(archived) == [(1, "0b63793")]
    # not results: a settings table names methods but no metric; a metric table names neither a method nor a task
    settings = "| method | paper setting | log-SNR |\n|---|---|---:|\n| FiRe | t = 0.4 | 0.81 |"
    networks = "| network | FID | steps |\n|---|---:|---:|\n| synthfaces pmf | 1.94 | 12800 |"
    assert unmarked_quotes(settings, SNAPSHOT) == [] and unmarked_quotes(networks, SNAPSHOT) == []
    with pytest.raises(ExcerptError, match="ends inside a block"):
        unmarked_quotes("<!-- begin:archive 0b63793 x -->\n" + _QUOTE, SNAPSHOT)
    path = tmp_path / "notes.md"
    path.write_text(doc)
    assert main(["report", "excerpt", "--check", "--snapshot", str(SNAPSHOT), str(path)]) != 0
    assert "quote results outside an excerpt or an archive block, first at line 5" in capsys.readouterr().err


def test_docs_results_cuts_the_verdict_paper_and_pareto_tables_from_the_snapshot():
    text = (ROOT / "docs/results.md").read_text()
    for src in ("synthfaces_age rows=", "paper/tables.md table=3", "synthxray_pacemaker_pareto.csv"):
        assert f"<!-- begin:excerpt {src}" in text


def _plant(snap: Path, name: str, old: str, new: str) -> None:
    f = snap / name
    assert old in f.read_text()
    f.write_text(f.read_text().replace(old, new, 1))


def test_a_changed_paper_table_or_pareto_csv_cell_makes_the_check_fail(tmp_path):
    snap = tmp_path / "snap"
    shutil.copytree(SNAPSHOT, snap, ignore=shutil.ignore_patterns("*.png", "speed"))
    doc = "\n".join(["<!-- begin:excerpt paper/tables.md table=3 rows=fire_paper cols=FR,S3 -->", "",
                     "<!-- end:excerpt -->", "<!-- begin:excerpt synthfaces_smile_pareto.csv rows=fire_K3 "
                     "cols=KID,FR_oracle -->", "", "<!-- end:excerpt -->"])
    text = sync(doc, snap)
    assert "| FiRe (paper) |" in text and "| FiRe (K3) |" in text
    table3 = (snap / "paper/tables.md").read_text().split("### Table 3")[1]
    row = next(ln for ln in table3.splitlines() if ln.startswith("| FiRe (paper) |"))
    _plant(snap, "paper/tables.md", row, row.replace("| FiRe (paper) |", "| FiRe (paper) | 1e9 |"))
    assert sync(doc, snap) != text  # Table 3's row moved, and only Table 3 is cut
    text = sync(doc, snap)
    csv = (snap / "synthfaces_smile_pareto.csv").read_text()
    k3 = next(ln for ln in csv.splitlines() if ln.startswith("fire_K3,"))
    fields = k3.split(",")
    fields[15] = "12.5"  # FR_oracle
    _plant(snap, "synthfaces_smile_pareto.csv", k3, ",".join(fields))
    assert "| FiRe (K3) | " in sync(doc, snap) and "| 12.50 |" in sync(doc, snap) and sync(doc, snap) != text


def test_csv_excerpt_prints_values_as_the_tables_do():
    csv = "method,n,KID,FR\nfire_K3,32,-0.2020431,96.875\nace_a3,100,,0.0\n"
    assert csv_excerpt(csv, ["fire_K3", "ace_a3"], ["n", "KID", "FR"]).splitlines() == [
        "| Method | n | KID | FR(%) |", "|---|---|---|---|", "| FiRe (K3) | 32 | -0.202 | 96.88 |",
        "| ACE (a3) | 100 | -- | 0 |"]


def test_a_malformed_marker_is_one_clear_error():
    with pytest.raises(ExcerptError, match="unknown or missing key colz"):
        sync("<!-- begin:excerpt synthfaces_smile rows=fire colz=FR -->\n<!-- end:excerpt -->", SNAPSHOT)
    with pytest.raises(ExcerptError, match="is not `<!-- begin:excerpt SOURCE"):
        sync("<!-- begin:excerpt synthfaces_smile -->\n<!-- end:excerpt -->", SNAPSHOT)
    with pytest.raises(ExcerptError, match="no table 9"):
        sync("<!-- begin:excerpt paper/tables.md table=9 rows=fire cols=FR -->\n<!-- end:excerpt -->", SNAPSHOT)


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
