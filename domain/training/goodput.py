"""What a training run did with its time: restarts, preemptions, recomputed steps and goodput.

The trainer's events (domain/training/job_events.py: a worker group's `attempt`, each `step` with the
time MaxText logged it, a `failed` run) and Ray Train's retry decisions with the budget each was
charged to, as the job's reader (domain/training/job_log.py) finds them in the log, are kept by
`RunRecord` in bounded memory (one small entry per distinct step); `RunRecord.summary` turns them
into the job's goodput outputs.

A line may be read more than once (one process's log forwarded twice): events are told apart by
their time, and Ray Train's counts are cumulative, so the largest one read is the count. An event
line the reader could not use is counted here (`event_lines_skipped`), never raised, so no line
of the log can keep a job from being recorded.

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
- start phases: for every worker group, the seconds of each phase of its start
  (domain/training/start_phases.py), from the trainer's `attempt` and `phase` events;
- seconds lost to restarts by phase: the start phases of every group after the first, summed
  phase by phase (a restart's queued phase starts at the previous group's last step, so it holds
  the wait for the failure or the notice's deadline too);
- seconds waiting for data: the time the trainer measured MaxText spending in its data loader's
  fetch of each batch (the host waiting on the input pipeline, the first batch's start included),
  over every run of every step;
- goodput: the step time that counts (MaxText's own seconds for each distinct step, its last
  run) over the job's wall time, as a percentage.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from domain.training.job_events import (
    FAILURE_SOURCE,
    PREEMPTION_SOURCE,
    AttemptEvent,
    Event,
    FailedEvent,
    PhaseEvent,
    RetryCount,
    RetrySource,
    StepEvent,
)
from domain.training.start_phases import PHASES, CacheLookup, CacheResult, StartPhases, TrainerPhase, cache_why


@dataclass(frozen=True, kw_only=True)
class GoodputOutputs:
    """The goodput outputs of a job (RunRecord.summary's names, in order); each None where the
    log cannot give it."""

    restarts: int | None
    preemptions: int | None
    failures: int | None
    steps_recomputed: int | None
    seconds_lost_to_restarts: float | None
    seconds_queued: float | None
    seconds_to_first_step: float | None
    start_phases: list[dict[str, Any]] | None
    seconds_lost_to_restarts_by_phase: dict[str, float | None] | None
    goodput_percent: float | None
    seconds_waiting_for_data: float | None
    # Lines that carried the event prefix but no event the summary could use (damaged JSON, a
    # field of the wrong type): skipped, so the numbers above leave them out.
    event_lines_skipped: int | None


OUTPUTS = tuple(f.name for f in fields(GoodputOutputs))


def finite(value: float | None, digits: int) -> float | None:
    """`value` rounded to `digits`, or None when it is not a finite number: a summary holds only
    numbers that strict JSON (and a Pulumi output) can hold."""
    if value is None or not math.isfinite(value):
        return None
    rounded = round(value, digits)
    return rounded if math.isfinite(rounded) else None


@dataclass
class Attempt:
    """One worker group: when its process and its loop started, with how many workers, the
    phases of its start the trainer timed, and its first and last steps."""

    started: float | None = None
    workers: int | None = None
    process_started: float | None = None
    first_step: int | None = None
    first_step_at: float | None = None
    last_step: int | None = None
    last_step_at: float | None = None
    # The trainer's phases: (seconds, when the phase ended).
    phases: dict[TrainerPhase, tuple[float, float]] = field(default_factory=dict)
    cache: CacheResult | None = None
    cache_key: str | None = None
    cache_not_written: str | None = None

    def cache_lookup(self) -> CacheLookup | None:
        if self.cache is None:
            return None
        return CacheLookup(self.cache, self.cache_key, self.workers, self.cache_not_written)

    def last_seen(self) -> float | None:
        """The latest moment the log shows this group at: its last step, else the end of the last
        phase it reached, else its start."""
        if self.last_step_at is not None:
            return self.last_step_at
        ends = [end for _, end in self.phases.values()]
        return max(ends) if ends else self.started

    def start_phases(self, asked: float | None, earlier: Sequence[CacheLookup] = ()) -> StartPhases:
        """Its start, phase by phase, for a group asked for at `asked` (None: not known), after
        groups whose train steps the cache looked up as `earlier`. A worker process Ray had
        started before the ask (an idle one it keeps ready) counts from the ask."""
        lookup = self.cache_lookup()
        phases = StartPhases(
            compile_cache=self.cache, compile_cache_why=cache_why(lookup, earlier) if lookup is not None else None
        )
        placed = self.process_started
        if placed is not None and asked is not None:
            placed = max(placed, asked)
        if asked is not None:
            reached = placed if placed is not None else self.started
            phases.queued = finite(reached - asked, 1) if reached is not None else None
        if placed is not None and self.started is not None:
            phases.worker_start = finite(max(self.started - placed, 0.0), 1)
        for phase, (seconds, _) in self.phases.items():
            setattr(phases, phase, finite(seconds, 1))
        return phases


@dataclass
class RunRecord:
    """What a job's events and Ray Train's decisions say, fed in the log's order by the job's
    reader (domain/training/job_log.py), keeping only what the summary needs."""

    attempts: list[Attempt] = field(default_factory=list)
    # step -> (runs, MaxText's seconds for its latest run, when that run was logged)
    steps: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    # Ray Train's retry counts, by the budget charged: the largest count read for each.
    charged: dict[str, int] = field(default_factory=dict)
    # What the driver said when the run failed: the budget that ran out, in words.
    failure: str | None = None
    # The seconds the steps' events say MaxText waited for batches; None when no event says.
    data_seconds: float | None = None
    # Event lines skipped as damaged, and why the first one was.
    skipped: int = 0
    first_skip: str | None = None
    _source: str | None = None

    def skip(self, why: str) -> None:
        """An event line the reader could not use, and why."""
        self.skipped += 1
        self.first_skip = self.first_skip or why

    def ray_train(self, fact: RetrySource | RetryCount) -> None:
        """A line of Ray Train's retry decision: its source, then the count charged to it."""
        if isinstance(fact, RetrySource):
            self._source = fact.source
        elif self._source is not None:
            self.charged[self._source] = max(self.charged.get(self._source, 0), fact.count)
            self._source = None

    def add(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            if all(attempt.started != event.time for attempt in self.attempts):
                self.attempts.append(
                    Attempt(started=event.time, workers=event.workers, process_started=event.process_started)
                )
        elif isinstance(event, PhaseEvent):
            attempt = self._current()
            attempt.phases[event.phase] = (event.seconds, event.time)
            if event.cache is not None:
                attempt.cache, attempt.cache_key = event.cache, event.cache_key
                attempt.cache_not_written = event.cache_not_written
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
            if event.data_seconds is not None:
                self.data_seconds = (self.data_seconds or 0.0) + event.data_seconds

    def _current(self) -> Attempt:
        if not self.attempts:  # a step before any `attempt` line: the log's head was not read
            self.attempts.append(Attempt())
        return self.attempts[-1]

    def start_phases(self, start: float | None) -> list[StartPhases]:
        """Each group's start: the first asked for at the job's start, each later one when the
        group before it was last seen (its last step: the restart's wait for the failure or the
        notice's deadline is in its queued phase)."""
        asked = [start, *(attempt.last_seen() for attempt in self.attempts[:-1])]
        lookups = [attempt.cache_lookup() for attempt in self.attempts]
        return [
            attempt.start_phases(when, [lookup for lookup in lookups[:index] if lookup is not None])
            for index, (attempt, when) in enumerate(zip(self.attempts, asked, strict=True))
        ]

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
        starts = self.start_phases(start)
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
            "start_phases": [vars(phases) for phases in starts],
            "seconds_lost_to_restarts_by_phase": _by_phase(starts[1:]) if len(starts) > 1 else None,
            # A job with no wall time (or an end before its start) has no goodput.
            "goodput_percent": finite(100 * productive / wall, 1)
            if wall is not None and wall > 0 and self.steps
            else None,
            "seconds_waiting_for_data": finite(self.data_seconds, 1) if self.data_seconds is not None else None,
            "event_lines_skipped": self.skipped,
        }


def _by_phase(starts: list[StartPhases]) -> dict[str, float | None]:
    """The seconds of each phase summed over `starts`; None for a phase none of them timed."""
    totals: dict[str, float | None] = {}
    for phase in PHASES:
        known = [seconds for phases in starts if (seconds := phases.seconds(phase)) is not None]
        totals[phase] = finite(sum(known), 1) if known else None
    return totals
