"""The README is a map and docs/README.md an index (issue 29): sizes and links checked."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_is_short_and_has_no_overlong_line():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 120
    assert [i + 1 for i, line in enumerate(lines) if len(line) > 300] == []


def test_the_docs_index_links_every_page_and_only_existing_ones():
    docs = ROOT / "docs"
    index = (docs / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+)\)", index))
    pages = {p.name for p in docs.glob("*.md") if p.name != "README.md"}
    assert pages - linked == set()
    assert [target for target in linked if not (docs / target).exists()] == []


def test_the_readme_links_resolve():
    text = (ROOT / "README.md").read_text()
    targets = {t for t in re.findall(r"\]\(([^)#]+)\)", text) if "://" not in t}
    assert targets and [t for t in sorted(targets) if not (ROOT / t).exists()] == []
