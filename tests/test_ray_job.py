"""RayJobProvider against a real Ray head on 127.0.0.1: create, adopt, fail, time out, read,
delete, and losing the head mid-wait."""

from __future__ import annotations

import io
import threading
import time

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from workloads import ray_job
from workloads.job_metrics import summarize
from workloads.local_ray import LocalRayHead, free_port
from workloads.ray_job import ProgressReporter, RayJobError, RayJobProvider, submission_id

pytestmark = pytest.mark.slow

STEP = "completed step: {step}, seconds: 0.5, TFLOP/s/device: 2.0, Tokens/s/device: {tokens}, total_weights: 64, loss: {loss}"
FAKE_TRAINER = "python -c \"" + "; ".join(
    f"print('{STEP.format(step=step, tokens=100.0 * (step + 1), loss=3.0 - step)}')" for step in range(3)
) + "\""


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch):
    monkeypatch.setattr(ray_job, "POLL_SECONDS", 0.2)
    monkeypatch.setattr(ray_job, "LOST_CONTACT_SECONDS", 3.0)


def inputs(head, entrypoint: str = FAKE_TRAINER, **overrides) -> dict:
    props = {
        "stack": "test",
        "entrypoint": entrypoint,
        "address": head.address,
        "gke": None,
        "runtime_env": None,
        "metadata": {"test": str(time.monotonic_ns())},  # a new job id per test
        "timeout_seconds": 120,
        "total_steps": 3,
        "checkpoint_dir": "/tmp/nowhere",
    }
    props.update(overrides)
    return props


def client(head) -> JobSubmissionClient:
    return JobSubmissionClient(head.address)


def test_create_waits_and_reports_the_run(local_ray_head):
    props = inputs(local_ray_head)
    result = RayJobProvider().create(props)
    assert result.id == submission_id(props) and result.id.startswith("pulumi-test-")
    outs = result.outs
    assert outs["status"] == "SUCCEEDED"
    assert outs["steps_completed"] == 3 and outs["final_loss"] == 1.0
    assert outs["tokens_per_second_per_device"] == 250.0  # median of steps 1 and 2
    assert outs["start_time"] and outs["end_time"] and outs["duration_seconds"] >= 0
    assert outs["dashboard_url"] == local_ray_head.address
    assert outs["checkpoint_dir"] == "/tmp/nowhere" and outs["entrypoint"] == FAKE_TRAINER


def test_recreate_adopts_the_finished_job_without_resubmitting(local_ray_head):
    props = inputs(local_ray_head)
    first = RayJobProvider().create(props)
    second = RayJobProvider().create(props)
    assert second.id == first.id
    assert second.outs["start_time"] == first.outs["start_time"]
    jobs = [job for job in client(local_ray_head).list_jobs() if job.submission_id == first.id]
    assert len(jobs) == 1


def test_a_running_job_with_the_same_id_is_awaited_not_duplicated(local_ray_head):
    props = inputs(local_ray_head, entrypoint="sleep 2 && " + FAKE_TRAINER)
    job_id = submission_id(props)
    client(local_ray_head).submit_job(entrypoint=props["entrypoint"], submission_id=job_id)
    result = RayJobProvider().create(props)  # an interrupted `pulumi up`, run again
    assert (result.id, result.outs["status"], result.outs["steps_completed"]) == (job_id, "SUCCEEDED", 3)


def test_a_failed_job_with_the_same_id_is_retried_as_a_new_attempt(local_ray_head):
    props = inputs(local_ray_head)
    job_id = submission_id(props)
    ray = client(local_ray_head)
    ray.submit_job(entrypoint="exit 1", submission_id=job_id)
    while not ray.get_job_status(job_id).is_terminal():
        time.sleep(0.2)
    assert ray.get_job_status(job_id) == JobStatus.FAILED
    retried = RayJobProvider().create(props)
    assert (retried.id, retried.outs["status"]) == (f"{job_id}-2", "SUCCEEDED")
    assert ray.get_job_status(job_id) == JobStatus.FAILED  # the failed attempt stays as history
    # Run again (an interrupted `pulumi up`): the successful attempt is adopted.
    assert RayJobProvider().create(props).id == f"{job_id}-2"


def test_a_failing_job_raises_with_status_message_and_log_tail(local_ray_head):
    props = inputs(local_ray_head, entrypoint="python -c \"import sys; print('loss exploded'); sys.exit(3)\"")
    with pytest.raises(RayJobError) as caught:
        RayJobProvider().create(props)
    message = str(caught.value)
    assert "ended FAILED" in message and "loss exploded" in message
    assert message.splitlines()[-1].startswith("status: FAILED; message: Job entrypoint command failed with exit code 3")


def test_timeout_stops_the_job_and_says_so(local_ray_head):
    props = inputs(local_ray_head, entrypoint="sleep 120", timeout_seconds=2)
    started = time.monotonic()
    with pytest.raises(RayJobError, match=r"did not finish within timeout_seconds=2; it was stopped"):
        RayJobProvider().create(props)
    assert time.monotonic() - started < 60
    assert client(local_ray_head).get_job_status(submission_id(props)) == JobStatus.STOPPED


def test_read_reports_the_job_or_that_it_is_gone(local_ray_head):
    props = inputs(local_ray_head)
    created = RayJobProvider().create(props)
    read = RayJobProvider().read(created.id, created.outs)
    assert read.id == created.id and read.outs["status"] == "SUCCEEDED"
    client(local_ray_head).delete_job(created.id)
    assert RayJobProvider().read(created.id, created.outs).id is None


def test_delete_stops_a_running_job_and_removes_its_record(local_ray_head):
    props = inputs(local_ray_head, entrypoint="sleep 120")
    job_id = submission_id(props)
    ray = client(local_ray_head)
    ray.submit_job(entrypoint="sleep 120", submission_id=job_id)
    while ray.get_job_status(job_id) != JobStatus.RUNNING:
        time.sleep(0.2)
    RayJobProvider().delete(job_id, props)
    with pytest.raises(RuntimeError, match="404"):
        ray.get_job_status(job_id)
    RayJobProvider().delete(job_id, props)  # already gone: still fine


def test_delete_succeeds_when_the_cluster_is_gone():
    props = {"address": f"http://127.0.0.1:{free_port()}", "gke": None}
    RayJobProvider().delete("pulumi-test-gone", props)


def test_unreachable_address_fails_fast_naming_it():
    address = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=f"cannot reach the Ray Jobs API at {address}"):
        RayJobProvider().create({"stack": "t", "entrypoint": "true", "address": address, "gke": None})
    assert time.monotonic() - started < 15


def test_losing_the_head_mid_wait_fails_clearly_without_hanging():
    head = LocalRayHead().start()
    errors: list[BaseException] = []

    def create():
        try:
            RayJobProvider().create(inputs(head, entrypoint="sleep 300"))
        except BaseException as error:  # noqa: BLE001 (handed to the test thread)
            errors.append(error)

    waiter = threading.Thread(target=create)
    waiter.start()
    ray = client(head)
    deadline = time.monotonic() + 60
    while not any(job.status == JobStatus.RUNNING for job in ray.list_jobs()):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    head.stop()  # the head this test started, by its pid
    waiter.join(timeout=90)
    assert not waiter.is_alive(), "create() hung after the head died"
    assert errors and isinstance(errors[0], RayJobError)
    assert "lost contact with the Ray Jobs API" in str(errors[0])


# ---------------------------------------------------------------- pure parts, no cluster


def test_diff_replaces_on_job_defining_inputs_only():
    provider = RayJobProvider()
    olds = {"stack": "s", "entrypoint": "a", "address": "http://x", "gke": None, "runtime_env": None,
            "metadata": None, "timeout_seconds": 10, "__provider": "old"}
    assert provider.diff("id", olds, {**olds, "entrypoint": "b"}).replaces == ["entrypoint"]
    unchanged = provider.diff("id", olds, {**olds, "__provider": "new code"})
    assert unchanged.changes is False and unchanged.replaces == []
    update = provider.diff("id", olds, {**olds, "timeout_seconds": 20})
    assert update.changes is True and update.replaces == []


def test_update_keeps_every_output():
    olds = {"status": "SUCCEEDED", "final_loss": 1.5, "timeout_seconds": 10}
    outs = RayJobProvider().update("id", olds, {"timeout_seconds": 20}).outs
    assert outs["status"] == "SUCCEEDED" and outs["final_loss"] == 1.5 and outs["timeout_seconds"] == 20


def test_check_names_bad_inputs():
    failures = RayJobProvider().check({}, {"entrypoint": " ", "address": None, "gke": None, "timeout_seconds": 0}).failures
    assert {failure.property for failure in failures} == {"entrypoint", "address", "timeout_seconds"}


def test_submission_id_is_the_same_for_numbers_the_engine_turned_into_floats():
    gke = {"endpoint": "e", "ca_certificate": "c", "namespace": "n", "service": "s", "port": 8265}
    assert submission_id({"stack": "dev", "gke": gke}) == submission_id({"stack": "dev", "gke": {**gke, "port": 8265.0}})


def test_submission_id_ignores_settings_that_do_not_define_the_job():
    base = {"stack": "dev", "entrypoint": "x", "address": "http://a"}
    assert submission_id(base) == submission_id({**base, "timeout_seconds": 5, "total_steps": 9})
    assert submission_id(base) != submission_id({**base, "stack": "prod"})


def test_progress_lines_show_steps_loss_and_eta():
    stream = io.StringIO()
    progress = ProgressReporter("job-1", total_steps=10, stream=stream, every_seconds=0)
    progress.update(STEP.format(step=0, tokens=1, loss=4.0))
    time.sleep(0.05)
    progress.update("\n".join(STEP.format(step=step, tokens=1, loss=3.5) for step in range(5)))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "RayJob job-1: step 1/10 (10%), loss 4.000"
    assert lines[1].startswith("RayJob job-1: step 5/10 (50%), loss 3.500, ETA 0m0")


def test_summary_of_a_log_without_steps():
    assert summarize("no steps here")["steps_completed"] == 0
