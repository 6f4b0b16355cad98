"""The README and docs/ link to each other by relative paths and heading anchors, and the code
names docs sections by their headings: every link must lead to a file and a heading that exist
(a moved section or a renamed heading breaks one), and every page stays a guide a reader can scan
(no long stretch without a heading)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# An inline link or image: [text](target) or [text](target "title").
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
# docs/<page>.md, "<heading>" or docs/<page>.md ("<heading>": how the code names a section.
CODE_REFERENCE = re.compile(r"docs/([\w.-]+\.md)[,:]?\s+\(?\"([^\"]+)")
# Generated text sits between <!-- name ... --> and <!-- /name --> and has its own tests.
GENERATED = re.compile(r"^<!-- (/?)([\w:-]+)")

LONGEST_SECTION = 60  # lines of a docs page without a heading
LONGEST_README_PARAGRAPH = 8  # lines
LONGEST_README_CELL = 200  # characters


def prose_lines(page: Path) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    out, in_code = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if FENCE.match(line):
            in_code = not in_code
        elif not in_code:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: the rendered text (code spans and link targets
    dropped to their text), lower case, every character but letters, digits, `_`, `-` and spaces
    dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(page: Path) -> list[tuple[int, str]]:
    """(line number, text) of every heading of a page."""
    found = []
    for number, line in prose_lines(page):
        match = HEADING.match(line)
        if match:
            found.append((number, match.group(2)))
    return found


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors; a repeated heading gets -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for _, text in headings(page):
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """Relative link targets of a page, leaving out code and links with a scheme (https:, mailto:)."""
    targets = []
    for _, line in prose_lines(page):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                targets.append(target)
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_heading(page):
    for target in links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target} has no file"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name}: {target} has no such heading in {linked.name}"


def code_files() -> list[Path]:
    """The project's Python files. The walk never enters a dot directory (the virtualenvs hold
    tens of thousands of files: rglob walked them all, 6 s of this test's 7 here)."""
    found = []
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = [
            name for name in subdirectories if not name.startswith(".") and not name.endswith(".egg-info")
        ]
        found += [Path(directory, name) for name in files if name.endswith(".py")]
    return found


def test_every_docs_section_the_code_names_exists():
    """A comment or message that sends a reader to `docs/<page>.md, "<heading>"` names a page that
    exists and the start of one of its headings (or of a bold label in a list)."""
    missing = []
    for path in code_files():
        # A reference may run over lines of a comment: joined without the comment's own marks.
        text = " ".join(line.strip().lstrip("#").strip() for line in path.read_text(errors="replace").splitlines())
        for page_name, quoted in CODE_REFERENCE.findall(text):
            page = DOCS / page_name
            if not page.exists():
                missing.append(f"{path.relative_to(ROOT)}: docs/{page_name} does not exist")
                continue
            start = quoted.rstrip(" .,;:)").lower()
            labels = [text.lower() for _, text in headings(page)]
            labels += [m.lower() for m in re.findall(r"\*\*([^*]+)\*\*", page.read_text())]
            if not any(label.startswith(start) for label in labels):
                missing.append(f'{path.relative_to(ROOT)}: docs/{page_name} has no section "{quoted}"')
    assert missing == []


def long_sections(page: Path) -> list[str]:
    """Stretches of a page longer than LONGEST_SECTION lines without a heading, not counting
    generated blocks (a table a generator writes cannot carry headings of its own)."""
    found, start, length, generated = [], "(top)", 0, None
    for number, line in prose_lines(page):
        marker = GENERATED.match(line)
        if marker:
            generated = None if marker.group(1) else marker.group(2)
            continue
        if HEADING.match(line):
            start, length = f"line {number}: {line}", 0
        elif generated is None:
            length += 1
            if length == LONGEST_SECTION + 1:
                found.append(start)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_section_runs_long_without_a_heading(page):
    assert long_sections(page) == []


def test_the_readme_is_short_paragraphs_and_narrow_tables():
    paragraph, longest, widest = 0, 0, 0
    for _, line in prose_lines(ROOT / "README.md"):
        if line.startswith("|"):
            widest = max([widest, *(len(cell.strip()) for cell in line.strip("|").split("|"))])
        if not line.strip() or line.startswith(("#", "|", "- ")):
            paragraph = 1 if line.startswith("- ") else 0
        else:
            paragraph += 1
        longest = max(longest, paragraph)
    assert longest <= LONGEST_README_PARAGRAPH and widest <= LONGEST_README_CELL, (longest, widest)


def test_docs_events_lists_every_event_kind_and_its_fields():
    """docs/events.md's table: one row per kind the trainer writes, each with the kind's fields."""
    from domain.training.job_events import EVENT_KINDS, NOTICE_SAVED_EVENT

    text = (DOCS / "events.md").read_text()
    rows = {match.group(1): match.group(0) for match in re.finditer(r"^\| `([a-z_]+)` \|.*$", text, flags=re.MULTILINE)}
    assert set(rows) == {*EVENT_KINDS, NOTICE_SAVED_EVENT}
    for kind, model in EVENT_KINDS.items():
        fields = set(model.model_fields) - {"event"}
        named = set(re.findall(r"`([a-z_]+)`", rows[kind].split("|")[4]))
        assert named == fields, kind


def test_the_checks_find_what_they_look_for(tmp_path):
    page = tmp_path / "a.md"
    page.write_text(
        "# Title: one, two\n\n## Try it: `./scripts/smoke`\n\n### Measured\n\n### Measured\n\n"
        "```\n# not a heading\n[z](#in-code)\n```\n\n"
        '[x](#title-one-two) [y](#missing) `[c](#code)` [w](https://example.com) [t](b.md#x "title")\n'
        + "text\n" * 61
        + "<!-- table:x (generated) -->\n"
        + "| row |\n" * 70
        + "<!-- /table:x -->\n"
    )
    assert anchors(page) == {"title-one-two", "try-it-scriptssmoke", "measured", "measured-1"}
    assert links(page) == ["#title-one-two", "#missing", "b.md#x"]
    assert long_sections(page) == ["line 7: ### Measured"]
    assert slug("Checkpoints (`/data`)") == "checkpoints-data"
    assert slug("The head's node") == "the-heads-node"
    assert slug("[Docs](x.md) and 1. Prepare") == "docs-and-1-prepare"
    # Built in two parts, so that this file holds no reference of its own.
    sample = "(docs/" + 'spot.md, "The timeline") and docs/' + 'spot.md ("Will the'
    assert CODE_REFERENCE.findall(sample) == [("spot.md", "The timeline"), ("spot.md", "Will the")]
