"""The one reader of a job's log (domain/training/job_log.py): one pass gives the progress, the metrics, the
goodput and the last lines; an ended job's log is read once; the text of MaxText's step line and
of Ray Train's retry decisions is read in one place, held to the versions the project pins."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from domain.ray.ray_version import RAY_VERSION
from domain.training.goodput import RunRecord
from domain.training.job_events import RetryCount, RetrySource, event_line, ray_train_retry_line
from domain.training.job_log import JobLog, StepCollector
from tests.support.fake_ray_head import FakeRayHead, good_events, steps_log, text
from tests.support.ray_job_harness import inputs
from workloads.ray_job import RayJobProvider
from workloads.ray_job.record import RayJobError

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
WORKER = "\x1b[36m(RayTrainWorker pid=101)\x1b[0m "
CONTROLLER = "\x1b[36m(TrainController pid=77)\x1b[0m "


def ray_train_decision_lines(error: Exception, max_failures: int, max_preemptions: int) -> list[str]:
    """What the installed Ray Train's failure policy logs for `error`, one line per line of its
    message, each prefixed as Ray prefixes an actor's output in the driver's log."""
    from ray.train import FailureConfig
    from ray.train.v2._internal.execution.failure_handling.default import DefaultFailurePolicy

    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(DefaultFailurePolicy.__module__)
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        policy = DefaultFailurePolicy(FailureConfig(max_failures=max_failures, max_preemption_failures=max_preemptions))
        policy.make_decision(error)
        policy.make_decision(error)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [CONTROLLER + line for message in messages for line in message.splitlines()]


def test_ray_train_retry_text_is_read_from_the_pinned_ray_as_it_writes_it():
    """Ray's own text is the one thing not read from an event: held to the Ray the project pins
    (domain/ray/ray_version.py, which tests/test_worker_image.py holds requirements-trainer.txt to)."""
    import ray
    from ray.train.v2.api.exceptions import PreemptionError, WorkerGroupError
    from ray.train.v2.api.preemption import PreemptionInfo

    assert ray.__version__ == RAY_VERSION
    preempted = PreemptionError(
        PreemptionInfo(deadline_ms=1000, preempted_node_to_ranks={"n": [0]}), drain_timed_out=True
    )
    lines = ray_train_decision_lines(preempted, max_failures=3, max_preemptions=-1)
    assert [ray_train_retry_line(line) for line in lines if ray_train_retry_line(line)] == [
        RetrySource("preemption"),
        RetryCount(1),
        RetrySource("preemption"),
        RetryCount(2),
    ]
    failed = WorkerGroupError("rank 0 failed", {0: RuntimeError("boom")})
    lines += ray_train_decision_lines(failed, max_failures=3, max_preemptions=-1)
    read = JobLog()
    read.add_lines(lines)
    assert read.record.charged == {"preemption": 2, "worker group": 2}
    summary = read.record.summary(0.0, 10.0)  # no `attempt` event: only the charges are known
    assert summary["restarts"] is None and summary["event_lines_skipped"] == 0


def test_ray_train_retry_line_reads_only_the_controller():
    assert ray_train_retry_line(WORKER + "  Source: preemption") is None
    assert ray_train_retry_line(CONTROLLER + "Error: Training was interrupted") is None
    assert ray_train_retry_line(CONTROLLER + "  Error count: " + "9" * 10 + " (max allowed: inf)") is None


def test_one_pass_gives_progress_metrics_goodput_and_the_last_lines():
    failed = "training failed: worker errors used up maxFailures = 0"
    lines = [
        "Running entrypoint for job raysubmit_1: python -c \"print('completed step: 99, seconds: 1.0')\"",
        *good_events(),
        *steps_log(),
        CONTROLLER + "  Source: worker group",
        CONTROLLER + "  Error count: 1 (max allowed: 3)",
        WORKER + event_line("failed", message=failed),
        "the end",
    ]
    steps = StepCollector()
    read = JobLog(steps, tail_lines=3)
    read.add_lines(lines)
    assert read.steps is steps and steps.latest is not None and steps.latest.step == 2
    assert steps.summary()["steps_completed"] == 3 and steps.summary()["final_loss"] == 1.0
    assert read.first_group_start() == 1000.0
    assert (read.record.failure, read.record.charged) == (failed, {"worker group": 1})
    assert read.record.summary(990.0, 1020.0)["seconds_queued"] == 10.0
    # The last lines, Ray's echo of the command (the first line) never among them.
    assert read.tail_text().splitlines() == lines[-3:]
    whole = JobLog(tail_lines=100)
    whole.add_lines(lines)
    assert not any(line.startswith("Running entrypoint") for line in whole.tail)


def test_a_tail_that_lost_the_first_attempt_starts_the_group_at_its_first_step():
    read = JobLog()
    read.add_lines([event_line("step", time=1010.0, step=4, seconds=0.5)])
    assert read.first_group_start() == 1010.0
    assert JobLog().first_group_start() is None and isinstance(JobLog().record, RunRecord)


def test_an_ended_job_s_log_is_read_once():
    """Metrics, goodput and the failure's words come from one read of the whole log (the events
    are spread over it): a failed job's too, whose page shows what it reached and whose error
    ends with the last lines, kept as the read goes."""
    with FakeRayHead(text(*good_events(), *steps_log())) as head:
        outs = RayJobProvider().create(inputs(head, "python train.py")).outs
    assert (outs["steps_completed"], outs["final_loss"], outs["restarts"]) == (3, 1.0, 0)
    assert [request["lines"] for request in head.log_requests] == ["-1"]

    failed = event_line("failed", message="training failed: worker errors used up maxFailures = 0")
    with FakeRayHead(text(*good_events(), failed), status="FAILED", message="exit code 3") as head:
        with pytest.raises(RayJobError, match="maxFailures = 0"):
            RayJobProvider().create(inputs(head, "python train.py"))
    assert [request["lines"] for request in head.log_requests] == ["-1"]


def test_the_step_line_and_the_event_prefix_are_read_in_one_module():
    """MaxText's step text and the event prefix are spelled in domain/training/job_events.py only (the
    trainer and the provider take them from there), so a change of either is one edit."""
    spelled = {
        path.relative_to(ROOT).as_posix()
        for package in ("domain", "workloads", "trainer", "policies")
        for path in (ROOT / package).rglob("*.py")
        if any(text in path.read_text() for text in ("completed step: ", "maxtext-tpu-event", "(TrainController"))
    }
    assert spelled == {"domain/training/job_events.py"}
