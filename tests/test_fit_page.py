"""The fit check as a page (domain/reports/fit_page.py, `python -m trainer.fit_check --report`):
it shows the result's own numbers, keyed by the field they come from and formatted as the text
report prints them, its plots are PNGs of the size the page gives them, and a configuration that
does not fit names the ways to fit. No compile: results are built here, or come from the fake
compile of the tiny step."""

from __future__ import annotations

import base64
import dataclasses
import re
import struct
from collections import defaultdict
from html.parser import HTMLParser

import pytest

from domain.perf import fit_results
from domain.perf.fit_results import FitResult, ways_to_fit
from domain.reports.fit_page import fit_page
from tests.support.fit_results import NOT_FITTING, fitting
from tests.support.tiny_step import TINY_BUFFERS, TINY_HLO, fake_compile
from trainer import fit_check


class Page(HTMLParser):
    """What a page shows: each keyed cell's text by key (in order), each figure's image."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.facts: dict[str, list[str]] = defaultdict(list)
        self.figures: dict[str, dict[str, str]] = {}
        self.warnings: list[str] = []
        self._key: str | None = None
        self._figure: str | None = None
        self._warning = False
        self._heading = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "td" and "data-key" in found:
            self._key = found["data-key"]
            self.facts[self._key].append("")
        elif tag == "figure":
            self._figure = found["data-key"]
        elif tag == "img" and self._figure is not None:
            self.figures[self._figure] = {k: v or "" for k, v in found.items()}
        elif tag == "section":
            self._warning = found.get("class") == "warning"
        elif tag == "h2":
            self._heading = self._warning

    def handle_endtag(self, tag):
        if tag == "td":
            self._key = None
        elif tag == "figure":
            self._figure = None
        elif tag == "h2":
            self._heading = False

    def handle_data(self, data):
        if self._key is not None:
            self.facts[self._key][-1] += data
        if self._heading:
            self.warnings.append(data)

    def fact(self, key: str) -> str:
        [value] = self.facts[key]
        return value


def png_size(src: str) -> tuple[int, int]:
    data = base64.b64decode(src.removeprefix("data:image/png;base64,"))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_the_page_shows_the_results_numbers_as_the_report_prints_them():
    result = fitting()
    shown = Page(fit_page(result))
    report = result.report()
    prediction = result.prediction
    assert prediction is not None and prediction.band is not None
    for key in ("argument_gib", "temp_gib", "output_gib", "alias_gib", "total_gib", "usable_gib"):
        value = getattr(result, key)
        assert shown.fact(key) == f"{value:.2f} GiB"
        assert float(shown.fact(key).split()[0]) == pytest.approx(value, abs=0.005)
    assert f"per chip total: {shown.fact('total_gib')} of {shown.fact('usable_gib')} usable HBM" in report
    assert shown.fact("headroom_percent") == f"{result.headroom_percent:.1f}%"
    assert f"headroom: {shown.fact('headroom_percent')}" in report
    assert shown.fact("fits") == "FITS" and shown.warnings == []
    assert shown.fact("maxtext.weight_dtype") == "bfloat16"
    # The predicted speed, as Prediction.lines() prints it, with the band's range of step times.
    assert f"predicted step time: {shown.fact('step_seconds')}" in report
    assert float(shown.fact("step_seconds").removesuffix(" s")) == pytest.approx(prediction.step_seconds, abs=5e-4)
    assert f"predicted tokens/s per chip: {shown.fact('tokens_per_second_per_chip')}" in report
    assert f"predicted MFU: {shown.fact('mfu')}" in report
    assert float(shown.fact("mfu").removesuffix("%")) == pytest.approx(100 * prediction.mfu, abs=0.05)
    low, high = prediction.band.step_range(prediction.step_seconds) or (0, 0)
    assert shown.fact("step_range") == f"{low:.3f} to {high:.3f} s"
    assert f"  {shown.fact('band')}" in report and shown.fact("band").startswith("calibrated on the llama3 family")
    parts = ", ".join(
        f"{label} {shown.fact(key)}"
        for label, key in (
            ("compute", "compute_seconds"),
            ("exposed ICI", "exposed_ici_seconds"),
            ("exposed DCN", "exposed_dcn_seconds"),
            ("host transfer", "exposed_host_seconds"),
        )
    )
    assert f"predicted breakdown: {parts}" in report
    assert shown.fact("compile_seconds") == "5 s (to buffer assignment)"
    # Weights and both AdamW moments in bfloat16: the parameters are a third of the arguments.
    parameters, state = (float(shown.fact(k).split()[0]) for k in ("parameter_gib", "optimizer_state_gib"))
    assert parameters == pytest.approx(result.argument_gib / 3, abs=0.005)
    assert state == pytest.approx(2 * result.argument_gib / 3, abs=0.005)


def test_a_job_across_slices_shows_its_dcn_share_slowdown_band_and_one_slice_more_as_the_report_says():
    from domain.perf.hlo_profile import Scope, StepProfile

    base = fitting()
    step = StepProfile.from_json(base.profile)
    sends = Scope("gradients", runs=1, dcn_bytes=1e9, dcn_transfers=200, dcn_steps=400)
    result = dataclasses.replace(
        base,
        profile=StepProfile((*step.scopes, sends)).to_json(),
        configuration={
            **base.configuration,
            "slices": 2,
            "maxtext": {**base.configuration["maxtext"], "dcn_data_parallelism": "2"},
        },
    )
    cost = result.prediction.multislice
    assert cost is not None and cost.dcn_seconds > 0
    shown, report = Page(fit_page(result)), result.report()
    assert shown.fact("dcn_share") == f"{100 * cost.share:.1f}% ({cost.dcn_seconds:.3f} s)"
    assert f"DCN {cost.dcn_seconds:.3f} s of the step ({100 * cost.share:.1f}%)" in report
    assert f"per-chip throughput {shown.fact('multislice_slowdown_percent')} against one slice" in report
    assert f"  {shown.fact('multislice_band')}" in report and "data parallelism across slices" in report
    assert shown.fact("next_slice").startswith(f"step {cost.next_step_seconds:.3f} s")
    assert f"on 3 slices: {shown.fact('next_slice').split(',')[0]}" in report
    assert fitting().prediction.multislice is None and "dcn_share" not in Page(fit_page(fitting())).facts


def test_each_plot_is_a_png_of_the_size_the_page_gives_it():
    shown = Page(fit_page(fitting()))
    assert set(shown.figures) == {"hbm", "step_time"}
    for image in shown.figures.values():
        assert png_size(image["src"]) == (int(image["width"]), int(image["height"]))


def test_a_config_that_does_not_fit_says_by_how_much_and_the_ways_to_fit():
    text = fit_page(NOT_FITTING)
    shown = Page(text)
    assert shown.fact("fits") == "DOES NOT FIT"
    assert shown.fact("over_gib") == "1.68 GiB per chip" and shown.fact("over_percent") == "5.4%"
    assert shown.fact("headroom_percent") == "-5.4%"
    ways = ways_to_fit(NOT_FITTING.configuration["maxtext"])
    assert shown.facts["ways_to_fit"] == ways
    assert "out_proj=remat, query_proj=remat" in ways[1]
    for way in ways:
        assert f"  - {way}" in NOT_FITTING.report()
    assert "To fit, try one of (then check again)" in shown.warnings
    # Float32 weights and moments: still a third each; the compiler's own message is on the page.
    assert float(shown.fact("parameter_gib").split()[0]) == pytest.approx(11.22 / 3, abs=0.005)
    assert "CompileTimeHbmOom" in text
    assert shown.fact("step_seconds") == "none (the step does not fit, so there is no step to time)"
    image = shown.figures["hbm"]
    assert png_size(image["src"]) == (int(image["width"]), int(image["height"]))


def test_a_refusal_without_sizes_still_names_the_ways_to_fit():
    bare = dataclasses.replace(
        NOT_FITTING, argument_gib=None, temp_gib=None, output_gib=None, alias_gib=None, total_gib=None
    )
    shown = Page(fit_page(bare))
    assert "hbm" not in shown.figures and "total_gib" not in shown.facts
    assert shown.fact("usable_gib") == "31.24 GiB"
    assert shown.facts["ways_to_fit"] == ways_to_fit(bare.configuration["maxtext"])


def test_a_generation_without_a_speed_model_says_why_there_is_no_prediction():
    result = dataclasses.replace(fitting(), generation="v5p", slice_type="v5p-64")
    assert result.prediction is None
    shown = Page(fit_page(result))
    assert shown.fact("step_seconds") == "none (no calibrated speed model for TPU v5p)"
    assert f"predicted step time: {shown.fact('step_seconds')}" in result.report()
    assert "mfu" not in shown.facts and set(shown.figures) == {"hbm"}


def test_a_family_no_published_run_checks_is_uncalibrated():
    result = fitting("deepseek3-671b")
    shown = Page(fit_page(result))
    assert shown.fact("step_range") == "uncalibrated"
    assert shown.fact("band").startswith("uncalibrated: no published deepseek3 run checks the model")


def test_an_optimizer_whose_state_is_not_known_leaves_the_arguments_whole():
    shown = Page(fit_page(fitting(opt_type="sgd")))
    assert "parameter_gib" not in shown.facts and "optimizer_state_gib" not in shown.facts
    assert shown.fact("argument_gib") == "12.33 GiB"


def test_the_fit_check_writes_its_page_with_report(tmp_path, monkeypatch, capsys):
    """From the fake compile of the tiny step, then from the cache: the page shows the result the
    JSON holds, in a directory made for it."""
    compile_, calls = fake_compile(TINY_HLO.read_text(), buffers=TINY_BUFFERS.read_text())
    monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(fit_check, "compile_step", compile_)
    page_path, output = tmp_path / "pages" / "new" / "fit.html", tmp_path / "result.json"
    argv = ["--preset", "llama3-70b", "--output", str(output), "--report", str(page_path)]
    assert fit_check.main(argv) == 0
    assert f"fit check page: {page_path}" in capsys.readouterr().out
    result = FitResult.from_json(output.read_text())
    shown = Page(page_path.read_text())
    assert shown.fact("total_gib") == f"{result.total_gib:.2f} GiB"
    assert result.prediction is not None
    assert shown.fact("step_seconds") == f"{result.prediction.step_seconds:.3f} s"
    # Cached: written again without a compile.
    page_path.unlink()
    assert fit_check.main(argv) == 0
    assert len(calls) == 1 and Page(page_path.read_text()).fact("total_gib") == shown.fact("total_gib")


def test_a_page_that_cannot_be_written_is_an_error_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(
        fit_check, "compile_step", fake_compile(TINY_HLO.read_text(), buffers=TINY_BUFFERS.read_text())[0]
    )
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    for path in (blocker / "fit.html", blocker / "deeper" / "fit.html"):
        assert fit_check.main(["--preset", "llama3-70b", "--report", str(path)]) == 2
        captured = capsys.readouterr()
        assert "result: FITS" in captured.out  # the text report is still printed
        assert re.search(rf"could not write the page to {re.escape(str(path))}: Not a directory", captured.err)
    assert blocker.read_text() == "not a directory\n"
