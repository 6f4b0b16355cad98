"""The pages' building blocks (domain/reports/page.py, plots.py): what a page holds, escaped,
keyed for tests, and plots of the size they say."""

from __future__ import annotations

import base64
import struct

from domain.reports import page, plots


def png_size(figure: page.Figure) -> tuple[int, int]:
    """The PNG's own width and height (its IHDR chunk)."""
    data = base64.b64decode(figure.png_base64)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_a_plot_is_a_png_of_the_size_the_page_gives_it():
    figure = plots.line_chart(
        "loss",
        "Loss",
        [plots.Line("train", [1, 2, 3], [3.0, 2.0, 1.5])],
        xlabel="step",
        ylabel="loss",
        marks=[plots.Mark(2, "restart")],
        levels=[plots.Level(2.0, "predicted", 1.8, 2.2)],
    )
    assert png_size(figure) == (figure.width, figure.height) == (800, 320)
    bar = plots.stacked_bar("hbm", "HBM", [plots.Part("a", 1.0, "#888")], xlabel="GiB", limit=plots.Level(2, "cap"))
    assert png_size(bar) == (bar.width, bar.height) == (800, 220)


def test_the_page_escapes_text_and_keys_each_fact_and_figure():
    figure = plots.line_chart("loss", "Loss", [], xlabel="step", ylabel="loss")
    text = page.render(
        "run <1>",
        "a & b",
        [page.Section("facts", [page.Fact("final loss", "2.5", "final_loss"), page.Fact("x", "<y>")], [figure])],
    )
    assert "<title>run &lt;1&gt;</title>" in text
    assert '<td data-key="final_loss">2.5</td>' in text
    assert "<td>&lt;y&gt;</td>" in text
    assert f'<figure data-key="loss"><img alt="Loss" width="{figure.width}" height="{figure.height}"' in text
    # Nothing the page needs comes from the network.
    assert "http" not in text.replace(figure.png_base64, "")
