"""The pages as a person sees them: opened in a real headless Chromium (tests/support/browser.py),
their plots are drawn at the size the page gives them, the console stays quiet and the numbers
read from the page are the ones it was given. The harness's own failures are shown too: a broken
image is seen as not drawn, a throwing script and a missing file as console errors."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from domain.reports import page, plots
from tests.support.browser import Browser, chromium

FACTS = {"final_loss": "2.4817", "steps": "120", "tokens_per_second": "18,432.5", "peak_hbm_gib": "27.3"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as opened:
        yield opened


def report(tmp_path: Path) -> tuple[Path, list[page.Figure]]:
    figures = [
        plots.line_chart(
            "loss",
            "Loss",
            [
                plots.Line("train", [1, 2, 3, 4], [3.1, 2.7, 2.5, 2.48]),
                plots.Line("eval", [2, 4], [2.9, 2.6], dashed=True),
            ],
            xlabel="step",
            ylabel="loss",
            marks=[plots.Mark(3, "restart")],
            levels=[plots.Level(2.5, "predicted", 2.3, 2.7)],
        ),
        plots.stacked_bar(
            "hbm",
            "HBM per chip",
            [plots.Part("weights", 8.0, "#2980b9"), plots.Part("activations", 19.3, "#27ae60")],
            xlabel="GiB",
            limit=plots.Level(31.25, "capacity"),
        ),
    ]
    facts = [page.Fact(key.replace("_", " "), value, key) for key, value in FACTS.items()]
    text = page.render(
        "run r-1",
        "a run's page",
        [page.Section("Outcome", facts, figures[:1], notes=["a note"]), page.Section("Memory", (), figures[1:])],
    )
    path = tmp_path / "run.html"
    path.write_text(text)
    return path, figures


def test_the_plots_render_and_the_page_shows_the_runs_numbers(browser: Browser, tmp_path: Path) -> None:
    path, figures = report(tmp_path)
    seen = browser.open(path)
    assert seen.console_errors == ()
    assert seen.title == "run r-1"
    assert [image.key for image in seen.images] == ["loss", "hbm"]
    for figure in figures:
        image = seen.image(figure.key)
        assert image.complete and image.rendered, image
        assert (image.natural_width, image.natural_height) == (figure.width, figure.height)
        # The window is wider than the page's 1000 px column: drawn at the size the page gives.
        assert (image.width, image.height) == (figure.width, figure.height)
    assert dict(seen.facts) == FACTS
    assert "a note" in seen.text and "Memory" in seen.text


def test_a_full_page_screenshot_is_the_whole_page(browser: Browser, tmp_path: Path) -> None:
    path, _ = report(tmp_path)
    png = browser.screenshot(path, tmp_path / "run.png", width=1100)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1100
    # The whole document, not the first screen: both plots (320 and 220 px high) and the text.
    assert height == browser.driver.execute_script("return document.documentElement.scrollHeight")
    assert height > 320 + 220 + 200


def test_an_image_that_does_not_decode_is_seen_as_not_rendered(browser: Browser, tmp_path: Path) -> None:
    broken = page.Figure("loss", "Loss", "iVBORw0KGgoAAAANSUhEUgAAnotapng", 800, 320)
    path = tmp_path / "broken.html"
    path.write_text(page.render("broken", "", [page.Section("s", (), [broken])]))
    image = browser.open(path).image("loss")
    assert image.complete and not image.rendered
    assert (image.natural_width, image.natural_height) == (0, 0)


def test_a_throwing_script_and_a_missing_image_are_console_errors(browser: Browser, tmp_path: Path) -> None:
    path = tmp_path / "errors.html"
    path.write_text(
        "<!DOCTYPE html><html><head><title>errors</title></head><body>"
        '<figure data-key="gone"><img src="missing.png" width="10" height="10"></figure>'
        "<script>throw new Error('page script failed');</script></body></html>"
    )
    seen = browser.open(path)
    assert any("page script failed" in error for error in seen.console_errors), seen.console_errors
    assert any("missing.png" in error for error in seen.console_errors), seen.console_errors
    assert not seen.image("gone").rendered
    # What one page logged is not blamed on the next.
    assert browser.open(report(tmp_path)[0]).console_errors == ()
