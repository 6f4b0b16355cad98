"""Reading the pages the product writes (domain/reports/) as text: each keyed fact's value, by
the output it shows, and each figure's key. The browser tests (tests/support/browser.py) read the
same keys from what Chromium renders."""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
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


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str, str | None]] = []
        self.figures: dict[str, dict[str, str]] = {}
        self.sections: dict[str, dict[str, object]] = {}
        self._cell: list[str] | None = None
        self._row: list[str] = []
        self._key: str | None = None
        self._figure: str | None = None
        self._caption = False
        self._section: dict[str, object] | None = None
        self._heading: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section":
            self._section = {"warning": found.get("class") == "warning", "text": ""}
        elif tag == "h2":
            self._heading = ""
        elif tag == "tr":
            self._row, self._key = [], None
        elif tag in ("th", "td"):
            self._cell = []
            if tag == "td":
                self._key = found.get("data-key")
        elif tag == "figure":
            self._figure = found.get("data-key") or ""
            self.figures[self._figure] = {"caption": ""}
        elif tag == "img" and self._figure is not None:
            self.figures[self._figure].update({k: v or "" for k, v in found.items()})
        elif tag == "figcaption":
            self._caption = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2" and self._section is not None and self._heading is not None:
            self.sections[self._heading] = self._section
            self._heading = None
        elif tag in ("th", "td") and self._cell is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and len(self._row) == 2:
            self.rows.append((self._row[0], self._row[1], self._key))
        elif tag == "figure":
            self._figure = None
        elif tag == "figcaption":
            self._caption = False
        elif tag == "section":
            self._section = None

    def handle_data(self, data: str) -> None:
        if self._heading is not None:
            self._heading += data
        if self._cell is not None:
            self._cell.append(data)
        if self._caption and self._figure is not None:
            self.figures[self._figure]["caption"] += data
        if self._section is not None:
            self._section["text"] = f"{self._section['text']}{data}\n"


@dataclass(frozen=True)
class PageText:
    """A page as its HTML says it: each table row (label, value, key or None), each figure's <img>
    attributes and caption by key, and each section's text and whether it is drawn as a warning,
    by its title."""

    rows: tuple[tuple[str, str, str | None], ...]
    figures: dict[str, dict[str, str]]
    sections: dict[str, dict[str, object]]

    @classmethod
    def of(cls, text: str) -> PageText:
        parser = _Page()
        parser.feed(text)
        return cls(tuple(parser.rows), parser.figures, parser.sections)

    @property
    def facts(self) -> dict[str, str]:
        """Keyed facts: key -> the text shown."""
        return {key: value for _, value, key in self.rows if key is not None}

    def row(self, label: str) -> str:
        [value] = [value for shown, value, _ in self.rows if shown == label]
        return value

    def section(self, title: str) -> str:
        return str(self.sections[title]["text"])

    def warnings(self) -> list[str]:
        return [title for title, section in self.sections.items() if section["warning"]]

    def png_size(self, key: str) -> tuple[int, int]:
        """The figure's PNG's own width and height (its IHDR chunk)."""
        data = base64.b64decode(self.figures[key]["src"].removeprefix("data:image/png;base64,"))
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])
        return width, height

    def stated_size(self, key: str) -> tuple[int, int]:
        """The size the page gives the figure's image (its width and height attributes)."""
        image = self.figures[key]
        return int(image["width"]), int(image["height"])
