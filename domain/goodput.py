"""What a training run did with its time: restarts, preemptions, recomputed steps and goodput.

The trainer writes one line per event to the job's log, `maxtext-tpu-event {json}` (see
`event_line`): rank 0 of every worker group writes `attempt` when it starts, `step` for each step
MaxText completes (with the wall-clock time MaxText logged it at), and `notice` when Ray Train
tells it that a node of the group is being drained for preemption; the driver writes `failed`
with the budget that ran out. Ray Train's controller logs each retry decision with the budget it
charged ("[FailurePolicy] RETRY", "Source: preemption", "Error count: 1 (max allowed: inf)").
`RunRecord` reads all of that back from the log, in bounded memory (one small entry per distinct
step), and `RunRecord.summary` turns it into the job's goodput outputs.

A line may be read more than once (one process's log forwarded twice): events are told apart by
their time, and Ray Train's counts are cumulative, so the largest one read is the count.

A log is read as it is: a line may be cut, hold stray bytes, or come from a trainer of another
version. Every field of every event is checked (the event models below); an event line that
fails is skipped and counted (`event_lines_skipped`), never raised, so no line of the log can
keep a job from being recorded. An event of a kind this module does not read is passed over.

Definitions (all from the log, none estimated):
- restarts: worker groups started after the first one (after a failure, a preemption, or a
  resize onto more slices);
- preemptions / failures: the restarts Ray Train charged to the preemption budget /
  to `max_failures` (its own classification, so they match the budgets it enforces);
- steps recomputed: step runs beyond the first for each step number (a step run before a
  failure and again after the restore counts once);
- seconds lost to restarts: for each restart, from the last step completed before it to the
  first step completed after it (the wait for the failure or the notice's deadline, the new
  group's start, the restore and the first, compiling step; a group stopped before its first
  step is inside that gap);
- seconds queued: from the job's start to its first worker group's start (the first `attempt`
  event): the wait for capacity (slices brought up, a placement found), before any step;
- seconds to first step: from the job's start to the first step completed (the wait for
  capacity included, then the group's start, the restore and the first, compiling step);
- goodput: the step time that counts (MaxText's own seconds for each distinct step, its last
  run) over the job's wall time, as a percentage.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

EVENT_PREFIX = "maxtext-tpu-event "
# Ray echoes the job's command at the top of its log: that line is the command (it may print
# events, or step lines), not something the job printed.
ENTRYPOINT_ECHO = "Running entrypoint for job"
# A step number has at most this many digits (MaxText's runs are far shorter): a longer one is a
# damaged line, and every count derived from steps stays a number JSON and Pulumi can hold.
STEP_DIGITS = 15
STEP_NUMBER = f"[0-9]{{1,{STEP_DIGITS}}}"

# MaxText's step line (its metric logger), without what Ray puts in front of it.
MAXTEXT_STEP = re.compile(rf"completed step: (?P<step>{STEP_NUMBER}), seconds: (?P<seconds>[0-9.]+)")
# Ray Train 2.60's retry decisions (ray/train/v2/_internal/execution/failure_handling/default.py),
# one field per line, each prefixed by Ray with the controller actor's name. A count of more
# than nine digits is not Ray's.
RAY_TRAIN_CONTROLLER = "(TrainController"
RAY_TRAIN_SOURCE = re.compile(r"^\s*Source: (?P<source>[a-z ]+?)\s*$")
RAY_TRAIN_COUNT = re.compile(r"^\s*Error count: (?P<count>[0-9]{1,9}) \(max allowed: (?P<allowed>[^)]+)\)")
PREEMPTION_SOURCE, FAILURE_SOURCE = "preemption", "worker group"

OUTPUTS = (
    "restarts",
    "preemptions",
    "failures",
    "steps_recomputed",
    "seconds_lost_to_restarts",
    "seconds_queued",
    "seconds_to_first_step",
    "goodput_percent",
    # Lines that carried the event prefix but no event the summary could use (damaged JSON, a
    # field of the wrong type): skipped, so the numbers above leave them out.
    "event_lines_skipped",
)


def event_line(event: str, **fields: Any) -> str:
    """One event as a log line: the prefix, then compact JSON with the event's name first."""
    return EVENT_PREFIX + json.dumps({"event": event, **fields}, separators=(",", ":"))


# ------------------------------------------------------------------ the events, field by field
# Strict: a number must be a JSON number (not a string, not a boolean), finite, and a step an
# integer. Fields a kind does not declare are ignored, so the trainer may add some.
_STRICT = ConfigDict(strict=True, extra="ignore", frozen=True)
Time = Annotated[float, Field(allow_inf_nan=False)]
Step = Annotated[int, Field(ge=0, lt=10**STEP_DIGITS)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class AttemptEvent(BaseModel):
    """A worker group started (rank 0 of the group writes it)."""

    model_config = _STRICT
    event: Literal["attempt"]
    time: Time
    workers: Annotated[int, Field(ge=1)] | None = None


class StepEvent(BaseModel):
    """MaxText completed a step: when it logged it, and the step's own seconds."""

    model_config = _STRICT
    event: Literal["step"]
    time: Time
    step: Step
    seconds: Seconds


class NoticeEvent(BaseModel):
    """Ray Train told the group that a node is being drained for preemption."""

    model_config = _STRICT
    event: Literal["notice"]
    time: Time | None = None
    deadline_ms: int | None = None
    preempted_ranks: list[Annotated[int, Field(ge=0)]] | None = None


class FailedEvent(BaseModel):
    """The driver's last word on a failed run: the retry budget that ran out."""

    model_config = _STRICT
    event: Literal["failed"]
    time: Time | None = None
    message: str


Event = AttemptEvent | StepEvent | NoticeEvent | FailedEvent
# The kinds this module reads. Any other kind is another reader's (the trainer may add kinds):
# it is passed over, and not counted as damaged.
EVENT_KINDS: dict[str, type[Event]] = {
    "attempt": AttemptEvent,
    "step": StepEvent,
    "notice": NoticeEvent,
    "failed": FailedEvent,
}


class BadEventLine(ValueError):
    """A line with the event prefix that holds no readable event."""


def _event_object(line: str) -> dict[str, Any] | None:
    """The JSON object after the event prefix; None for a line without the prefix. Raises
    BadEventLine when what follows the prefix is not an object with a string `event`."""
    start = line.find(EVENT_PREFIX)
    if start < 0:
        return None
    try:
        event = json.loads(line[start + len(EVENT_PREFIX) :])
    except (ValueError, RecursionError) as error:  # cut, stray bytes, too deep, too many digits
        raise BadEventLine(f"not JSON ({error.__class__.__name__})") from None
    if not isinstance(event, dict):
        raise BadEventLine(f"a JSON {type(event).__name__}, not an object")
    if not isinstance(event.get("event"), str):
        raise BadEventLine("no string `event` field")
    return event


def parse_event(line: str) -> dict[str, Any] | None:
    """The event on a log line, wherever Ray's prefix put it, as its JSON object (any kind, its
    fields unchecked); None for any other line, and for a line whose JSON is cut or damaged (a
    log is read as it is, stray bytes included)."""
    try:
        return _event_object(line)
    except BadEventLine:
        return None


def read_event(line: str) -> Event | None:
    """The event on a log line, every field checked; None for a line that is no event, or an
    event of a kind not in EVENT_KINDS. Raises BadEventLine, saying why, for an event line that
    is damaged or has a field of the wrong type."""
    event = _event_object(line)
    if event is None or (model := EVENT_KINDS.get(event["event"])) is None:
        return None
    try:
        return model.model_validate(event)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}" for problem in error.errors()
        )
        raise BadEventLine(f"{event['event']} event: {problems}") from None


def finite(value: float | None, digits: int) -> float | None:
    """`value` rounded to `digits`, or None when it is not a finite number: a summary holds only
    numbers that strict JSON (and a Pulumi output) can hold."""
    if value is None or not math.isfinite(value):
        return None
    rounded = round(value, digits)
    return rounded if math.isfinite(rounded) else None


@dataclass
class Attempt:
    """One worker group: when it started, with how many workers, and its first and last steps."""

    started: float | None = None
    workers: int | None = None
    first_step: int | None = None
    first_step_at: float | None = None
    last_step: int | None = None
    last_step_at: float | None = None


@dataclass
class RunRecord:
    """Reads a job's log lines, in order, and keeps only what the summary needs. No line can
    make it raise: an event line it cannot use is skipped and counted."""

    attempts: list[Attempt] = field(default_factory=list)
    # step -> (runs, MaxText's seconds for its latest run, when that run was logged)
    steps: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    # Ray Train's retry counts, by the budget charged: the largest count read for each.
    charged: dict[str, int] = field(default_factory=dict)
    # What the driver said when the run failed: the budget that ran out, in words.
    failure: str | None = None
    # Event lines skipped as damaged, and why the first one was.
    skipped: int = 0
    first_skip: str | None = None
    _source: str | None = None

    def add_text(self, text: str) -> None:
        for line in text.splitlines():
            self.add_line(line)

    def add_line(self, line: str) -> None:
        if line.startswith(ENTRYPOINT_ECHO):
            return
        try:
            event = read_event(line)
        except BadEventLine as error:
            self.skipped += 1
            self.first_skip = self.first_skip or str(error)
            return
        if event is not None:
            self.add(event)
        elif RAY_TRAIN_CONTROLLER in line:
            self._controller_line(line.split("\x1b[0m", 1)[-1].split(") ", 1)[-1])

    def _controller_line(self, text: str) -> None:
        if (source := RAY_TRAIN_SOURCE.match(text)) is not None:
            self._source = source["source"]
        elif (count := RAY_TRAIN_COUNT.match(text)) is not None and self._source is not None:
            self.charged[self._source] = max(self.charged.get(self._source, 0), int(count["count"]))
            self._source = None

    def add(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            if all(attempt.started != event.time for attempt in self.attempts):
                self.attempts.append(Attempt(started=event.time, workers=event.workers))
        elif isinstance(event, FailedEvent):
            self.failure = event.message
        elif isinstance(event, StepEvent):
            runs, _, logged = self.steps.get(event.step, (0, 0.0, None))
            if logged == event.time:
                return  # the same run, read twice
            attempt = self._current()
            if attempt.first_step_at is None:
                attempt.first_step, attempt.first_step_at = event.step, event.time
            attempt.last_step, attempt.last_step_at = event.step, event.time
            self.steps[event.step] = (runs + 1, event.seconds, event.time)

    def _current(self) -> Attempt:
        if not self.attempts:  # a step before any `attempt` line: the log's head was not read
            self.attempts.append(Attempt())
        return self.attempts[-1]

    def summary(self, start: float | None, end: float | None) -> dict[str, Any]:
        """The goodput outputs, for a job that ran from `start` to `end` (epoch seconds); a
        value that the log cannot give is None, and so is one that is not a finite number."""
        if not self.attempts:
            return {**dict.fromkeys(OUTPUTS), "event_lines_skipped": self.skipped}
        # A group that never completed a step (stopped while starting or compiling) is part of
        # the gap around it.
        stepped = [attempt for attempt in self.attempts if attempt.first_step_at is not None]
        gaps = [
            after.first_step_at - before.last_step_at
            for before, after in itertools.pairwise(stepped)
            if before.last_step_at is not None and after.first_step_at is not None
        ]
        first = stepped[0].first_step_at if stepped else None
        # None when the log's head (where the first `attempt` line is) was not read.
        queued = self.attempts[0].started
        productive = sum(seconds for _, seconds, _ in self.steps.values())
        wall = end - start if start is not None and end is not None else None
        return {
            "restarts": len(self.attempts) - 1,
            "preemptions": self.charged.get(PREEMPTION_SOURCE, 0),
            "failures": self.charged.get(FAILURE_SOURCE, 0),
            "steps_recomputed": sum(runs - 1 for runs, _, _ in self.steps.values()),
            "seconds_lost_to_restarts": finite(sum(gaps), 1) if stepped else None,
            "seconds_queued": finite(queued - start, 1) if queued is not None and start is not None else None,
            "seconds_to_first_step": finite(first - start, 1) if first is not None and start is not None else None,
            # A job with no wall time (or an end before its start) has no goodput.
            "goodput_percent": finite(100 * productive / wall, 1)
            if wall is not None and wall > 0 and self.steps
            else None,
            "event_lines_skipped": self.skipped,
        }


def maxtext_step(message: str) -> tuple[int, float] | None:
    """(step, seconds) from MaxText's step message, or None for any other message (and for one
    whose numbers do not read: the trainer calls this from a logging handler, where an
    exception would reach MaxText's own logging call)."""
    match = MAXTEXT_STEP.search(message)
    if match is None:
        return None
    try:
        seconds = float(match["seconds"])
    except ValueError:  # "1.2.3"
        return None
    return (int(match["step"]), seconds) if math.isfinite(seconds) else None
