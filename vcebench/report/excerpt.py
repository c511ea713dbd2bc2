"""Numbers in the docs that cannot go stale: table excerpts cut from a snapshot's task tables.

A document marks each excerpt with a begin line naming its task, rows and columns, and an end line::

    <!-- begin:excerpt synthfaces_smile rows=fire,dime,input cols=FID,FR,sec_per_cf -->
    | Method | FID↓ | FR(%)↑ | s/CF↓ |
    ...
    <!-- end:excerpt -->

:func:`sync` rewrites what lies between them from ``<snapshot>/<task>.md`` (the snapshot's cells as printed
there, ranking marks included: a mark ranks the whole table, not the excerpt); ``vcebench report excerpt``
writes the files, ``--check`` fails when one differs (tests/test_excerpt.py runs it on the README).
"""

from __future__ import annotations

import re
from pathlib import Path

from .tables import _md_math, column_label, method_label

BEGIN = re.compile(r"^<!-- begin:excerpt (?P<task>\S+) rows=(?P<rows>\S+) cols=(?P<cols>\S+) -->$")
END = "<!-- end:excerpt -->"
_MARKS = "↑↓† "


class ExcerptError(ValueError):
    """A marker, row or column that the snapshot does not have (one line)."""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_excerpt(md: str, rows: list[str], cols: list[str]) -> str:
    """The lines of ``md``'s first table for the methods ``rows`` (in that order) and the metric columns
    ``cols`` (csv names, e.g. ``sec_per_cf``), with the Method column first."""
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    if len(lines) < 3:
        raise ExcerptError("the snapshot has no table")
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


def sync(text: str, snapshot: Path) -> str:
    """``text`` with every marked excerpt cut again from ``snapshot``'s task tables."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        if m is None:
            i += 1
            continue
        try:
            end = lines.index(END, i + 1)
        except ValueError:
            raise ExcerptError(f"line {i + 1}: {lines[i]} has no {END}") from None
        md_file = Path(snapshot) / f"{m['task']}.md"
        if not md_file.exists():
            raise ExcerptError(f"line {i + 1}: no table {md_file}")
        out.append(table_excerpt(md_file.read_text(), m["rows"].split(","), m["cols"].split(",")))
        out.append(END)
        i = end + 1
    return "\n".join(out)
