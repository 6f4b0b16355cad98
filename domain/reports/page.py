"""One self-contained HTML page: sections of facts, figures and notes. No script, no style sheet
or font fetched: the plots are PNG images inside the page, so it opens without a network.

Each fact and figure carries a key (`data-key` on its element), so a test reads what the page
shows by the name of the output it shows, not by the wording around it."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Fact:
    """A labelled value as shown; `key` names the output it shows (None: a caption only)."""

    label: str
    value: str
    key: str | None = None


@dataclass(frozen=True)
class Figure:
    """A plot as a PNG image (base64), its size in pixels and what it shows."""

    key: str
    title: str
    png_base64: str
    width: int
    height: int
    caption: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    facts: Sequence[Fact] = ()
    figures: Sequence[Figure] = ()
    notes: Sequence[str] = ()
    # A section that says something went wrong (a failed or diverged run, a config that does not
    # fit) is drawn as a warning.
    warning: bool = False


_STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
.subtitle { color: #555; margin-top: 0; }
section { border-top: 1px solid #ccc; padding-top: 0.5em; margin-top: 1.5em; }
section.warning { border-left: 4px solid #c0392b; padding-left: 1em; }
table { border-collapse: collapse; }
th { text-align: left; font-weight: normal; color: #555; padding: 2px 1.5em 2px 0; }
td { font-variant-numeric: tabular-nums; padding: 2px 0; }
figure { margin: 1em 0; }
figcaption { color: #555; font-size: 0.9em; }
img { max-width: 100%; height: auto; }
"""


def render(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """The page's HTML."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_text(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{_text(title)}</h1>",
        f'<p class="subtitle">{_text(subtitle)}</p>',
    ]
    for section in sections:
        parts.append(f"<section{' class="warning"' if section.warning else ''}><h2>{_text(section.title)}</h2>")
        if section.facts:
            parts.append("<table>")
            for fact in section.facts:
                key = f' data-key="{_text(fact.key)}"' if fact.key else ""
                parts.append(f"<tr><th>{_text(fact.label)}</th><td{key}>{_text(fact.value)}</td></tr>")
            parts.append("</table>")
        for figure in section.figures:
            parts.append(
                f'<figure data-key="{_text(figure.key)}"><img alt="{_text(figure.title)}" '
                f'width="{figure.width}" height="{figure.height}" '
                f'src="data:image/png;base64,{figure.png_base64}">'
                f"<figcaption>{_text(figure.caption or figure.title)}</figcaption></figure>"
            )
        parts.extend(f"<p>{_text(note)}</p>" for note in section.notes)
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _text(value: str) -> str:
    return html.escape(value, quote=True)
