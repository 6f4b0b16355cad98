"""What a job's log shows: live progress while it runs, its last lines in an error message, and its
metrics once it has ended.

Progress goes to stderr: Python dynamic providers run inside the engine's
`pulumi-resource-pulumi-python` plugin, and the engine streams that plugin's stderr to the user as
info lines. A log can never change what the job's status says: a log that cannot be read leaves
the metrics incomplete and says so.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from domain.ray.queueing import waiting_line
from domain.training.goodput import OUTPUTS as GOODPUT_OUTPUTS
from domain.training.goodput import RunRecord
from domain.training.job_log import JobLog, StepCollector
from domain.training.run_scalars import Scalar
from domain.training.start_phases import StartPhases
from workloads.jobs_api import JobsApi
from workloads.jobs_api.errors import JobsApiError

LOG_TAIL_LINES = 50
PROGRESS_EVERY_SECONDS = 15.0


class ProgressReporter:
    """Honest live progress as plain lines: steps done of the total, loss and an ETA from the
    measured step rate. Lines, not a redrawn bar: the engine shows the plugin's stderr line by
    line, and a terminal shows them the same way."""

    def __init__(
        self,
        job_id: str,
        total_steps: int | None,
        stream: TextIO | None = None,
        every_seconds: float = PROGRESS_EVERY_SECONDS,
    ):
        self.job_id = job_id
        self.total_steps = total_steps
        self.stream = stream or sys.stderr
        self.every_seconds = every_seconds
        self._last_print = 0.0
        self._last_line = ""
        self._first_seen: tuple[float, int] | None = None
        self._waiting_for: tuple[int, int | None] | None = None

    def status(self, status: str) -> None:
        self._emit(f"RayJob {self.job_id}: {status}", force=True)

    def waiting(self, asked: int, up: int | None) -> None:
        """While the job waits for its slices: a line when the numbers change, none otherwise."""
        if (asked, up) != self._waiting_for:
            self._waiting_for = (asked, up)
            self._emit(f"RayJob {self.job_id}: {waiting_line(asked, up)}", force=True)

    def starting(self, record: RunRecord, job_start_ms: int | None) -> None:
        """While a worker group starts: a line each time it ends another phase of its start."""
        if not record.attempts:
            return
        starts = record.start_phases(job_start_ms / 1000 if job_start_ms else None)
        if line := starts[-1].line():
            number = len(starts)
            group = "its worker group" if number == 1 else f"worker group {number} (a restart)"
            self._emit(f"RayJob {self.job_id}: starting {group}: {line}", force=True)

    def started(self, start_phases: list[dict[str, Any]] | None) -> None:
        """Once the job has ended: how each of its worker groups started, phase by phase."""
        for number, entry in enumerate(start_phases or [], start=1):
            phases = StartPhases(**entry)
            group = "its worker group" if number == 1 else f"worker group {number} (a restart)"
            if line := phases.line():
                self.status(f"{group} started: {line}")

    def update(self, steps: StepCollector) -> None:
        latest = steps.latest
        if latest is None:
            return
        done = latest.step + 1
        now = time.monotonic()
        if self._first_seen is None:
            self._first_seen = (now, done)
        parts = [f"RayJob {self.job_id}: step {done}"]
        if self.total_steps:
            parts[0] += f"/{self.total_steps} ({100 * done // self.total_steps}%)"
        parts.append(f"loss {latest.loss:.3f}" if math.isfinite(latest.loss) else f"loss {latest.loss}: DIVERGED")
        started, first_done = self._first_seen
        if self.total_steps and done > first_done:
            seconds_per_step = (now - started) / (done - first_done)
            remaining = max(self.total_steps - done, 0) * seconds_per_step
            parts.append(f"ETA {int(remaining // 60)}m{int(remaining % 60):02d}s")
        self._emit(", ".join(parts))

    def _emit(self, line: str, force: bool = False) -> None:
        now = time.monotonic()
        if line == self._last_line or (not force and now - self._last_print < self.every_seconds):
            return
        print(line, file=self.stream, flush=True)
        self._last_print, self._last_line = now, line


def shown(read: JobLog, problem: str | None) -> str:
    """The log's last lines for an error message (the reader leaves out Ray's echo of the
    command, which may hold settings the stack keeps secret), or why the log could not be read."""
    return f"--- last {LOG_TAIL_LINES} log lines ---\n{read.tail_text()}" if problem is None else problem


def read_tail(api: JobsApi, info: Any, steps: StepCollector) -> tuple[JobLog, str | None]:
    """The log's tail, read once by the job's reader (its steps into `steps`); on failure, an
    empty read and a line saying that the metrics are incomplete."""
    read = JobLog(steps, tail_lines=LOG_TAIL_LINES)
    if not info.driver_node_id:
        return read, "the job never started a driver, so it has no log"
    try:
        tail = api.log_tail(info.submission_id, info.driver_node_id)
    except JobsApiError as error:
        return read, f"the job's log could not be read ({error}); its metrics are only what was seen before"
    read.add_text(tail.decode("utf-8", errors="replace"))
    return read, None


def read_whole_log(
    api: JobsApi, info: Any, seen: StepCollector, scalars: Callable[[list[Scalar]], None] | None = None
) -> tuple[StepCollector, dict[str, Any], str | None]:
    """The ended job's steps and goodput outputs (read_ended_log); each step's and evaluation's
    scalars go to `scalars` as they are read."""
    read, goodput, problem = read_ended_log(api, info, seen, scalars)
    return read.steps, goodput, problem


def read_ended_log(
    api: JobsApi,
    info: Any,
    seen: StepCollector,
    scalars: Callable[[list[Scalar]], None] | None = None,
    tail_lines: int = 0,
) -> tuple[JobLog, dict[str, Any], str | None]:
    """The ended job's log, read once, whole and streamed (the events are spread over all of
    it): the read (its steps, the failure's words, its last `tail_lines` lines) and the goodput
    outputs; each step's and evaluation's scalars go to `scalars` as they are read. The steps are
    a fresh count, since the tails read while the job ran can miss lines between them. On
    failure, a read over the steps `seen` while it ran, None for each goodput output and a line
    saying why."""
    no_goodput = dict.fromkeys(GOODPUT_OUTPUTS)
    if not info.driver_node_id:
        return JobLog(seen), no_goodput, "the job never started a driver, so it has no log"
    read = JobLog(StepCollector(), tail_lines=tail_lines, scalars=scalars)
    try:
        read.add_lines(api.log_lines(info.submission_id, info.driver_node_id))
    except JobsApiError as error:
        return (
            JobLog(seen),
            no_goodput,
            (
                f"the job's log could not be read whole ({error}); its metrics are only what was seen before, "
                "and it has no goodput"
            ),
        )
    start = info.start_time / 1000 if info.start_time else None
    end = info.end_time / 1000 if info.end_time else None
    return read, read.record.summary(start, end), None
