"""A run's page: what it trained on and how it went, as curves and one bar, beside what the stack
predicted of it. Written by the RayJob provider at the end of every run, a failed one too
(workloads/ray_job/report.py).

Each number the run's outputs hold is shown under its output's name (`data-key`) and as that
output's value, so the page and the smoke run's JSON line can be held against each other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import pairwise
from typing import Any

from domain.reports.page import Fact, Figure, Section, render
from domain.reports.plots import Level, Line, Mark, Part, line_chart, stacked_bar
from domain.training.goodput import GoodputOutputs
from domain.training.job_log import DataOutputs, StepOutputs
from domain.training.run_estimate import RunEstimate
from domain.training.run_series import RunSeries
from domain.training.start_phases import PHASES

# The wall time's parts, in the order they happen, and their colours.
_START_COLOURS = {
    "queued": "#95a5a6",
    "worker_start": "#9b59b6",
    "trainer_start": "#8e44ad",
    "restore": "#3498db",
    "compile": "#e67e22",
    "first_step": "#f1c40f",
}
STEPS, DATA, LOST, RECOMPUTED, OTHER = (
    "steps that count",
    "steps: waiting for data",
    "lost to restarts",
    "steps run again",
    "other",
)
_COLOURS = {STEPS: "#27ae60", DATA: "#a9dfbf", LOST: "#c0392b", RECOMPUTED: "#e6b0aa", OTHER: "#bdc3c7"}
NOT_KNOWN = "not known"


@dataclass(frozen=True)
class RunHeader:
    """Which run, how it ended, and why where it did not succeed."""

    submission_id: str
    status: str
    start_time: str | None
    end_time: str | None
    duration_seconds: float | None
    total_steps: int | None
    failure: str | None = None


def outputs_of(
    summary: Mapping[str, Any], goodput: Mapping[str, Any]
) -> tuple[StepOutputs, DataOutputs, GoodputOutputs]:
    """The run's outputs as records, from the step collector's summary and the goodput summary
    (a failed run has no JobResult; a finished one's are these same values)."""
    return (
        StepOutputs(**{f.name: summary[f.name] for f in fields(StepOutputs)}),
        DataOutputs(**{f.name: summary[f.name] for f in fields(DataOutputs)}),
        GoodputOutputs(**{f.name: goodput[f.name] for f in fields(GoodputOutputs)}),
    )


def wall_time_parts(
    duration: float | None, goodput: GoodputOutputs, series: RunSeries | None = None
) -> tuple[list[Part], float]:
    """The wall time split into what it went to: the first worker group's start, phase by phase
    up to its first step; the steps that count (goodput, the first step among them: its time is
    the `first_step` phase, so that phase is not a part of its own), less the time they waited
    for data, a part of its own; the time lost to restarts; the earlier runs of the steps run
    again after one (from `series`); and the rest (checkpoint saves, the end). Where the parts
    overlap they sum to more than the wall time, by the second value returned, and there is no
    `other` part."""
    parts: list[Part] = []
    first = goodput.start_phases[0] if goodput.start_phases else {}
    counted = goodput.goodput_percent is not None
    for phase in PHASES:
        seconds = first.get(phase)
        if seconds and not (phase == "first_step" and counted):
            parts.append(Part(f"start: {phase}", seconds, _START_COLOURS[phase]))
    if duration is not None and goodput.goodput_percent is not None:
        productive = duration * goodput.goodput_percent / 100
        # MaxText's step times hold the wait for each batch (summed over every run of a step).
        waiting = min(goodput.seconds_waiting_for_data or 0.0, productive)
        parts.append(Part(STEPS, productive - waiting, _COLOURS[STEPS]))
        if waiting:
            parts.append(Part(DATA, waiting, _COLOURS[DATA]))
    if goodput.seconds_lost_to_restarts:
        parts.append(Part(LOST, goodput.seconds_lost_to_restarts, _COLOURS[LOST]))
    if series is not None and (recomputed := series.recomputed_seconds()):
        parts.append(Part(RECOMPUTED, recomputed, _COLOURS[RECOMPUTED]))
    rest = (duration or 0.0) - sum(part.value for part in parts)
    if duration is not None and rest > 0:
        parts.append(Part(OTHER, rest, _COLOURS[OTHER]))
    return parts, max(-rest, 0.0) if duration is not None else 0.0


def run_page(
    header: RunHeader,
    steps: StepOutputs,
    data: DataOutputs,
    goodput: GoodputOutputs,
    series: RunSeries,
    estimate: RunEstimate | None,
) -> str:
    sections = [
        _outcome(header, steps),
        _loss(series, goodput),
        _speed(series, steps, estimate),
        _time(header, goodput, series),
        _cost(header, estimate),
        _data(data),
    ]
    subtitle = f"{header.status}; started {header.start_time or NOT_KNOWN}, ended {header.end_time or NOT_KNOWN}"
    return render(f"Run {header.submission_id}", subtitle, sections)


def _shown(value: Any) -> str:
    """An output's value as the page shows it: exactly the output's (so a test can compare)."""
    return NOT_KNOWN if value is None else str(value)


def _outcome(header: RunHeader, steps: StepOutputs) -> Section:
    facts = [
        Fact("status", header.status, "status"),
        Fact("steps completed", _shown(steps.steps_completed), "steps_completed"),
        Fact("steps asked for", _shown(header.total_steps), "total_steps"),
        Fact("final loss", _shown(steps.final_loss), "final_loss"),
        Fact("diverged", _shown(steps.diverged), "diverged"),
        Fact("wall time (s)", _shown(header.duration_seconds), "duration_seconds"),
    ]
    notes = []
    if header.failure:
        notes.append(f"Why it ended: {header.failure}")
    if steps.steps_completed == 0:
        notes.append("The run logged no step: the start phases it reached are under Where the time went.")
    if steps.diverged:
        notes.append("The loss stopped being a finite number: the curve ends where the run diverged (marked).")
    return Section("Outcome", facts, notes=notes, warning=header.status != "SUCCEEDED" or bool(steps.diverged))


def _loss(series: RunSeries, goodput: GoodputOutputs) -> Section:
    if not series.loss and not series.eval_loss:
        return Section("Loss", notes=["No finite loss was logged."])
    lines = [Line("train loss", *_columns(series.loss))]
    if series.eval_loss:
        lines.append(Line("eval loss", *_columns(series.eval_loss), dashed=True))
    marks = [Mark(step, "restart (steps run again from here)", "#7f8c8d") for step in series.restarts_at]
    if series.diverged_at is not None:
        marks.append(Mark(series.diverged_at, f"diverged at step {series.diverged_at}"))
    figure = line_chart(
        "loss",
        "Loss over steps",
        lines,
        xlabel="step",
        ylabel="loss",
        marks=marks,
        caption=_loss_caption(series, goodput),
    )
    return Section("Loss", figures=[figure])


def _loss_caption(series: RunSeries, goodput: GoodputOutputs) -> str:
    parts = ["Train loss at each step, eval loss at each evaluation."]
    if series.restarts_at:
        parts.append(f"Restarts from a checkpoint at steps {', '.join(map(str, series.restarts_at))}.")
    if goodput.restarts:
        # Ray Train's own count of what each restart was charged to (a mark cannot tell them apart).
        count = f"{goodput.restarts} restart{'s' if goodput.restarts != 1 else ''}"
        parts.append(f"{count} in all, {goodput.preemptions or 0} of them after a preemption.")
    if series.diverged_at is not None:
        parts.append(f"Diverged at step {series.diverged_at}: no loss after it is a finite number.")
    return " ".join(parts)


def _speed(series: RunSeries, steps: StepOutputs, estimate: RunEstimate | None) -> Section:
    facts = [
        Fact(
            "tokens/s per device (median)", _shown(steps.tokens_per_second_per_device), "tokens_per_second_per_device"
        ),
        Fact("TFLOP/s per device (median)", _shown(steps.tflops_per_device), "tflops_per_device"),
    ]
    levels: list[Level] = []
    notes = []
    if estimate is not None and estimate.step_seconds is not None:
        facts.append(Fact("predicted step time (s)", _shown(estimate.step_seconds), "estimate.step_seconds"))
        levels.append(Level(estimate.step_seconds, "predicted", estimate.step_seconds_low, estimate.step_seconds_high))
        notes.append(f"Prediction: {estimate.band}")
        if estimate.mfu is not None:
            facts.append(Fact("predicted MFU", _shown(round(estimate.mfu, 4)), "estimate.mfu"))
        if steps.tflops_per_device is not None and (mfu := estimate.measured_mfu(steps.tflops_per_device)) is not None:
            facts.append(Fact("measured MFU", _shown(round(mfu, 4)), "measured_mfu"))
    else:
        notes.append("No prediction: the stack predicts the speed of TPU presets only.")
    timed = _steady(series)
    figures: list[Figure] = []
    if timed:
        figures.append(
            line_chart(
                "step_seconds",
                "Step time: measured against predicted",
                [Line("measured", *_columns(timed))],
                xlabel="step",
                ylabel="seconds",
                levels=levels,
                caption="Each step's time, without the first step of each worker group (it compiles); "
                "the prediction with its error band where the stack has one.",
            )
        )
    return Section("Speed", facts, figures, notes)


def _steady(series: RunSeries) -> list[tuple[int, float]]:
    """The steps' times without each worker group's first step (it includes the compile): the
    log's first, and each where the count went back (RunSeries.restarts_at). By its place in the
    log, not its number: the run of that step before the restart was a step like the others."""
    return [(step, seconds) for (before, _), (step, seconds) in pairwise(series.step_seconds) if step > before]


def _time(header: RunHeader, goodput: GoodputOutputs, series: RunSeries) -> Section:
    facts = [
        Fact("goodput (%)", _shown(goodput.goodput_percent), "goodput_percent"),
        Fact("until the first worker group started (s)", _shown(goodput.seconds_queued), "seconds_queued"),
        Fact("to the first step (s)", _shown(goodput.seconds_to_first_step), "seconds_to_first_step"),
        Fact("restarts", _shown(goodput.restarts), "restarts"),
        Fact("of them preemptions", _shown(goodput.preemptions), "preemptions"),
        Fact("steps recomputed", _shown(goodput.steps_recomputed), "steps_recomputed"),
        Fact("lost to restarts (s)", _shown(goodput.seconds_lost_to_restarts), "seconds_lost_to_restarts"),
        Fact(
            "waiting for data, within the steps (s)",
            _shown(goodput.seconds_waiting_for_data),
            "seconds_waiting_for_data",
        ),
    ]
    for index, phases in enumerate(goodput.start_phases or []):
        reached = ", ".join(f"{phase} {phases[phase]} s" for phase in PHASES if phases.get(phase) is not None)
        facts.append(Fact(f"worker group {index} start", reached or "no phase reached"))
    parts, overlap = wall_time_parts(header.duration_seconds, goodput, series)
    figures = []
    if parts:
        caption = "The wall time from the job's start to its end, by what it went to (seconds)."
        if overlap:
            caption += f" The parts overlap by {overlap:.1f} s (the first step's time holds part of the start)."
        wall = Level(header.duration_seconds, "wall time") if header.duration_seconds else None
        figures.append(
            stacked_bar("wall_time", "Where the time went", parts, xlabel="seconds", limit=wall, caption=caption)
        )
    return Section("Where the time went", facts, figures)


def _cost(header: RunHeader, estimate: RunEstimate | None) -> Section:
    if estimate is None or estimate.dollars_per_hour is None:
        return Section("Cost", notes=["No price: the stack prices TPU slices from the infra stack's price only."])
    facts = [
        Fact("predicted ($)", _shown(estimate.job_dollars), "estimate.job_dollars"),
        Fact("chips' price ($/hour)", _shown(estimate.dollars_per_hour), "estimate.dollars_per_hour"),
    ]
    if header.duration_seconds is not None:
        measured = round(header.duration_seconds / 3600 * estimate.dollars_per_hour, 2)
        facts.append(Fact("measured from the wall time ($)", _shown(measured), "measured_dollars"))
    return Section("Cost", facts)


def _data(data: DataOutputs) -> Section:
    facts = [
        Fact("dataset files", _shown(data.dataset_files), "dataset_files"),
        Fact("dataset hash", _shown(data.dataset_hash), "dataset_hash"),
        Fact("tokens trained", _shown(data.tokens_trained), "tokens_trained"),
        Fact("tokens truncated", _shown(data.tokens_truncated), "tokens_truncated"),
        Fact("epochs", _shown(data.epochs), "epochs"),
        Fact("eval loss", _shown(data.eval_loss), "eval_loss"),
    ]
    return Section("Data", facts)


def _columns(points: Sequence[tuple[int, float]]) -> tuple[list[float], list[float]]:
    return [float(step) for step, _ in points], [value for _, value in points]
