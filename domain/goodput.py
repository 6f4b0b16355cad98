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
- seconds to first step: from the job's start to the first step completed;
- goodput: the step time that counts (MaxText's own seconds for each distinct step, its last
  run) over the job's wall time, as a percentage.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

EVENT_PREFIX = "maxtext-tpu-event "

# MaxText's step line (its metric logger), without what Ray puts in front of it.
MAXTEXT_STEP = re.compile(r"completed step: (?P<step>\d+), seconds: (?P<seconds>[\d.]+)")
# Ray Train 2.60's retry decisions (ray/train/v2/_internal/execution/failure_handling/default.py),
# one field per line, each prefixed by Ray with the controller actor's name.
RAY_TRAIN_CONTROLLER = "(TrainController"
RAY_TRAIN_SOURCE = re.compile(r"^\s*Source: (?P<source>[a-z ]+?)\s*$")
RAY_TRAIN_COUNT = re.compile(r"^\s*Error count: (?P<count>\d+) \(max allowed: (?P<allowed>[^)]+)\)")
PREEMPTION_SOURCE, FAILURE_SOURCE = "preemption", "worker group"

OUTPUTS = (
    "restarts",
    "preemptions",
    "failures",
    "steps_recomputed",
    "seconds_lost_to_restarts",
    "seconds_to_first_step",
    "goodput_percent",
)


def event_line(event: str, **fields: Any) -> str:
    """One event as a log line: the prefix, then compact JSON with the event's name first."""
    return EVENT_PREFIX + json.dumps({"event": event, **fields}, separators=(",", ":"))


def parse_event(line: str) -> dict[str, Any] | None:
    """The event on a log line, wherever Ray's prefix put it; None for any other line, and for a
    line whose JSON is cut or damaged (a log is read as it is, stray bytes included)."""
    start = line.find(EVENT_PREFIX)
    if start < 0:
        return None
    try:
        event = json.loads(line[start + len(EVENT_PREFIX) :])
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


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
    """Reads a job's log lines, in order, and keeps only what the summary needs."""

    attempts: list[Attempt] = field(default_factory=list)
    # step -> (runs, MaxText's seconds for its latest run, when that run was logged)
    steps: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    # Ray Train's retry counts, by the budget charged: the largest count read for each.
    charged: dict[str, int] = field(default_factory=dict)
    # What the driver said when the run failed: the budget that ran out, in words.
    failure: str | None = None
    _source: str | None = None

    def add_text(self, text: str) -> None:
        for line in text.splitlines():
            self.add_line(line)

    def add_line(self, line: str) -> None:
        event = parse_event(line)
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

    def add(self, event: dict[str, Any]) -> None:
        kind, at = event["event"], event.get("time")
        if kind == "attempt":
            if all(attempt.started != at for attempt in self.attempts):
                self.attempts.append(Attempt(started=at, workers=event.get("workers")))
        elif kind == "failed":
            self.failure = str(event.get("message"))
        elif kind == "step" and isinstance(at, (int, float)):
            step = int(event["step"])
            runs, _, logged = self.steps.get(step, (0, 0.0, None))
            if logged == at:
                return  # the same run, read twice
            attempt = self._current()
            if attempt.first_step_at is None:
                attempt.first_step, attempt.first_step_at = step, at
            attempt.last_step, attempt.last_step_at = step, at
            self.steps[step] = (runs + 1, float(event["seconds"]), at)

    def _current(self) -> Attempt:
        if not self.attempts:  # a step before any `attempt` line: the log's head was not read
            self.attempts.append(Attempt())
        return self.attempts[-1]

    def summary(self, start: float | None, end: float | None) -> dict[str, Any]:
        """The goodput outputs, for a job that ran from `start` to `end` (epoch seconds); a
        value that the log cannot give is None."""
        if not self.attempts:
            return dict.fromkeys(OUTPUTS)
        # A group that never completed a step (stopped while starting or compiling) is part of
        # the gap around it.
        stepped = [attempt for attempt in self.attempts if attempt.first_step_at is not None]
        gaps = [
            after.first_step_at - before.last_step_at
            for before, after in itertools.pairwise(stepped)
            if before.last_step_at is not None and after.first_step_at is not None
        ]
        first = next((attempt.first_step_at for attempt in self.attempts if attempt.first_step_at), None)
        productive = sum(seconds for _, seconds, _ in self.steps.values())
        wall = end - start if start is not None and end is not None else None
        return {
            "restarts": len(self.attempts) - 1,
            "preemptions": self.charged.get(PREEMPTION_SOURCE, 0),
            "failures": self.charged.get(FAILURE_SOURCE, 0),
            "steps_recomputed": sum(runs - 1 for runs, _, _ in self.steps.values()),
            "seconds_lost_to_restarts": round(float(sum(gaps)), 1) if stepped else None,
            "seconds_to_first_step": round(first - start, 1) if first is not None and start is not None else None,
            "goodput_percent": round(100 * productive / wall, 1) if wall and self.steps else None,
        }


def maxtext_step(message: str) -> tuple[int, float] | None:
    """(step, seconds) from MaxText's step message, or None for any other message."""
    match = MAXTEXT_STEP.search(message)
    return (int(match["step"]), float(match["seconds"])) if match else None
