"""How the trainer prints its events (their lines are declared in domain/training/job_events.py),
on the driver and on the workers, and what a worker measures around MaxText for its `step` events:
the seconds MaxText's data loader spent fetching since the previous step, and the real tokens of
the batch it fetched last. The train loop (trainer/train_loop.py) installs these on the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from domain.training.job_events import event_line, maxtext_step
from trainer.start_clock import StartClock


def print_event(event: str, **fields: Any) -> None:
    """Prints one line of the job's log: `event` with its fields, stamped with the time now."""
    print(event_line(event, **{"time": round(time.time(), 3), **fields}), flush=True)


class _DataWait:
    """The seconds MaxText's data loader spends fetching batches, for the step events to carry.
    MaxText (0.2.5) measures this only for Google's goodput library, through Cloud Logging, so
    the trainer times the loader's public fetch, DataLoader.load_next_batch_pre_sharding, itself:
    tests/test_trainer_data_wait.py fails if MaxText renames it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds = 0.0
        # The real (not padding) target tokens of the last batch this process fetched: the
        # batch of the step MaxText runs (it fetches one batch per step, at the step's start).
        self.batch_tokens: int | None = None

    def add(self, seconds: float) -> None:
        with self._lock:
            self._seconds += seconds

    def take(self) -> float:
        with self._lock:
            seconds, self._seconds = self._seconds, 0.0
        return seconds

    def time(self, loader_class: Any) -> None:
        """Wraps `loader_class`'s fetch (once) so each call adds its duration here."""
        fetch = loader_class.load_next_batch_pre_sharding
        if getattr(fetch, "_timed_by", None) is self:
            return
        wait = self

        def timed(loader: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                batch = fetch(loader, *args, **kwargs)
            finally:
                wait.add(time.monotonic() - started)
            wait.batch_tokens = real_tokens(batch)
            return batch

        timed._timed_by = self  # type: ignore[attr-defined]
        loader_class.load_next_batch_pre_sharding = timed


DATA_WAIT = _DataWait()


def real_tokens(batch: Any) -> int | None:
    """This process's share of a batch's real target tokens, as MaxText counts them for a step
    (its total_weights: the target positions whose segment is not 0, padding). None for a batch
    without segments, and for one that is a global array across processes (MaxText's synthetic
    data on several processes), whose share is not this process's to count. Never raises: it
    runs inside MaxText's fetch of the batch."""
    import numpy as np

    segments = batch.get("targets_segmentation") if isinstance(batch, dict) else None
    if segments is None or getattr(segments, "is_fully_addressable", True) is False:
        return None
    try:
        return int(np.count_nonzero(np.asarray(segments)))
    except Exception:  # a count is not worth a failed step
        return None


class _StepEvents(logging.Handler):
    """A `step` event for each step MaxText logs, at the time it logged it, with the time spent
    waiting for data since the previous one; the group's first ends its start's clock."""

    def __init__(self, clock: StartClock | None) -> None:
        super().__init__(level=logging.INFO)
        self.clock = clock

    def emit(self, record: logging.LogRecord) -> None:
        step = maxtext_step(record.getMessage())
        if step is not None:
            data_seconds = round(DATA_WAIT.take(), 3)
            print(
                event_line(
                    "step", time=round(record.created, 3), step=step[0], seconds=step[1], data_seconds=data_seconds
                ),
                flush=True,
            )
            if self.clock is not None:
                self.clock.step_logged(record.created)


def log_steps(clock: StartClock | None) -> None:
    # MaxText logs through absl, whose records go to the standard `absl` logger; one handler, of
    # this group's clock.
    absl = logging.getLogger("absl")
    for handler in [handler for handler in absl.handlers if isinstance(handler, _StepEvents)]:
        absl.removeHandler(handler)
    absl.addHandler(_StepEvents(clock))
