"""The README and docs/ link to each other by relative paths and heading anchors: every link
must lead somewhere (a moved section or a renamed heading breaks one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_heading(page):
    for target in links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target} has no file"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name}: {target} has no such heading"


def test_the_check_finds_a_broken_anchor(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# Title: one, two\n\n[x](#title-one-two) [y](#missing)\n")
    assert "title-one-two" in anchors(page) and "missing" not in anchors(page)
    assert links(page) == ["#title-one-two", "#missing"]
