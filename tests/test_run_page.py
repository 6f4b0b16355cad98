"""A run's page (domain/reports/run_page.py) for every kind of run, drawn from the run's job log as
the product's own reader reads it (tests/support/run_logs.py): a run that went as planned, one
restarted from a checkpoint, one whose loss went nan, one that failed before its first step. Each
keyed fact shows its output's value; each curve holds what the log says, with the restarts and
the point of divergence marked; the wall time's bar adds up; the estimate is shown beside the
measurement, and so are its TensorBoard scalars."""

from __future__ import annotations

import math
from typing import Any

import pytest

from domain.reports import plots
from domain.reports import run_page as run_page_module
from domain.reports.run_page import DATA, LOST, OTHER, RECOMPUTED, STEPS, wall_time_parts
from domain.training.job_log import JobLog
from domain.training.run_estimate import RunEstimate
from domain.training.run_scalars import (
    MFU,
    PREDICTED_STEP_SECONDS,
    STEP_SECONDS,
    TFLOPS_PER_DEVICE,
    Scalar,
    estimate_scalars,
)
from domain.training.start_phases import PHASES
from tests.support.pages import PageText, shown_outputs
from tests.support.run_logs import (
    DATASET_FILES,
    ESTIMATE,
    FAILURE,
    Group,
    Run,
    compile_in_first_step_run,
    diverged_run,
    failed_at_start_run,
    normal_run,
    restarted_run,
    steps,
)


@pytest.fixture
def drawn(monkeypatch) -> dict[str, dict[str, Any]]:
    """What the page asked each plot to draw, by the figure's key: the lines, marks and levels
    of a chart, the parts of a bar (the PNG holds them only as pixels)."""
    calls: dict[str, dict[str, Any]] = {}

    def recording(real):
        def draw(key: str, title: str, shown: Any, **options: Any):
            calls[key] = {"title": title, "shown": shown, **options}
            return real(key, title, shown, **options)

        return draw

    monkeypatch.setattr(run_page_module, "line_chart", recording(plots.line_chart))
    monkeypatch.setattr(run_page_module, "stacked_bar", recording(plots.stacked_bar))
    return calls


def assert_shows_its_outputs(run: Run, shown: PageText, estimate: RunEstimate | None = None) -> None:
    """Every keyed fact is an output's, and shows that output's value."""
    outputs = run.outputs(estimate)
    assert set(shown.facts) <= set(outputs), set(shown.facts) - set(outputs)
    assert shown_outputs(shown.facts, outputs) == {}


def test_a_normal_run_shows_each_output_and_draws_loss_speed_and_wall_time(drawn):
    run = normal_run()
    shown = PageText.of(run.page())
    assert_shows_its_outputs(run, shown)
    assert list(shown.figures) == ["loss", "step_seconds", "wall_time"]
    for key in shown.figures:
        assert shown.png_size(key) == shown.stated_size(key)
    # The numbers a person looks for, from the log: twenty steps, the last loss, the data.
    assert shown.facts["steps_completed"] == "20" and shown.facts["total_steps"] == "20"
    assert shown.facts["final_loss"] == "3.75" and shown.facts["diverged"] == "False"
    assert shown.facts["dataset_files"] == DATASET_FILES and shown.facts["eval_loss"] == "3.8"
    assert shown.warnings() == []
    # The loss curves hold every step's loss and each evaluation's, nothing marked.
    train, evaluated = drawn["loss"]["shown"]
    assert list(zip(train.xs, train.ys, strict=True)) == [(float(s), v) for s, v in run.series.loss]
    assert len(train.xs) == 20 and (evaluated.xs, evaluated.ys) == ([9.0, 19.0], [4.9, 3.8])
    assert drawn["loss"]["marks"] == []
    assert "Restarts" not in shown.figures["loss"]["caption"]


def test_a_restart_from_a_checkpoint_is_marked(drawn):
    run = restarted_run()
    assert run.series.restarts_at == [10]  # the count went back from 12 to the checkpoint's 10
    shown = PageText.of(run.page(ESTIMATE))
    assert_shows_its_outputs(run, shown, ESTIMATE)
    assert shown.facts["restarts"] == "1" and shown.facts["steps_recomputed"] == "3"
    assert "at steps 10." in shown.figures["loss"]["caption"]
    # What the restart was charged to, by Ray Train's count: the mark cannot say.
    preemptions = run.goodput.preemptions
    assert f"1 restart in all, {preemptions} of them after a preemption." in shown.figures["loss"]["caption"]
    assert [(mark.x, mark.label.split(" ")[0]) for mark in drawn["loss"]["marks"]] == [(10, "restart")]
    # Steps 10..12 ran twice: the loss curve holds both runs, in the log's order.
    train = drawn["loss"]["shown"][0]
    assert train.xs.count(10.0) == 2 and len(train.xs) == 13 + 15
    # Both groups' starts, phase by phase.
    assert shown.row("worker group 1 start").startswith("queued 28.0 s, worker_start 2.0 s")
    assert "restore 3.0 s" in shown.row("worker group 1 start")


def test_a_diverged_run_keeps_the_finite_loss_and_marks_where_it_diverged(drawn):
    run = diverged_run()
    assert all(math.isfinite(loss) for _, loss in run.series.loss)
    assert [step for step, _ in run.series.loss] == [0, 1, 2, 3, 4, 5]
    assert run.series.diverged_at == 6  # the first step whose loss was nan
    # Its time still counts: every step is on the speed curve but the first.
    assert [step for step, _ in run.series.step_seconds] == list(range(10))
    shown = PageText.of(run.page())
    assert_shows_its_outputs(run, shown)
    assert shown.facts["diverged"] == "True" and shown.facts["final_loss"] == "not known"
    assert [mark.label for mark in drawn["loss"]["marks"]] == ["diverged at step 6"]
    assert drawn["loss"]["marks"][0].x == 6
    assert "Diverged at step 6:" in shown.figures["loss"]["caption"]
    assert shown.warnings() == ["Outcome"]
    assert "diverged (marked)" in shown.section("Outcome")
    assert drawn["step_seconds"]["shown"][0].xs == [float(step) for step in range(1, 10)]


def test_the_speed_curve_leaves_out_each_groups_first_step_only(drawn):
    """Each step's time but each group's first (step 0, then step 10 after the restart): the first
    group's run of step 10 was a step like the others, and stays."""
    run = restarted_run()
    run.page(ESTIMATE)
    [measured] = drawn["step_seconds"]["shown"]
    points = list(zip(measured.xs, measured.ys, strict=True))
    logged = [(float(step), seconds) for step, seconds in run.series.step_seconds]
    assert logged[0][0] == 0.0 and logged[13][0] == 10.0  # the groups' first steps
    assert points == logged[1:13] + logged[14:]
    assert points.count((10.0, 0.5)) == 1


def test_a_run_that_failed_before_its_first_step_says_why_and_shows_the_phases_it_reached(drawn):
    run = failed_at_start_run()
    shown = PageText.of(run.page(ESTIMATE))
    assert_shows_its_outputs(run, shown, ESTIMATE)
    assert shown.facts["status"] == "FAILED" and shown.facts["steps_completed"] == "0"
    assert shown.warnings() == ["Outcome"]
    outcome = shown.section("Outcome")
    assert FAILURE in outcome and "logged no step" in outcome
    # The phases it reached, the compile it never finished left out.
    reached = shown.row("worker group 0 start")
    assert reached == "queued 2.0 s, worker_start 2.5 s, trainer_start 7.5 s, restore 0.0 s"
    assert list(shown.figures) == ["wall_time"]
    assert "No finite loss was logged." in shown.section("Loss")
    assert "measured_mfu" not in shown.facts  # no step, no throughput to measure it by
    parts = drawn["wall_time"]["shown"]
    assert [part.label for part in parts] == ["start: queued", "start: worker_start", "start: trainer_start", OTHER]
    assert sum(part.value for part in parts) == pytest.approx(41.0)
    assert drawn["wall_time"]["limit"].y == 41.0


def test_the_wall_times_parts_add_up_to_it_when_they_fit():
    run = normal_run()
    parts, overlap = wall_time_parts(run.header.duration_seconds, run.goodput, run.series)
    start = run.goodput.start_phases[0]
    assert [part.label for part in parts] == [
        # A restore of 0 s is no part, and the first step is among the steps that count.
        *(f"start: {phase}" for phase in PHASES if start[phase] and phase != "first_step"),
        STEPS,
        DATA,
        OTHER,
    ]
    assert overlap == 0.0
    assert sum(part.value for part in parts) == pytest.approx(100.0)
    # The steps that count, split into their wait for data and the rest.
    waiting = run.goodput.seconds_waiting_for_data
    assert waiting and parts[-2].value == waiting
    assert parts[-3].value + waiting == pytest.approx(100.0 * run.goodput.goodput_percent / 100)


def test_the_earlier_runs_of_the_steps_a_restart_ran_again_are_a_part_of_their_own():
    run = restarted_run()
    parts = {part.label: part.value for part in wall_time_parts(100.0, run.goodput, run.series)[0]}
    # Steps 10..12 ran before the restart and again after it: their first runs' times.
    first_runs = [seconds for step, seconds in run.series.step_seconds if step in (10, 11, 12)][:3]
    assert run.goodput.steps_recomputed == 3
    assert parts[RECOMPUTED] == pytest.approx(sum(first_runs))
    assert parts[LOST] == run.goodput.seconds_lost_to_restarts


def test_the_wall_times_parts_that_overlap_leave_no_other_and_say_by_how_much(drawn):
    run = compile_in_first_step_run()
    duration = run.header.duration_seconds
    parts, overlap = wall_time_parts(duration, run.goodput)
    assert OTHER not in [part.label for part in parts]
    # The first step's 30.5 s hold the compile's 30 s: the parts sum to more than the wall time.
    assert overlap > 0
    assert sum(part.value for part in parts) == pytest.approx(duration + overlap)
    shown = PageText.of(run.page())
    assert f"overlap by {overlap:.1f} s" in shown.figures["wall_time"]["caption"]
    assert drawn["wall_time"]["limit"].y == duration
    # A restart's lost time is a part of its own.
    restarted = restarted_run()
    lost = [part for part in wall_time_parts(100.0, restarted.goodput)[0] if part.label == LOST]
    assert [part.value for part in lost] == [restarted.goodput.seconds_lost_to_restarts]


def test_an_estimate_is_shown_beside_the_measurement(drawn):
    run = normal_run()
    shown = PageText.of(run.page(ESTIMATE))
    assert_shows_its_outputs(run, shown, ESTIMATE)
    facts = shown.facts
    assert facts["estimate.step_seconds"] == "0.5"
    assert facts["estimate.mfu"] == "0.4123"
    # Measured MFU: the median TFLOP/s per device over the chip's peak, as many digits as shown.
    assert float(facts["measured_mfu"]) == pytest.approx(372.5 / 918.0, abs=5e-5)
    assert facts["estimate.job_dollars"] == "1.08" and facts["estimate.dollars_per_hour"] == "43.2"
    # Measured dollars: the wall time at the chips' price, to the cent.
    assert facts["measured_dollars"] == "1.2" == str(round(100.0 / 3600 * 43.2, 2))
    assert f"Prediction: {ESTIMATE.band}" in shown.section("Speed")
    [level] = drawn["step_seconds"]["levels"]
    assert (level.y, level.low, level.high) == (0.5, 0.46, 0.57)


def test_without_an_estimate_the_page_says_there_is_no_prediction_and_no_price(drawn):
    run = normal_run()
    for estimate in (None, RunEstimate(source="a CPU job")):
        shown = PageText.of(run.page(estimate))
        assert_shows_its_outputs(run, shown, estimate)
        assert not [key for key in shown.facts if key.startswith("estimate.") or key.startswith("measured_")]
        assert "No prediction" in shown.section("Speed")
        assert "No price" in shown.section("Cost")
        assert drawn["step_seconds"]["levels"] == []
    # A prediction without a peak or a price: no measured MFU, no dollars.
    shown = PageText.of(run.page(RunEstimate(step_seconds=0.5, band="uncalibrated")))
    assert shown.facts["estimate.step_seconds"] == "0.5"
    assert "measured_mfu" not in shown.facts and "No price" in shown.section("Cost")


def estimated(lines: list[str], estimate: RunEstimate) -> list[Scalar]:
    """The estimate's scalars, added to each batch the job's reader yields (as the provider does)."""
    added: list[Scalar] = []
    JobLog(scalars=lambda batch: added.extend(estimate_scalars(batch, estimate))).add_lines(lines)
    return added


def test_the_estimate_scalars_give_the_predicted_step_time_and_the_measured_mfu_at_each_step():
    lines = Group(process=2.0, loop=4.5, prepared=12.0, compiled=30.0, steps=steps(0, 9), evals={4: 5.2}).lines()
    scalars: list[Scalar] = []
    JobLog(scalars=scalars.extend).add_lines(lines)
    timed = [scalar.step for scalar in scalars if scalar.tag == STEP_SECONDS]
    tflops = {scalar.step: scalar.value for scalar in scalars if scalar.tag == TFLOPS_PER_DEVICE}
    added = estimated(lines, ESTIMATE)
    assert [(s.step, s.value) for s in added if s.tag == PREDICTED_STEP_SECONDS] == [(step, 0.5) for step in timed]
    assert [(s.step, s.value) for s in added if s.tag == MFU] == [(step, tflops[step] / 918.0) for step in timed]
    assert timed == list(range(10))
    # Where the estimate has no peak, no MFU; no step time, no prediction.
    assert {s.tag for s in estimated(lines, RunEstimate(step_seconds=0.5))} == {PREDICTED_STEP_SECONDS}
    assert {s.tag for s in estimated(lines, RunEstimate(peak_tflops_per_chip=918.0))} == {MFU}
    assert estimated(lines, RunEstimate()) == []
