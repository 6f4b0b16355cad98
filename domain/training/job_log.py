"""The one reader of a job's log: each line is read once, and what it says goes to the job's
progress and metrics (MaxText's step lines), its goodput (the trainer's events and Ray Train's
retry decisions, domain/training/goodput.py) and the last lines an error shows. The lines themselves are
declared in domain/training/job_events.py.

A log is read as it is: no line can make the reader raise. An event line that is damaged or has a
field of the wrong type is skipped and counted; a step line whose numbers do not read is no step.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from domain.training.goodput import RunRecord, finite
from domain.training.job_events import (
    ENTRYPOINT_ECHO,
    BadEventLine,
    DatasetEvent,
    StepMetrics,
    StepTokensEvent,
    eval_loss,
    ray_train_retry_line,
    read_event,
    step_metrics,
)
from domain.training.run_scalars import Scalar, eval_scalars, step_scalars

# Throughput medians are taken over at most this many steps (the latest seen), so what the
# provider keeps does not grow with the run.
MEDIAN_WINDOW_STEPS = 1000


@dataclass(frozen=True, kw_only=True)
class StepOutputs:
    """A job's step metrics, among its outputs (StepCollector.summary's names, in order)."""

    steps_completed: int
    final_loss: float | None
    diverged: bool | None
    tokens_per_second_per_device: float | None
    tflops_per_device: float | None


@dataclass(frozen=True, kw_only=True)
class DataOutputs:
    """What a job trained on, among its outputs (StepCollector.summary's names, in order)."""

    tokens_trained: int | None
    tokens_truncated: int | None
    epochs: float | None
    eval_loss: float | None
    dataset_files: str | None
    dataset_hash: str | None


DATA_OUTPUTS = tuple(f.name for f in fields(DataOutputs))

# Where MaxText writes a run's TensorBoard logs (its tensorboard_dir: base.yml's default, under the
# run's directory); `tensorboard --logdir DIR` shows them.
TENSORBOARD_SUBDIRECTORY = "tensorboard"


def tensorboard_directory(run_directory: str) -> str:
    return f"{run_directory.rstrip('/')}/{TENSORBOARD_SUBDIRECTORY}"


class StepCollector:
    """Metrics from successive reads of a log (tails that overlap, then the whole log), in
    bounded memory.

    A step is counted once: only steps past the highest one seen so far join the throughput
    samples, and step 0 (it includes XLA compilation) never does, so a run seen only at step 0
    has no throughput. The final loss is the last step line read, even after an elastic restart
    set the step count back.
    """

    def __init__(self, window: int = MEDIAN_WINDOW_STEPS):
        self.latest: StepMetrics | None = None
        self.highest_step = -1
        self.tokens_trained = 0  # each step's tokens once, however often it ran
        self.eval_loss: float | None = None
        self.dataset: DatasetEvent | None = None
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)
        # Checkpointed steps not yet logged: the group's process count, and each process's share
        # of the step's tokens. A run resumed from one may never log it (StepTokensEvent).
        self._saved: dict[int, tuple[int, dict[int, int]]] = {}

    def add(self, text: str) -> None:
        """Reads a piece of the log for its steps (through the job's reader)."""
        JobLog(self).add_text(text)

    def saved_step(self, event: StepTokensEvent) -> None:
        """A process's share of a step about to be checkpointed."""
        if event.step > self.highest_step:
            _, shares = self._saved.get(event.step, (event.processes, {}))
            self._saved[event.step] = (event.processes, {**shares, event.process: event.tokens})

    def _saved_tokens(self, step: int) -> int | None:
        """A checkpointed step's tokens, when every process of its group said its share."""
        processes, shares = self._saved[step]
        return sum(shares.values()) if len(shares) == processes else None

    def add_step(self, step: StepMetrics) -> None:
        if step.step > self.highest_step:
            # Steps the log skipped: a checkpointed one counts as its processes said, any other
            # (a stretch of log not read) as this step's size.
            skipped = step.step - self.highest_step - 1
            said = [
                tokens
                for saved in self._saved
                if self.highest_step < saved < step.step and (tokens := self._saved_tokens(saved)) is not None
            ]
            self.tokens_trained += step.tokens * (1 + skipped - len(said)) + sum(said)
            if step.step > 0 and (sample := step.throughput) is not None:
                self._samples.append(sample)
            self.highest_step = step.step
            self._saved = {saved: said for saved, said in self._saved.items() if saved > step.step}
        self.latest = step

    def summary(self) -> dict[str, Any]:
        """The metrics outputs, StepOutputs' and DataOutputs' names. Every number is finite or
        None (strict JSON): a last loss that is not finite is `final_loss` None with `diverged`
        True."""
        data = self._data_summary()
        if self.latest is None:
            return {
                "steps_completed": 0,
                "final_loss": None,
                "diverged": None,
                "tokens_per_second_per_device": None,
                "tflops_per_device": None,
                **data,
            }
        samples = list(self._samples)
        diverged = not math.isfinite(self.latest.loss)
        return {
            "steps_completed": self.highest_step + 1,
            "final_loss": None if diverged else self.latest.loss,
            "diverged": diverged,
            "tokens_per_second_per_device": finite(statistics.median(s[0] for s in samples), 3) if samples else None,
            "tflops_per_device": finite(statistics.median(s[1] for s in samples), 3) if samples else None,
            **data,
        }

    def _data_summary(self) -> dict[str, float | int | str | None]:
        """What the job trained on: the data's identity (synthetic: none), its tokens (each step
        once; a checkpointed step never logged as its processes said before the checkpoint, any
        other step the log lost as its successor's size), the passes over a corpus whose manifest
        counts its tokens (`epochs`), and the last evaluation's loss."""
        dataset = self.dataset
        return {
            "tokens_trained": self.tokens_trained if self.latest is not None else None,
            "tokens_truncated": dataset.tokens_truncated if dataset is not None else None,
            "epochs": self._epochs(dataset) if dataset is not None else None,
            "eval_loss": finite(self.eval_loss, 4) if self.eval_loss is not None else None,
            "dataset_files": dataset.files if dataset is not None else None,
            "dataset_hash": dataset.content_hash if dataset is not None else None,
        }

    def _epochs(self, dataset: DatasetEvent) -> float | None:
        """The passes over the corpus the run read: its tokens read over what a pass reads (what
        MaxText's trim keeps, where the manifest says what it drops), so one full pass is 1.0. A
        step reads its targets (`tokens_trained`) and the first token of each sequence; a part
        batch at the end of the data (MaxText pads it with empty sequences) reads less, but only
        once every pass is read: never more than the passes the job may make."""
        per_pass = dataset.tokens_per_pass
        if not per_pass or dataset.sequences_per_step is None:
            return None
        read = self.tokens_trained + (self.highest_step + 1) * dataset.sequences_per_step
        return round(min(read / per_pass, dataset.passes), 3)


class JobLog:
    """One pass over one read of a job's log (its tail, or the whole of it), in the log's order.

    The steps go to `steps`, which a job keeps across its reads (its metrics and progress); the
    events and Ray Train's decisions go to `record`, this read's own (the goodput, when the read
    is the whole log, and the failed run's message); the last `tail_lines` lines, Ray's echo of
    the command left out (it may hold settings the stack keeps secret), to `tail`.
    """

    def __init__(
        self,
        steps: StepCollector | None = None,
        tail_lines: int = 0,
        scalars: Callable[[list[Scalar]], None] | None = None,
    ):
        self.steps = steps if steps is not None else StepCollector()
        self.record = RunRecord()
        self.tail: deque[str] = deque(maxlen=tail_lines)
        # Each step's and evaluation's scalars, in the log's order, as they are read (a run's
        # TensorBoard series: domain/training/run_scalars.py), so the whole log is never held.
        self.scalars = scalars

    def add_text(self, text: str) -> None:
        self.add_lines(text.splitlines())

    def add_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.add_line(line)

    def add_line(self, line: str) -> None:
        if line.startswith(ENTRYPOINT_ECHO):
            return
        self.tail.append(line)
        if (step := step_metrics(line)) is not None:
            self.steps.add_step(step)
            if self.scalars is not None:
                self.scalars(step_scalars(step))
        elif (evaluated := eval_loss(line)) is not None:
            self.steps.eval_loss = evaluated[1]
            if self.scalars is not None:
                self.scalars(eval_scalars(*evaluated))
        try:
            event = read_event(line)
        except BadEventLine as error:
            self.record.skip(str(error))
            return
        if isinstance(event, DatasetEvent):
            self.steps.dataset = event
        elif isinstance(event, StepTokensEvent):
            self.steps.saved_step(event)
        elif event is not None:
            self.record.add(event)
        elif (retry := ray_train_retry_line(line)) is not None:
            self.record.ray_train(retry)

    def first_group_start(self) -> float | None:
        """When the first worker group this read saw started: its `attempt` event, or, when the
        read lost that line, its first step. None when it saw no group."""
        if not self.record.attempts:
            return None
        first = self.record.attempts[0]
        return first.started if first.started is not None else first.first_step_at

    def tail_text(self) -> str:
        return "\n".join(self.tail)
