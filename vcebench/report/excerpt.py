"""Numbers in the docs that cannot go stale: table excerpts cut from a snapshot's tables.

A document marks each excerpt with a begin line naming its source, rows and columns, and an end line::

    <!-- begin:excerpt synthfaces_smile rows=fire,dime,input cols=FID,FR,sec_per_cf -->
    | Method | FID↓ | FR(%)↑ | s/CF↓ |
    ...
    <!-- end:excerpt -->

The source is a task (its table ``<snapshot>/<task>.md``), another markdown file of the snapshot with
``table=N`` choosing its N-th table (``paper/tables.md table=3``: Table 3 of the paper tables), or a csv of the
snapshot (``synthfaces_smile_pareto.csv``: rows by its ``method`` column, each value printed as the tables print
it, without interval). Rows are method names, columns csv names (``sec_per_cf``). :func:`sync` rewrites what lies
between the lines (markdown cells as printed there, ranking marks included: a mark ranks the whole table, not
the excerpt); ``vcebench report excerpt`` writes the files, ``--check`` fails when one differs
(tests/test_excerpt.py runs it on the README and on every document in docs/).

Every other table that quotes results (a row or a column named by a method or a task, a number in its body) must
lie in an excerpt or in an archive block, which names the commit whose results it quotes::

    <!-- begin:archive 1a2b3c4 measured on networks/ref1 before the fair protocol -->
    | row | FID | FR |
    ...
    <!-- end:archive -->

:func:`unmarked_quotes` lists the lines that do neither; ``--check`` fails on them too.
"""

from __future__ import annotations

import re
from pathlib import Path

from .tables import _md_math, column_label, format_value, method_label

BEGIN = re.compile(r"^<!-- begin:excerpt (?P<src>\S+)(?P<keys>(?: \S+=\S+)+) -->$")
KEYS = ("rows", "cols", "table")
END = "<!-- end:excerpt -->"
ARCHIVE = re.compile(r"^<!-- begin:archive (?P<commit>[0-9a-f]{7,40})( [^>]*)? -->$")
ARCHIVE_END = "<!-- end:archive -->"
_MARKS = "↑↓† "


class ExcerptError(ValueError):
    """A marker, row or column that the snapshot does not have (one line)."""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tables(md: str) -> list[list[str]]:
    """The markdown tables of ``md``, each as its lines."""
    tables, cur = [], []
    for ln in md.splitlines() + [""]:
        if ln.startswith("|"):
            cur.append(ln)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def table_excerpt(md: str, rows: list[str], cols: list[str], table: int = 1) -> str:
    """The lines of ``md``'s ``table``-th table (1-based) for the methods ``rows`` (in that order) and the
    metric columns ``cols`` (csv names, e.g. ``sec_per_cf``), with the Method column first."""
    tables = _tables(md)
    if not 1 <= table <= len(tables) or len(tables[table - 1]) < 3:
        raise ExcerptError(f"the snapshot has no table {table} (it has {len(tables)})")
    lines = tables[table - 1]
    header = _cells(lines[0])
    names = [h.rstrip(_MARKS) for h in header]
    idx = [0]
    for c in cols:
        label = _md_math(column_label(c))
        if label not in names:
            raise ExcerptError(f"column {c} ({label}) is not in the snapshot's table")
        idx.append(names.index(label))
    body = {_cells(ln)[0].strip("*"): _cells(ln) for ln in lines[2:]}
    out = ["| " + " | ".join(header[i] for i in idx) + " |", "|" + "---|" * len(idx)]
    for m in rows:
        label = method_label(m)
        if label not in body:
            raise ExcerptError(f"row {m} ({label}) is not in the snapshot's table")
        out.append("| " + " | ".join(body[label][i] for i in idx) + " |")
    return "\n".join(out)


def csv_excerpt(csv_text: str, rows: list[str], cols: list[str]) -> str:
    """A markdown table of the csv's ``rows`` (its ``method`` column) and ``cols``, values as the tables print
    them (:func:`~vcebench.report.tables.format_value`)."""
    import csv

    reader = csv.DictReader(csv_text.splitlines())
    missing = [c for c in cols if c not in (reader.fieldnames or [])]
    if missing:
        raise ExcerptError(f"column {missing[0]} is not in the snapshot's csv")
    records = {r.get("method"): r for r in reader}
    out = ["| Method | " + " | ".join(_md_math(column_label(c)) for c in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for m in rows:
        if m not in records:
            raise ExcerptError(f"row {m} is not in the snapshot's csv")
        cells = []
        for c in cols:
            v = records[m][c]
            cells.append("--" if v in ("", None) else format_value(int(v) if v.lstrip("-").isdigit() else float(v)))
        out.append(f"| {method_label(m)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _parse(m: re.Match, line: str, lineno: int) -> tuple[str, dict[str, str]]:
    """The source and keys of a matched begin line (rows and cols required, table optional)."""
    keys = dict(kv.split("=", 1) for kv in m["keys"].split())
    bad = sorted(set(keys) - set(KEYS)) or [k for k in ("rows", "cols") if k not in keys]
    if bad:
        raise ExcerptError(f"line {lineno}: {line} has an unknown or missing key {bad[0]} (keys: {', '.join(KEYS)})")
    return m["src"], keys


def excerpt(snapshot: Path, src: str, keys: dict[str, str]) -> str:
    """The excerpt a begin line names, cut from ``snapshot``."""
    rows, cols = keys["rows"].split(","), keys["cols"].split(",")
    path = Path(snapshot) / (src if src.endswith((".md", ".csv")) else f"{src}.md")
    if not path.exists():
        raise ExcerptError(f"no table {path}")
    if path.suffix == ".csv":
        if "table" in keys:
            raise ExcerptError(f"{src}: a csv has one table (no table= key)")
        return csv_excerpt(path.read_text(), rows, cols)
    try:
        table = int(keys.get("table", 1))
    except ValueError:
        raise ExcerptError(f"{src}: table={keys['table']} is not a number") from None
    return table_excerpt(path.read_text(), rows, cols, table)


def sync(text: str, snapshot: Path) -> str:
    """``text`` with every marked excerpt cut again from ``snapshot``'s tables."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        if m is None:
            if lines[i].startswith("<!-- begin:excerpt"):
                raise ExcerptError(f"line {i + 1}: {lines[i]} is not `<!-- begin:excerpt SOURCE rows=... cols=... "
                                   "[table=N] -->`")
            i += 1
            continue
        try:
            end = lines.index(END, i + 1)
        except ValueError:
            raise ExcerptError(f"line {i + 1}: {lines[i]} has no {END}") from None
        src, keys = _parse(m, lines[i], i + 1)
        try:
            out.append(excerpt(snapshot, src, keys))
        except ExcerptError as e:
            raise ExcerptError(f"line {i + 1}: {e}") from None
        out.append(END)
        i = end + 1
    return "\n".join(out)


def _result_names(snapshot: Path) -> tuple[list[str], set[str]]:
    """The names a results table's rows or columns carry (every method's name and label, the snapshot's tasks), and
    the metric columns' names and labels (as the tables print them)."""
    from .. import registry

    names = [n for m in registry.method_names() for n in (m, registry.get_method_spec(m).label)]
    names += sorted(p.stem for p in Path(snapshot).glob("*.md") if p.stem != "README")
    columns = registry.column_directions()
    return names, set(columns) | {_md_math(column_label(c)) for c in columns}


def _plain(cell: str) -> str:
    return re.sub(r"[*`]|</?u>", "", cell).strip().rstrip(_MARKS)


def _names_row(cell: str, names: list[str]) -> bool:
    """A first-column cell that names a method or a task (``FiRe``, ``DiME (paper)``, ``FastDiME / -2``)."""
    cell = _plain(cell)
    return any(cell == n or cell.startswith((f"{n} (", f"{n} /", f"{n},", f"{n}_")) for n in names)


def _names_method(cell: str, names: list[str]) -> bool:
    """A header cell that is a method (``FiRe``, ``DiME (paper)``)."""
    cell = _plain(cell)
    return any(cell == n or re.fullmatch(rf"{re.escape(n)} \([^)]*\)", cell) for n in names)


def _names_metric(cell: str, metrics: set[str]) -> bool:
    """A header cell that holds a metric's name (``FID``, ``FR (%)``, ``truth FID``)."""
    return bool(set(re.split(r"[^\w³/]+", _plain(cell))) & metrics)


def _outside_blocks(text: str) -> list[str]:
    """``text``'s lines with every excerpt and archive block, markers included, blanked (line numbers kept)."""
    out, block = [], None
    for i, ln in enumerate(text.split("\n"), 1):
        if block is None and (BEGIN.match(ln) or ARCHIVE.match(ln)):
            block = END if BEGIN.match(ln) else ARCHIVE_END
        elif block is not None and ln.startswith("<!-- begin:"):
            raise ExcerptError(f"line {i}: {ln} opens inside another block (close it with {block})")
        elif block is None:
            out.append(ln)
            continue
        elif ln == block:
            block = None
        out.append("")
    if block is not None:
        raise ExcerptError(f"the document ends inside a block (no {block})")
    return out


def archives(text: str) -> list[tuple[int, str]]:
    """(line number, commit) of every archive block of ``text``."""
    return [(i, m["commit"]) for i, ln in enumerate(text.split("\n"), 1) if (m := ARCHIVE.match(ln))]


def unmarked_quotes(text: str, snapshot: Path) -> list[str]:
    """``line N: <table line>`` for the first line of every table outside excerpts and archive blocks that quotes
    results: a column names a metric (``FID``, ``FR (%)``), the header or the first column names a method or a task
    of ``snapshot`` (``FiRe``, ``DiME (paper)``, ``synthfaces_smile``), and a body cell holds a number."""
    names, metrics = _result_names(snapshot)
    lines, out, start = _outside_blocks(text), [], None
    for i, ln in enumerate(lines + [""]):
        if ln.startswith("|"):
            start = i if start is None else start
            continue
        if start is None:
            continue
        head, *rows = [_cells(t) for t in lines[start:i]]
        body = [r for r in rows if not set("".join(r)) <= set("-: ")]
        named = any(_names_method(c, names) for c in head) or any(_names_row(r[0], names) for r in body)
        if named and any(_names_metric(c, metrics) or _names_method(c, names) for c in head[1:]) \
                and any(re.search(r"\d", c) for r in body for c in r[1:]):
            out.append(f"line {start + 1}: {lines[start][:100]}")
        start = None
    return out
