"""A run's scalars for TensorBoard, from what its log says: each step's loss, time and
throughput, each evaluation's loss, and each worker group's start, phase by phase. Pure: the
RayJob provider writes them as event files beside the run's checkpoints
(workloads/ray_job/tensorboard.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from domain.training.job_events import StepMetrics
from domain.training.run_estimate import RunEstimate
from domain.training.start_phases import PHASES, StartPhases

# The tags, one series each. A step run again after a restart is written again at its step.
LOSS = "train/loss"
STEP_SECONDS = "train/step_seconds"
TOKENS_PER_SECOND_PER_DEVICE = "train/tokens_per_second_per_device"
TFLOPS_PER_DEVICE = "train/tflops_per_device"
EVAL_LOSS = "eval/loss"
# Each worker group's start (its index in the run: 0, then one per restart), one series per phase.
START_PREFIX = "start/"


def start_tag(phase: str) -> str:
    return f"{START_PREFIX}{phase}_seconds"


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    value: float


def step_scalars(step: StepMetrics) -> list[Scalar]:
    """A step's series, what is finite of them: a diverged step's loss (nan, inf) is left out, so
    the curve ends where the run diverged."""
    values = (
        (LOSS, step.loss),
        (STEP_SECONDS, step.seconds),
        (TOKENS_PER_SECOND_PER_DEVICE, step.tokens_per_second_per_device),
        (TFLOPS_PER_DEVICE, step.tflops_per_device),
    )
    return [Scalar(tag, step.step, value) for tag, value in values if math.isfinite(value)]


def eval_scalars(step: int, loss: float) -> list[Scalar]:
    return [Scalar(EVAL_LOSS, step, loss)] if math.isfinite(loss) else []


def start_scalars(group: int, phases: StartPhases) -> list[Scalar]:
    """A worker group's start: each phase it reached, at the group's index in the run."""
    return [
        Scalar(start_tag(phase), group, seconds) for phase in PHASES if (seconds := phases.seconds(phase)) is not None
    ]


# What the stack predicted, beside the measurement (a TPU job's estimate: RunEstimate).
PREDICTED_STEP_SECONDS = "train/predicted_step_seconds"
MFU = "train/mfu"


def estimate_scalars(scalars: Sequence[Scalar], estimate: RunEstimate) -> list[Scalar]:
    """For a step's scalars: the predicted step time at the same step, and the measured MFU (its
    TFLOP/s per device over the chip's peak), where the estimate has them."""
    added = []
    for scalar in scalars:
        if scalar.tag == STEP_SECONDS and estimate.step_seconds is not None:
            added.append(Scalar(PREDICTED_STEP_SECONDS, scalar.step, estimate.step_seconds))
        if scalar.tag == TFLOPS_PER_DEVICE and (mfu := estimate.measured_mfu(scalar.value)) is not None:
            added.append(Scalar(MFU, scalar.step, mfu))
    return added
