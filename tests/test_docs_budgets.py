"""docs/networks.md's table of the generators' training budgets is the cards' (vcebench models budget)."""

from __future__ import annotations

import re
from pathlib import Path

from vcebench.models.shipping.cards import budgets_table, read_card

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- begin:budgets (?P<set>\S+) -->\n(?P<body>.*?)<!-- end:budgets -->", re.S)


def set_table(networks: Path) -> str:
    cards = [read_card(networks, ds, role) for ds in ("synthfaces", "synthxray") for role in ("ddpm", "pmf")]
    return budgets_table([c for c in cards if c])


def sync_budgets(text: str, root: Path = ROOT) -> str:
    """``text`` with every budgets block rewritten from its set's cards."""
    return BLOCK.sub(lambda m: f"<!-- begin:budgets {m['set']} -->\n{set_table(root / m['set'])}<!-- end:budgets -->",
                     text)


def test_the_docs_budget_table_is_the_cards():
    text = (ROOT / "docs/networks.md").read_text()
    assert BLOCK.search(text), "docs/networks.md has no budgets block"
    assert sync_budgets(text) == text, "docs/networks.md's budgets differ from the cards: rewrite the block"


def test_both_sets_have_the_same_budgets():
    assert set_table(ROOT / "networks/ref1") == set_table(ROOT / "networks/ref2")


def test_a_changed_card_fails_the_docs_table(tmp_path):
    """Planted: one generator's counted FLOPs changed in a copy of the set."""
    import json
    import shutil

    shutil.copytree(ROOT / "networks/ref1", tmp_path / "networks/ref1")
    p = tmp_path / "networks/ref1/synthfaces/pmf/card.json"
    card = json.loads(p.read_text())
    card["budget"]["flops"] = int(card["budget"]["flops"] * 1.1)
    p.write_text(json.dumps(card))
    text = (ROOT / "docs/networks.md").read_text()
    assert sync_budgets(text, tmp_path) != text
