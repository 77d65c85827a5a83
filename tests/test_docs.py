"""The README is a map and docs/README.md an index (issue 29): sizes and links checked."""

import re
import tomllib
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


def test_the_supported_pythons_are_the_ones_ci_tests():
    """``.ci/run`` builds and tests each Python of its ``PYTHONS``; pyproject.toml's classifiers
    and requires-python and the README's "Supported:" line name those and no others."""
    ci = re.search(r"^PYTHONS=\(([^)]*)\)", (ROOT / ".ci" / "run").read_text(), re.M).group(1).split()
    assert len(ci) >= 3 and ci == sorted(ci, key=lambda v: tuple(map(int, v.split("."))))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    versions = [
        c.rsplit(" :: ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert versions == ci and project["requires-python"] == f">={ci[0]}"
    supported = re.search(r"^Supported: (.*?)(?:\n\n|\Z)", (ROOT / "README.md").read_text(), re.M | re.S).group(1)
    assert re.findall(r"(?<![\d.])3\.\d+\b", supported) == ci
