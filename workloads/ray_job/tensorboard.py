"""A run's scalars (domain/training/run_scalars.py) written as TensorBoard event files with
tensorboardX, under the run's TensorBoard directory as a run of their own (JOB_LOG_RUN): MaxText's
own logs (TPU workers only) sit at that directory's top, so `tensorboard --logdir` over it shows
both, told apart. Writing never fails a run that trained: a write error is kept, and the provider
reports it as a warning naming the path and the reason."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorboardX import SummaryWriter

from domain.training.run_scalars import Scalar, start_scalars
from domain.training.start_phases import StartPhases

JOB_LOG_RUN = "job-log"


class ScalarWriter:
    """Writes scalars into `logdir`/JOB_LOG_RUN, creating it at the first one; a write error
    names the directory as `shown_as` (where the files are bound for), or as itself."""

    def __init__(self, logdir: str, shown_as: str | None = None):
        self.directory = Path(logdir) / JOB_LOG_RUN
        self.shown_as = shown_as or str(self.directory)
        self.problem: str | None = None  # the first write error, once writing has stopped
        self.written = 0
        self._writer: SummaryWriter | None = None

    def add(self, scalars: Iterable[Scalar]) -> None:
        if self.problem is not None:
            return
        try:
            for scalar in scalars:
                if self._writer is None:
                    self._writer = SummaryWriter(logdir=str(self.directory))
                self._writer.add_scalar(scalar.tag, scalar.value, scalar.step)
                self.written += 1
        except (OSError, RuntimeError) as error:
            self._failed(error)

    @property
    def wrote(self) -> bool:
        """Whether the run has scalars here: something was written, and nothing failed."""
        return self.written > 0 and self.problem is None

    def finish(self, start_phases: Sequence[Mapping[str, Any]] | None) -> None:
        """Adds each worker group's start (the goodput output `start_phases`), then closes."""
        for group, phases in enumerate(start_phases or []):
            self.add(start_scalars(group, StartPhases(**phases)))
        self.close()

    def close(self) -> None:
        """Flushes and closes the event file; sets `problem` if that fails."""
        if self._writer is None:
            return
        try:
            self._writer.close()
        except (OSError, RuntimeError) as error:
            self._failed(error)

    def _failed(self, error: Exception) -> None:
        if self.problem is None:
            self.problem = f"the run's TensorBoard scalars could not be written to {self.shown_as} ({error})"
