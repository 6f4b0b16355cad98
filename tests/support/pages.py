"""Reading the pages the product writes (domain/reports/) as text: each keyed fact's value, by
the output it shows, and each figure's key. The browser tests (tests/support/browser.py) read the
same keys from what Chromium renders."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from domain.reports.run_page import NOT_KNOWN


class _Keys(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.facts: dict[str, str] = {}
        self.figures: list[str] = []
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        key = dict(attrs).get("data-key")
        if key is None:
            return
        if tag == "td":
            self._open = key
            self.facts[key] = ""
        elif tag == "figure":
            self.figures.append(key)

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.facts[self._open] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._open = None


def page_keys(page: Path) -> tuple[dict[str, str], list[str]]:
    """(fact key -> the text shown, the figures' keys in order) of a page file."""
    parser = _Keys()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.facts, parser.figures


def shown_outputs(facts: dict[str, str], outs: dict[str, object]) -> dict[str, tuple[str, str]]:
    """The keyed facts that do not show their output's value: key -> (shown, the output's value
    as the page shows it, None as NOT_KNOWN). Empty when the page shows every output it names
    as the outputs hold it."""
    wrong = {}
    for key, text in facts.items():
        if key not in outs:
            continue
        value = outs[key]
        expected = NOT_KNOWN if value is None else str(value)
        if text != expected:
            wrong[key] = (text, expected)
    return wrong
