"""Runs as their job's log tells them, for the run's page (domain/reports/run_page.py): the lines a
driver's log holds (the trainer's `attempt`, `phase`, `step` and `failed` events, MaxText's step
and eval lines, Ray Train's retry decision, the driver's `dataset` event), read back through the
product's own reader as the RayJob provider reads an ended job's log: one JobLog over the whole
log, its scalars into a RunSeries, then the step collector's and the goodput summaries as the
page's records (run_page.outputs_of)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from domain.reports.run_page import RunHeader, outputs_of, run_page
from domain.training.goodput import GoodputOutputs
from domain.training.job_events import event_line
from domain.training.job_log import DataOutputs, JobLog, StepCollector, StepOutputs
from domain.training.run_estimate import RunEstimate
from domain.training.run_series import RunSeries

WORKER = "\x1b[36m(RayTrainWorker pid=2041)\x1b[0m "
CONTROLLER = "\x1b[36m(TrainController pid=1877)\x1b[0m "
# The job's start, as Ray's job record has it (epoch seconds).
JOB_START = 1_760_000_000.0
DEVICES = 4
BATCH_TOKENS = 8 * 2048  # MaxText's total_weights: 8 sequences of 2048 tokens, no padding
DATASET_FILES = "gs://llama3-train-data/c4-en/train-*.array_record"
DATASET_HASH = "sha256:5b1f0c2a9e"

# A v6e-16 job's estimate: the fit check's step time with its error band, the chips' peak and price.
ESTIMATE = RunEstimate(
    source="fit check (llama3-8b on 1 x v6e-16)",
    step_seconds=0.5,
    step_seconds_low=0.46,
    step_seconds_high=0.57,
    band="calibrated on the llama3 family: -8% to +14% of the predicted step time",
    mfu=0.41234,
    peak_tflops_per_chip=918.0,
    dollars_per_hour=43.2,
    job_dollars=1.08,
)


@dataclass(frozen=True)
class Step:
    """One step as MaxText logs it: its number, its seconds, its loss and TFLOP/s per device."""

    step: int
    seconds: float
    loss: float
    tflops: float = 370.0


def steps(first: int, last: int, *, loss: float = 6.0, slope: float = 0.125, seconds: float = 0.5) -> list[Step]:
    """Steps `first`..`last` of a loss going down, each of `seconds`, their TFLOP/s a little uneven."""
    return [
        Step(n, seconds, round(loss - slope * (n - first), 4), tflops=370.0 + (n % 3) * 2.5)
        for n in range(first, last + 1)
    ]


def step_lines(step: Step, logged: float, seconds: float | None = None) -> list[str]:
    """MaxText's step line and the trainer's `step` event for it (logged at `logged`); MaxText's
    seconds are `seconds` where they hold more than the step (the first step's compile)."""
    took = step.seconds if seconds is None else seconds
    loss = "nan" if math.isnan(step.loss) else f"{step.loss:.4f}"
    return [
        WORKER + f"completed step: {step.step}, seconds: {took:.3f}, TFLOP/s/device: {step.tflops:.3f}, "
        f"Tokens/s/device: {BATCH_TOKENS / DEVICES / took:.3f}, total_weights: {BATCH_TOKENS}, loss: {loss}",
        WORKER + event_line("step", time=round(logged, 3), step=step.step, seconds=took, data_seconds=0.004),
    ]


def eval_line(step: int, loss: float) -> str:
    return (
        WORKER + f"Completed eval after train step {step}, loss={loss:.4f}, perplexity={math.exp(loss):.1f}, "
        "total_weights=65536, avg_z_loss=0.000"
    )


def dataset_line(at: float) -> str:
    return event_line(
        "dataset",
        time=at,
        files=DATASET_FILES,
        content_hash=DATASET_HASH,
        documents=4_100,
        tokens=2_000_000,
        tokens_truncated=35_000,
        passes=1,
        sequences_per_step=8,
    )


def retry_lines(source: str, count: int, allowed: str = "inf") -> list[str]:
    """Ray Train's controller deciding to retry, and the budget it charged."""
    return [
        CONTROLLER + "[FailurePolicy] RETRY",
        CONTROLLER + f"  Source: {source}",
        CONTROLLER + f"  Error count: {count} (max allowed: {allowed})",
    ]


@dataclass
class Group:
    """A worker group's start, as rank 0's events say it, then its steps. Times are seconds after
    the job's start; a phase left None the group never reached."""

    process: float
    loop: float
    prepared: float | None = None
    restore: float = 0.0
    compiled: float | None = None
    cache: str = "miss"
    steps: Sequence[Step] = ()
    # Seconds of the compile MaxText's first step's time holds (its clock started before it).
    compile_in_first_step: float = 0.0
    # Evaluations: after which step, with what loss.
    evals: dict[int, float] = field(default_factory=dict)

    def lines(self) -> list[str]:
        at = JOB_START
        lines = [
            WORKER + event_line("attempt", time=at + self.loop, workers=DEVICES, process_started=at + self.process)
        ]
        if self.prepared is None:
            return lines
        lines += [
            WORKER
            + event_line(
                "phase",
                time=at + self.prepared - self.restore,
                phase="trainer_start",
                seconds=round(self.prepared - self.restore - self.loop, 3),
            ),
            WORKER + event_line("phase", time=at + self.prepared, phase="restore", seconds=self.restore),
        ]
        if self.compiled is None:
            return lines
        lines.append(
            WORKER
            + event_line(
                "phase",
                time=at + self.compiled,
                phase="compile",
                seconds=round(self.compiled - self.prepared, 3),
                cache=self.cache,
            )
        )
        logged = at + self.compiled
        for index, step in enumerate(self.steps):
            logged += step.seconds
            first = index == 0
            lines += step_lines(step, logged, step.seconds + self.compile_in_first_step if first else None)
            if first:
                lines.append(
                    WORKER + event_line("phase", time=round(logged, 3), phase="first_step", seconds=step.seconds)
                )
            if step.step in self.evals:
                lines.append(eval_line(step.step, self.evals[step.step]))
        return lines


@dataclass(frozen=True)
class Run:
    """A run as its page is drawn from it: its header, its records and its curves."""

    header: RunHeader
    steps: StepOutputs
    data: DataOutputs
    goodput: GoodputOutputs
    series: RunSeries
    log: JobLog

    def page(self, estimate: RunEstimate | None = None) -> str:
        return run_page(self.header, self.steps, self.data, self.goodput, self.series, estimate)

    def outputs(self, estimate: RunEstimate | None = None) -> dict[str, Any]:
        """What each keyed fact of the page shows: the records' fields, the header's, and the
        estimate's with the measurements set beside it (MFU as shown, dollars to the cent)."""
        header = self.header
        outs: dict[str, Any] = {
            **asdict(self.steps),
            **asdict(self.data),
            **asdict(self.goodput),
            "status": header.status,
            "total_steps": header.total_steps,
            "duration_seconds": header.duration_seconds,
        }
        if estimate is not None:
            outs |= {f"estimate.{name}": value for name, value in asdict(estimate).items()}
            if estimate.mfu is not None:
                outs["estimate.mfu"] = round(estimate.mfu, 4)
            if estimate.peak_tflops_per_chip and self.steps.tflops_per_device is not None:
                outs["measured_mfu"] = round(self.steps.tflops_per_device / estimate.peak_tflops_per_chip, 4)
            if estimate.dollars_per_hour is not None and header.duration_seconds is not None:
                outs["measured_dollars"] = round(header.duration_seconds / 3600 * estimate.dollars_per_hour, 2)
        return outs


def read_run(
    lines: Sequence[str],
    *,
    seconds: float,
    status: str = "SUCCEEDED",
    total_steps: int | None = None,
    submission_id: str = "llama3-8b-c4-0001",
) -> Run:
    """The run whose driver's log is `lines` and which ended `seconds` after its start, read as
    the provider reads an ended job's whole log (workloads/ray_job/progress.py, read_whole_log)."""
    series = RunSeries()
    log = JobLog(StepCollector(), scalars=series.add)
    log.add_lines(lines)
    end = JOB_START + seconds
    steps, data, goodput = outputs_of(log.steps.summary(), log.record.summary(JOB_START, end))
    header = RunHeader(
        submission_id=submission_id,
        status=status,
        start_time=_iso(JOB_START),
        end_time=_iso(end),
        duration_seconds=seconds,
        total_steps=total_steps,
    )
    return Run(header, steps, data, goodput, series, log)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------- the runs the tests draw
def normal_run() -> Run:
    """Twenty steps from a cold start, an evaluation every ten: the parts of its wall time fit."""
    ran = [Step(0, 2.5, 7.25), *steps(1, 19)]  # the first step runs slower
    group = Group(process=2.0, loop=4.5, prepared=12.0, compiled=30.0, steps=ran, evals={9: 4.9, 19: 3.8})
    lines = [dataset_line(JOB_START + 0.5), *group.lines()]
    return read_run(lines, seconds=100.0, total_steps=20)


def restarted_run() -> Run:
    """Preempted after step 12, restored from the checkpoint of step 9: steps 10..12 run again."""
    first = Group(process=2.0, loop=4.5, prepared=12.0, compiled=30.0, steps=steps(0, 12), evals={9: 4.9})
    restart_at = 30.0 + 0.5 * 13 + 20.0  # the notice's deadline passed, a new group asked for
    second = Group(
        process=restart_at + 8.0,
        loop=restart_at + 10.0,
        prepared=restart_at + 18.0,
        restore=3.0,
        compiled=restart_at + 21.0,
        cache="hit",
        steps=steps(10, 24, loss=4.8),
        evals={19: 3.9},
    )
    lines = [dataset_line(JOB_START + 0.5), *first.lines(), *retry_lines("preemption", 1), *second.lines()]
    return read_run(lines, seconds=100.0, total_steps=25)


def diverged_run() -> Run:
    """The loss is a number until step 6, then nan for every step after it."""
    ran = [
        *steps(0, 5),
        *(Step(n, 0.5, math.nan, tflops=371.0) for n in range(6, 10)),
    ]
    group = Group(process=2.0, loop=4.5, prepared=12.0, compiled=30.0, steps=ran)
    return read_run([dataset_line(JOB_START + 0.5), *group.lines()], seconds=100.0, total_steps=10)


FAILURE = "training failed: worker errors used up maxFailures = 0"


def failed_at_start_run() -> Run:
    """The first group got through MaxText's set-up, then failed compiling: no step."""
    group = Group(process=2.0, loop=4.5, prepared=12.0)
    lines = [
        dataset_line(JOB_START + 0.5),
        *group.lines(),
        WORKER + "RuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm.",
        *retry_lines("worker group", 1, allowed="0"),
        event_line("failed", time=JOB_START + 40.0, message=FAILURE),
    ]
    run = read_run(lines, seconds=41.0, status="FAILED", total_steps=20)
    # As the provider says it: the trainer's last word, then Ray's message.
    failure = f"RayJob {run.header.submission_id} ended FAILED: {run.log.record.failure} (Job entrypoint failed)"
    return dataclasses.replace(run, header=dataclasses.replace(run.header, failure=failure))


def compile_in_first_step_run() -> Run:
    """MaxText's first step's time holds the compile (its clock started before it), in a short job:
    the wall time's parts overlap by more than the time they leave out."""
    group = Group(process=2.0, loop=4.5, prepared=12.0, compiled=42.0, steps=steps(0, 9), compile_in_first_step=30.0)
    return read_run(group.lines(), seconds=60.0, total_steps=10)
