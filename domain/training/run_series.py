"""A run's curves for its page (domain/reports/run_page.py), from the same scalars its
TensorBoard events are written from (run_scalars.py), as the job's reader yields them in the
log's order: train and eval loss, each step's time, where the run restarted and where it diverged.

Where it restarted: a step at or below the one before it (the count set back to the restored
checkpoint, so the steps after it run again). A restart that resumed past every step logged
before it leaves no such mark; the run's `restarts` output counts every one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from domain.training.run_scalars import EVAL_LOSS, LOSS, STEP_SECONDS, Scalar


@dataclass
class RunSeries:
    """(step, value) points of each curve, in the log's order (a step run again appears again)."""

    loss: list[tuple[int, float]] = field(default_factory=list)
    eval_loss: list[tuple[int, float]] = field(default_factory=list)
    step_seconds: list[tuple[int, float]] = field(default_factory=list)
    # The steps at which the count went back (a restart from a checkpoint).
    restarts_at: list[int] = field(default_factory=list)
    # The first step whose loss was not a finite number (its time was logged, its loss left out).
    diverged_at: int | None = None
    _last_step: int | None = None

    def add(self, scalars: Iterable[Scalar]) -> None:
        """One step's or one evaluation's scalars (run_scalars.step_scalars, eval_scalars)."""
        scalars = list(scalars)
        tags = {scalar.tag: scalar for scalar in scalars}
        if EVAL_LOSS in tags:
            self.eval_loss.append((tags[EVAL_LOSS].step, tags[EVAL_LOSS].value))
        timed = tags.get(STEP_SECONDS)
        if timed is None:
            return
        step = timed.step
        if self._last_step is not None and step <= self._last_step:
            self.restarts_at.append(step)
        self._last_step = step
        self.step_seconds.append((step, timed.value))
        if LOSS in tags:
            self.loss.append((step, tags[LOSS].value))
        elif self.diverged_at is None:
            self.diverged_at = step

    def recomputed_seconds(self) -> float:
        """The time of every run of a step that was run again later (after a restart went back
        to an earlier checkpoint): the work the restart threw away."""
        last = {step: index for index, (step, _) in enumerate(self.step_seconds)}
        return sum(seconds for index, (step, seconds) in enumerate(self.step_seconds) if last[step] != index)
