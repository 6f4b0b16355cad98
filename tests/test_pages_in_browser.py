"""The product's own pages as a person sees them, in a real headless Chromium (tests/support/
browser.py): a run's page for a run with an estimate, one restarted from a checkpoint, a diverged
run and a run that failed before its first step (tests/support/run_logs.py reads each from its job
log), and the fit check's page (built as tests/test_fit_page.py builds it). For each: the console
stays quiet, every plot is drawn at the size its PNG says, and the numbers the browser reads
under each key are the outputs (a run's records' fields, the fit result's as its report prints
them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from domain.perf.fit_results import FitResult, ways_to_fit
from domain.reports.fit_page import fit_page
from tests.support.browser import Browser, PageView, chromium
from tests.support.fit_results import NOT_FITTING, fitting
from tests.support.pages import PageText, shown_outputs
from tests.support.run_logs import (
    ESTIMATE,
    FAILURE,
    Run,
    diverged_run,
    failed_at_start_run,
    normal_run,
    restarted_run,
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as opened:
        yield opened


def opened(browser: Browser, text: str, path: Path) -> tuple[PageView, PageText]:
    """The page written to `path`, as Chromium shows it and as its HTML says it; no console
    error, and every figure drawn at the size its PNG says, which is the size the page gives it."""
    path.write_text(text, encoding="utf-8")
    view, html = browser.open(path), PageText.of(text)
    assert view.console_errors == ()
    assert [image.key for image in view.images] == list(html.figures)
    for image in view.images:
        stated = html.stated_size(image.key)
        assert image.rendered, image
        assert (image.natural_width, image.natural_height) == html.png_size(image.key) == stated
        assert (image.width, image.height) == stated
    # What the browser reads under each key is what the HTML holds there.
    assert dict(view.facts) == html.facts
    return view, html


def warning_sections(browser: Browser) -> list[str]:
    """The sections the open page draws as warnings (the red rule at their left), by title."""
    return browser.driver.execute_script(
        """return Array.from(document.querySelectorAll("section"))
            .filter((s) => getComputedStyle(s).borderLeftWidth === "4px")
            .map((s) => s.querySelector("h2").textContent);"""
    )


def shows_the_outputs(view: PageView, run: Run, estimate=None) -> None:
    outputs = run.outputs(estimate)
    assert set(view.facts) <= set(outputs), set(view.facts) - set(outputs)
    assert shown_outputs(dict(view.facts), outputs) == {}


@pytest.mark.parametrize("made", [normal_run, restarted_run], ids=["normal", "restarted"])
def test_a_run_page_with_an_estimate_in_the_browser(browser: Browser, tmp_path: Path, made) -> None:
    run = made()
    view, _ = opened(browser, run.page(ESTIMATE), tmp_path / "report.html")
    assert view.title == f"Run {run.header.submission_id}"
    assert [image.key for image in view.images] == ["loss", "step_seconds", "wall_time"]
    shows_the_outputs(view, run, ESTIMATE)
    for key in ("estimate.step_seconds", "measured_mfu", "estimate.job_dollars", "measured_dollars"):
        assert view.facts[key] != "not known", key
    assert warning_sections(browser) == []
    assert f"Prediction: {ESTIMATE.band}" in view.text
    if run.series.restarts_at:
        assert "Restarts from a checkpoint at steps 10." in view.text


def test_a_diverged_run_page_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    run = diverged_run()
    view, _ = opened(browser, run.page(), tmp_path / "report.html")
    shows_the_outputs(view, run)
    assert view.facts["diverged"] == "True" and view.facts["final_loss"] == "not known"
    assert warning_sections(browser) == ["Outcome"]
    assert "the curve ends where the run diverged (marked)" in view.text
    assert "No prediction" in view.text and "No price" in view.text


def test_a_run_that_failed_before_its_first_step_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    run = failed_at_start_run()
    view, html = opened(browser, run.page(ESTIMATE), tmp_path / "report.html")
    shows_the_outputs(view, run, ESTIMATE)
    assert [image.key for image in view.images] == ["wall_time"]
    assert view.facts["status"] == "FAILED" and view.facts["steps_completed"] == "0"
    assert warning_sections(browser) == ["Outcome"]
    assert FAILURE in view.text and "logged no step" in view.text
    # The phases it reached, as the browser shows their row.
    [row] = [
        row.text
        for row in browser.driver.find_elements(By.CSS_SELECTOR, "tr")
        if row.text.startswith("worker group 0 start")
    ]
    assert html.row("worker group 0 start") in row and "trainer_start 7.5 s" in row


def fit_facts(result: FitResult) -> dict[str, str]:
    """A fitting result's keyed values, formatted as tests/test_fit_page.py holds them to the
    result's fields and to the text report."""
    prediction = result.prediction
    assert prediction is not None and prediction.band is not None
    low, high = prediction.band.step_range(prediction.step_seconds) or (0.0, 0.0)
    gib = ("argument_gib", "temp_gib", "output_gib", "alias_gib", "total_gib", "usable_gib")
    seconds = ("compute_seconds", "exposed_ici_seconds", "exposed_dcn_seconds", "exposed_host_seconds")
    return {
        "fits": "FITS",
        "slice_type": f"{result.slices} x {result.slice_type}",
        "chips": str(result.chips),
        "compile_seconds": f"{result.compile_seconds:.0f} s (to buffer assignment)",
        **{key: f"{getattr(result, key):.2f} GiB" for key in gib},
        "headroom_percent": f"{result.headroom_percent:.1f}%",
        "step_seconds": f"{prediction.step_seconds:.3f} s",
        "step_range": f"{low:.3f} to {high:.3f} s",
        "band": prediction.band.describe(prediction.step_seconds),
        "tokens_per_second_per_chip": f"{prediction.tokens_per_second_per_chip:,.0f}",
        "mfu": f"{100 * prediction.mfu:.1f}%",
        **{key: f"{getattr(prediction, key):.3f} s" for key in seconds},
        "calibrated_on": ", ".join(prediction.calibrated_on),
        **{f"maxtext.{key}": value for key, value in result.configuration["maxtext"].items()},
    }


def test_a_fit_check_page_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    result = fitting()
    view, _ = opened(browser, fit_page(result), tmp_path / "fit.html")
    assert [image.key for image in view.images] == ["hbm", "step_time"]
    facts = dict(view.facts)
    # Weights and both AdamW moments in bfloat16: the parameters a third of the arguments.
    derived = {key: float(facts.pop(key).split()[0]) for key in ("parameter_gib", "optimizer_state_gib")}
    assert derived["parameter_gib"] == pytest.approx(result.argument_gib / 3, abs=0.005)
    assert derived["optimizer_state_gib"] == pytest.approx(2 * result.argument_gib / 3, abs=0.005)
    assert facts == fit_facts(result)
    assert warning_sections(browser) == []


def test_a_fit_check_page_that_does_not_fit_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    view, html = opened(browser, fit_page(NOT_FITTING), tmp_path / "fit.html")
    assert [image.key for image in view.images] == ["hbm"]
    assert view.facts["fits"] == "DOES NOT FIT"
    assert view.facts["over_gib"] == "1.68 GiB per chip" and view.facts["total_gib"] == "32.92 GiB"
    assert warning_sections(browser) == ["Verdict", "HBM per chip", "To fit, try one of (then check again)"]
    # Each way to fit, in order, as the browser shows it.
    shown = [cell.text for cell in browser.driver.find_elements(By.CSS_SELECTOR, 'td[data-key="ways_to_fit"]')]
    assert shown == ways_to_fit(NOT_FITTING.configuration["maxtext"])
    assert [value for _, value, key in html.rows if key == "ways_to_fit"] == shown
