"""The lines of a job's log that mean something, declared once: the trainer's events, MaxText's
step line, and the two lines of Ray Train's controller that say which retry budget it charged.

The trainer writes one line per event, `maxtext-tpu-event {json}` (`event_line`): rank 0 of every
worker group writes `attempt` when it starts, `step` for each step MaxText completes (with the
wall-clock time MaxText logged it at), `notice` when Ray Train tells it that a node of the group
is being drained for preemption and `notice_saved` for the checkpoint written at that notice, and
`phase` as each phase of its start ends (domain/training/start_phases.py); every rank writes
`step_tokens` before a checkpoint of a step is written (its share of the step's tokens); the
driver writes
`failed` with the budget that ran out. Writers and readers take the kinds, fields
and prefix from here; domain/training/job_log.py is the one reader of a log.

A log is read as it is: a line may be cut, hold stray bytes, or come from a trainer of another
version. Every field of every event is checked (the event models below); `read_event` says why
an event line is unusable instead of returning a half-read event. An event of a kind not in
EVENT_KINDS is another reader's (the trainer may add kinds): no reader here counts it as damaged.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from domain.training.start_phases import CacheResult, TrainerPhase

EVENT_PREFIX = "maxtext-tpu-event "
# Ray echoes the job's command at the top of its log: that line is the command (it may print
# events, or step lines), not something the job printed.
ENTRYPOINT_ECHO = "Running entrypoint for job"
NOTICE_SAVED_EVENT = "notice_saved"
# A longer step number is a damaged line; counts derived from steps stay numbers JSON can hold.
STEP_DIGITS = 15


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
    # When Ray started the process this group's rank 0 runs in (it places the group, then starts
    # its workers); absent from trainers that did not say.
    process_started: Time | None = None


class PhaseEvent(BaseModel):
    """A phase of the group's start that the trainer timed ended (rank 0 writes it)."""

    model_config = _STRICT
    event: Literal["phase"]
    time: Time
    phase: TrainerPhase
    seconds: Seconds
    # The compile phase only: what the persistent compilation cache did for the train step, the
    # key JAX looked it up by, and why JAX did not write what it compiled (start_phases.py).
    cache: CacheResult | None = None
    cache_key: str | None = None
    cache_not_written: str | None = None


class StepEvent(BaseModel):
    """MaxText completed a step: when it logged it, and the step's own seconds."""

    model_config = _STRICT
    event: Literal["step"]
    time: Time
    step: Step
    seconds: Seconds
    # The time MaxText's data loader spent fetching batches since the previous step event (the
    # host waiting on its input pipeline); absent from trainers that did not measure it.
    data_seconds: Seconds | None = None


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


class StepTokensEvent(BaseModel):
    """Before a checkpoint of a step is written, each process of the group says its share of the
    step's batch: its real (not padding) target tokens. A run resumed from that checkpoint may
    never log the step (MaxText logs a step one step late, and stops at a preemption save before
    logging it), so its tokens would otherwise be unknown."""

    model_config = _STRICT
    event: Literal["step_tokens"]
    time: Time | None = None
    step: Step
    tokens: Annotated[int, Field(ge=0)]
    process: Annotated[int, Field(ge=0)]
    processes: Annotated[int, Field(ge=1)]


class DatasetEvent(BaseModel):
    """The driver read the job's data files before the first step: which, and their prepared
    corpus's manifest figures when it has one (domain/training/dataset_manifest.py)."""

    model_config = _STRICT
    event: Literal["dataset"]
    time: Time | None = None
    files: str
    content_hash: str | None = None
    documents: Annotated[int, Field(ge=0)] | None = None
    tokens: Annotated[int, Field(ge=0)] | None = None
    # Of `tokens`, what MaxText's trim to max_target_length drops each pass, where the manifest
    # counts each document's tokens; a pass reads the rest.
    tokens_truncated: Annotated[int, Field(ge=0)] | None = None
    # The passes the job may make over the files (its epochs setting), and the sequences a step
    # reads (the global batch): a step reads its targets and, per sequence, the first token,
    # which is never a target.
    passes: Annotated[int, Field(ge=1)] = 1
    sequences_per_step: Annotated[int, Field(ge=1)] | None = None

    @property
    def tokens_per_pass(self) -> int | None:
        if self.tokens is None:
            return None
        return self.tokens - (self.tokens_truncated or 0)


Event = AttemptEvent | StepEvent | NoticeEvent | FailedEvent | DatasetEvent | PhaseEvent | StepTokensEvent
# The kinds the job's reader uses. Any other kind is another reader's: passed over, not damaged.
EVENT_KINDS: dict[str, type[Event]] = {
    "attempt": AttemptEvent,
    "step": StepEvent,
    "notice": NoticeEvent,
    "failed": FailedEvent,
    "dataset": DatasetEvent,
    "phase": PhaseEvent,
    "step_tokens": StepTokensEvent,
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


# ------------------------------------------------------------------ MaxText's step line
# e.g. `completed step: 99, seconds: 0.693, TFLOP/s/device: 83.171, ...`: MaxText leaves out the
# throughput and loss while the batch size ramps up, so such a line is a step with no metrics.
MAXTEXT_STEP_LINE = re.compile(
    rf"completed step: (?P<step>[0-9]{{1,{STEP_DIGITS}}}), seconds: (?P<seconds>[0-9.]+)"
    r"(?:, TFLOP/s/device: (?P<tflops>[0-9.]+), Tokens/s/device: (?P<tokens>[0-9.]+), "
    # The loss as Python prints a float, `nan` and `inf` included (a diverged run).
    r"total_weights: (?P<weights>[0-9]+), loss: (?P<loss>[-+\w.]+))?"
)
# e.g. `Completed eval after train step 9, loss=7.412, perplexity=1655.2, ...`.
MAXTEXT_EVAL_LINE = re.compile(
    rf"Completed eval after train step (?P<step>[0-9]{{1,{STEP_DIGITS}}}), loss=(?P<loss>[-+\w.]+),"
)


def eval_loss(line: str) -> tuple[int, float] | None:
    """(train step, eval loss) from MaxText's eval summary line; None for any other line."""
    match = MAXTEXT_EVAL_LINE.search(line)
    if match is None:
        return None
    try:
        return int(match["step"]), float(match["loss"])
    except ValueError:
        return None


@dataclass(frozen=True)
class StepMetrics:
    """What MaxText's step line says about a step besides its time."""

    step: int
    seconds: float
    tflops_per_device: float
    tokens_per_second_per_device: float
    loss: float  # may be nan or inf: the run diverged
    tokens: int = 0  # the batch's real (not padding) target tokens: MaxText's total_weights

    @property
    def throughput(self) -> tuple[float, float] | None:
        """(tokens/s, TFLOP/s) per device, when both are finite numbers."""
        sample = (self.tokens_per_second_per_device, self.tflops_per_device)
        return sample if all(math.isfinite(value) for value in sample) else None


def maxtext_step(message: str) -> tuple[int, float] | None:
    """(step, seconds) from MaxText's step message, or None for any other message (and for one
    whose seconds do not read as a finite number: the trainer calls this from a logging handler,
    where an exception would reach MaxText's own logging call)."""
    match = MAXTEXT_STEP_LINE.search(message)
    if match is None:
        return None
    try:
        seconds = float(match["seconds"])
    except ValueError:  # "1.2.3"
        return None
    return (int(match["step"]), seconds) if math.isfinite(seconds) else None


def step_metrics(line: str) -> StepMetrics | None:
    """The metrics of MaxText's step line; None for any other line, for a step line without its
    throughput, and for one whose numbers do not read (`loss: -`, `seconds: 1.2.3`, a cut line)."""
    match = MAXTEXT_STEP_LINE.search(line)
    if match is None or match["loss"] is None:
        return None
    try:
        return StepMetrics(
            step=int(match["step"]),
            seconds=float(match["seconds"]),
            tflops_per_device=float(match["tflops"]),
            tokens_per_second_per_device=float(match["tokens"]),
            loss=float(match["loss"]),
            tokens=int(match["weights"]),
        )
    except ValueError:  # "1.2.3", "-", "abc"
        return None


# ------------------------------------------------------------------ Ray Train's own text
# Which budget a retry was charged to is logged by Ray Train only as text, one field per line
# (docs/training.md, "The trainer"); tests/test_job_log.py holds this to the installed Ray's.
RAY_TRAIN_CONTROLLER = "(TrainController"
_RAY_TRAIN_SOURCE = re.compile(r"^\s*Source: (?P<source>[a-z ]+?)\s*$")
# A count of more than nine digits is not Ray's.
_RAY_TRAIN_COUNT = re.compile(r"^\s*Error count: (?P<count>[0-9]{1,9}) \(max allowed: (?P<allowed>[^)]+)\)")
PREEMPTION_SOURCE, FAILURE_SOURCE = "preemption", "worker group"


@dataclass(frozen=True)
class RetrySource:
    """`Source: preemption`: the budget the retry decision being logged is charged to."""

    source: str


@dataclass(frozen=True)
class RetryCount:
    """`Error count: 2 (max allowed: inf)`: how many retries that budget has been charged."""

    count: int


def ray_train_retry_line(line: str) -> RetrySource | RetryCount | None:
    """What a line of Ray Train's controller says about a retry decision; None for any other
    line. A decision is a source line followed by its count line: the reader pairs them."""
    if RAY_TRAIN_CONTROLLER not in line:
        return None
    text = line.split("\x1b[0m", 1)[-1].split(") ", 1)[-1]  # what follows Ray's `(TrainController pid=...)`
    if (source := _RAY_TRAIN_SOURCE.match(text)) is not None:
        return RetrySource(source["source"])
    if (count := _RAY_TRAIN_COUNT.match(text)) is not None:
        return RetryCount(int(count["count"]))
    return None
