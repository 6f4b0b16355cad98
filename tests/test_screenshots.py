"""The docs' pictures of the pages are made by a script (tools/screenshots.py): it saves each
page whole from headless Chromium, and refuses a page that does not render."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from domain.reports import page, plots
from tests.support.browser import binaries
from tools import screenshots


def write_page(path: Path, png_base64: str | None = None) -> Path:
    figure = plots.line_chart(
        "loss", "Loss", [plots.Line("train", [0, 1, 2], [3.0, 2.0, 1.0])], xlabel="step", ylabel="loss"
    )
    if png_base64 is not None:
        figure = page.Figure(figure.key, figure.title, png_base64, figure.width, figure.height)
    path.write_text(
        page.render("A page", "for the pictures", [page.Section("Loss", [page.Fact("a", "1", "a")], [figure])])
    )
    return path


def test_each_page_is_saved_whole_at_the_docs_width(tmp_path):
    binaries()  # skips, saying how to install them, without Chromium
    run_page, fit_page = write_page(tmp_path / "run.html"), write_page(tmp_path / "fit.html")
    out = tmp_path / "images"
    assert screenshots.main(["--run-page", str(run_page), "--fit-page", str(fit_page), "--out", str(out)]) == 0
    for name in (screenshots.RUN_PAGE_PNG, screenshots.FIT_PAGE_PNG):
        with Image.open(out / name) as picture:
            assert picture.width == screenshots.WIDTH and picture.height > 320  # the plot and the text above it


def test_a_page_that_does_not_render_is_not_pictured(tmp_path):
    binaries()
    good, broken = write_page(tmp_path / "good.html"), write_page(tmp_path / "broken.html", png_base64="bm90IGEgcG5n")
    out = tmp_path / "images"
    with pytest.raises(SystemExit) as refused:
        screenshots.main(["--run-page", str(good), "--fit-page", str(broken), "--out", str(out)])
    assert f"{broken} does not render" in str(refused.value) and "plots not drawn ['loss']" in str(refused.value)
    assert not (out / screenshots.FIT_PAGE_PNG).exists()


def test_the_docs_pictures_are_the_scripts():
    """The README's picture and docs/pages.md's are the files the script writes."""
    from domain.paths import PROJECT_ROOT

    readme = (PROJECT_ROOT / "README.md").read_text()
    assert f"(docs/images/{screenshots.RUN_PAGE_PNG})" in readme
    pages = (PROJECT_ROOT / "docs" / "pages.md").read_text()
    assert f"(images/{screenshots.RUN_PAGE_PNG})" in pages and f"(images/{screenshots.FIT_PAGE_PNG})" in pages
    for name in (screenshots.RUN_PAGE_PNG, screenshots.FIT_PAGE_PNG):
        with Image.open(screenshots.IMAGES / name) as picture:
            assert picture.width == screenshots.WIDTH
