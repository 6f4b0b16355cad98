"""The scalars a run's TensorBoard shows, from its log's records (domain/training/run_scalars.py)."""

from __future__ import annotations

import math

from domain.training.job_events import StepMetrics
from domain.training.run_scalars import (
    EVAL_LOSS,
    LOSS,
    STEP_SECONDS,
    TFLOPS_PER_DEVICE,
    TOKENS_PER_SECOND_PER_DEVICE,
    Scalar,
    eval_scalars,
    start_scalars,
    start_tag,
    step_scalars,
)
from domain.training.start_phases import StartPhases


def test_a_step_gives_its_loss_time_and_throughput_at_its_step():
    step = StepMetrics(step=7, seconds=0.25, tflops_per_device=1.5, tokens_per_second_per_device=812.0, loss=5.5)
    assert step_scalars(step) == [
        Scalar(LOSS, 7, 5.5),
        Scalar(STEP_SECONDS, 7, 0.25),
        Scalar(TOKENS_PER_SECOND_PER_DEVICE, 7, 812.0),
        Scalar(TFLOPS_PER_DEVICE, 7, 1.5),
    ]


def test_a_diverged_step_keeps_what_is_finite():
    step = StepMetrics(
        step=9, seconds=0.3, tflops_per_device=math.inf, tokens_per_second_per_device=800.0, loss=math.nan
    )
    assert [scalar.tag for scalar in step_scalars(step)] == [STEP_SECONDS, TOKENS_PER_SECOND_PER_DEVICE]
    assert eval_scalars(9, math.inf) == []
    assert eval_scalars(10, 4.25) == [Scalar(EVAL_LOSS, 10, 4.25)]


def test_a_groups_start_gives_each_phase_it_reached_at_the_groups_index():
    phases = StartPhases(queued=6.5, worker_start=2.0, trainer_start=None, compile=3.5, compile_cache="miss")
    assert start_scalars(1, phases) == [
        Scalar(start_tag("queued"), 1, 6.5),
        Scalar(start_tag("worker_start"), 1, 2.0),
        Scalar(start_tag("compile"), 1, 3.5),
    ]
    assert start_tag("compile") == "start/compile_seconds"
