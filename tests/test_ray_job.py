"""RayJobProvider against a real Ray head on 127.0.0.1 (token authentication on): create, adopt,
fail, time out, read, delete, logs that are not UTF-8, bounded log reads, secrets kept out of
outputs, the guard that stops an interrupted job, and losing the head mid-wait; and against a
fake Jobs API on 127.0.0.1 that answers 503, 401 or a 500 with a traceback."""

from __future__ import annotations

import io
import json
import shlex
import threading
import time
from pathlib import Path

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from domain.training.job_events import event_line
from domain.training.job_log import JobLog, StepCollector
from domain.training.run_scalars import LOSS, TOKENS_PER_SECOND_PER_DEVICE
from tests.support.fake_jobs_api import TRACEBACK_500, FakeJobsApi
from tests.support.fake_ray_head import FakeRayHead, good_events, steps_log, text
from tests.support.pages import page_keys, shown_outputs
from tests.support.ray_job_harness import (
    FAKE_TRAINER,
    LATE_STOP_SECONDS,
    NOW,
    STEP,
    ClockedJobsApi,
    client,
    inputs,
    timed_create,
    wait_for,
)
from workloads import jobs_api, ray_job, smoke
from workloads.jobs_api import JobsApi
from workloads.jobs_api.errors import ErrorKind, JobsApiError, classify
from workloads.local_ray import LocalRayHead, free_port
from workloads.ray_job import RayJobGuardProvider, RayJobProvider
from workloads.ray_job import record as ray_job_record
from workloads.ray_job import wait as job_wait
from workloads.ray_job.progress import ProgressReporter
from workloads.ray_job.record import RayJobError, submission_id
from workloads.ray_job.tensorboard import JOB_LOG_RUN

slow = pytest.mark.slow


pytestmark = [pytest.mark.usefixtures("fast_polling"), pytest.mark.timed]


@slow
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
    assert outs["checkpoint_dir"] == props["checkpoint_dir"]
    # A head on this machine: the run's scalars from its log, beside its checkpoints.
    assert outs["tensorboard_dir"] == f"{props['checkpoint_dir']}/tensorboard"
    events = EventAccumulator(f"{outs['tensorboard_dir']}/{JOB_LOG_RUN}")
    events.Reload()
    assert [(event.step, event.value) for event in events.Scalars(LOSS)] == [(0, 3.0), (1, 2.0), (2, 1.0)]
    assert [event.value for event in events.Scalars(TOKENS_PER_SECOND_PER_DEVICE)] == [100.0, 200.0, 300.0]
    # Its page, beside its checkpoints, shows the outputs under their names, and its curves.
    assert outs["report_path"] == f"{props['checkpoint_dir']}/report.html"
    facts, figures = page_keys(Path(outs["report_path"]))
    assert facts["steps_completed"] == "3" and facts["final_loss"] == "1.0" and facts["status"] == "SUCCEEDED"
    assert {"duration_seconds", "goodput_percent", "tokens_trained"} <= facts.keys()
    assert shown_outputs(facts, outs) == {}
    assert figures == ["loss", "step_seconds", "wall_time"]
    # The command, runtime env and metadata may carry secrets: state keeps digests, not copies.
    assert not {"entrypoint", "runtime_env", "metadata"} & set(outs)
    assert set(outs["input_digests"]) == set(ray_job_record.JOB_DEFINING)


@slow
def test_recreate_adopts_the_finished_job_without_resubmitting(local_ray_head):
    props = inputs(local_ray_head)
    first = RayJobProvider().create(props)
    page = Path(first.outs["report_path"])
    page.unlink()
    second = RayJobProvider().create(props)
    assert second.id == first.id
    assert second.outs["start_time"] == first.outs["start_time"]
    jobs = [job for job in client(local_ray_head).list_jobs() if job.submission_id == first.id]
    assert len(jobs) == 1
    # Its page is written again from the finished run's log, with the same numbers.
    assert second.outs["report_path"] == str(page) and page_keys(page)[0]["final_loss"] == "1.0"


@slow
def test_a_run_whose_page_and_scalars_cannot_be_written_succeeds_with_warnings(local_ray_head, tmp_path, capsys):
    """Writing the page or the TensorBoard events never fails a run that trained: each error is
    a warning naming the path and the reason, and the output is null."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = RayJobProvider().create(inputs(local_ray_head, checkpoint_dir=str(blocker / "run")))
    assert result.outs["status"] == "SUCCEEDED" and result.outs["steps_completed"] == 3
    assert (result.outs["report_path"], result.outs["tensorboard_dir"], result.outs["page_written"]) == (
        None,
        None,
        False,
    )
    err = capsys.readouterr().err
    assert f"warning: the run's page could not be written to {blocker / 'run' / 'report.html'} (" in err
    assert f"warning: the run's TensorBoard scalars could not be written to {blocker / 'run' / 'tensorboard'}" in err
    assert "Not a directory" in err


@slow
def test_a_running_job_with_the_same_id_is_awaited_not_duplicated(local_ray_head):
    props = inputs(local_ray_head, entrypoint="sleep 2 && " + FAKE_TRAINER)
    job_id = submission_id(props)
    client(local_ray_head).submit_job(entrypoint=props["entrypoint"], submission_id=job_id)
    result = RayJobProvider().create(props)  # an interrupted `pulumi up`, run again
    assert (result.id, result.outs["status"], result.outs["steps_completed"]) == (job_id, "SUCCEEDED", 3)


@slow
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


@slow
def test_a_failing_job_raises_with_status_message_and_log_tail(local_ray_head):
    props = inputs(local_ray_head, entrypoint="python -c \"import sys; print('loss exploded'); sys.exit(3)\"")
    with pytest.raises(RayJobError) as caught:
        RayJobProvider().create(props)
    message = str(caught.value)
    assert "ended FAILED" in message and "loss exploded" in message
    assert message.splitlines()[-1].startswith(
        "status: FAILED; message: Job entrypoint command failed with exit code 3"
    )
    # Its page says what happened, though it logged no step.
    assert message.splitlines()[1] == f"the run's page: {props['checkpoint_dir']}/report.html"
    facts, figures = page_keys(Path(props["checkpoint_dir"]) / "report.html")
    assert (facts["status"], facts["steps_completed"]) == ("FAILED", "0")
    assert figures == ["wall_time"]  # no step, so no curve: only where its time went
    assert "exit code 3" in (Path(props["checkpoint_dir"]) / "report.html").read_text()


@slow
def test_timeout_stops_the_job_and_says_so(local_ray_head):
    props = inputs(local_ray_head, entrypoint="sleep 120", timeout_seconds=2)
    started = time.monotonic()
    with pytest.raises(
        RayJobError, match=r"did not finish within timeout_seconds=2 of its start \(.*\); it was stopped"
    ):
        RayJobProvider().create(props)
    assert time.monotonic() - started < 60
    assert client(local_ray_head).get_job_status(submission_id(props)) == JobStatus.STOPPED


@slow
def test_read_reports_the_job_or_that_it_is_gone(local_ray_head):
    props = inputs(local_ray_head)
    created = RayJobProvider().create(props)
    read = RayJobProvider().read(created.id, created.outs)
    assert read.id == created.id and read.outs["status"] == "SUCCEEDED"
    delete_until_gone(client(local_ray_head), created.id)
    assert RayJobProvider().read(created.id, created.outs).id is None


def delete_until_gone(ray: JobSubmissionClient, job_id: str, seconds: float = 30) -> None:
    """Deletes Ray's record of an ended job until Ray itself no longer finds it. Seen once on a
    fresh clone: a record deleted right after its job ended was found again by the next read, as
    if written once more after the delete; the read must report what Ray says, so Ray is asked
    first."""
    deadline = time.monotonic() + seconds
    while True:
        assert ray.delete_job(job_id)
        try:
            ray.get_job_info(job_id)
        except RuntimeError:
            return  # Ray answers that it does not exist
        assert time.monotonic() < deadline, f"Ray still has {job_id} after deleting it for {seconds:.0f} s"
        time.sleep(0.5)


@slow
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


def test_delete_succeeds_when_nothing_listens_on_the_local_address_any_more(capsys):
    # A loopback port that refuses connections: the local head, and its jobs, are gone.
    props = {"address": f"http://127.0.0.1:{free_port()}", "gke": None}
    RayJobProvider().delete("pulumi-test-gone", props)
    assert "the local head is gone" in capsys.readouterr().err


def test_unreachable_address_fails_fast_naming_it():
    address = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=f"cannot reach the Ray Jobs API at {address}"):
        RayJobProvider().create({"stack": "t", "entrypoint": "true", "address": address, "gke": None})
    assert time.monotonic() - started < 15


@slow
def test_losing_the_head_mid_wait_fails_clearly_without_hanging(monkeypatch):
    head = LocalRayHead().start()
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(head.token_path))  # this head's own token
    errors: list[BaseException] = []

    def create():
        try:
            RayJobProvider().create(inputs(head, entrypoint="sleep 300"))
        except BaseException as error:
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
    olds = {
        "stack": "s",
        "entrypoint": "a",
        "address": "http://x",
        "gke": None,
        "runtime_env": None,
        "metadata": None,
        "timeout_seconds": 10,
        "__provider": "old",
    }
    assert provider.diff("id", olds, {**olds, "entrypoint": "b"}).replaces == ["entrypoint"]
    unchanged = provider.diff("id", olds, {**olds, "__provider": "new code"})
    assert unchanged.changes is False and unchanged.replaces == []
    update = provider.diff("id", olds, {**olds, "timeout_seconds": 20})
    assert update.changes is True and update.replaces == []


def test_update_keeps_every_output():
    olds = {"status": "SUCCEEDED", "final_loss": 1.5, "timeout_seconds": 10, "report_path": "/runs/r/report.html"}
    olds["page_written"] = True
    outs = RayJobProvider().update("id", olds, {"timeout_seconds": 20}).outs
    assert outs["status"] == "SUCCEEDED" and outs["final_loss"] == 1.5 and outs["timeout_seconds"] == 20
    assert outs["report_path"] == "/runs/r/report.html"


@slow
def test_a_finished_run_recorded_before_pages_gets_one_at_the_next_up_without_running_again(local_ray_head):
    """State written before runs had pages (no page_written): `pulumi up` updates the job, drawing
    its page from its log; it is not run again, and a run recorded since is left alone."""
    props = inputs(local_ray_head)
    created = RayJobProvider().create(props)
    page = Path(created.outs["report_path"])
    page.unlink()
    assert created.outs["page_written"] is True
    olds = {key: value for key, value in created.outs.items() if key not in ("report_path", "page_written")}
    provider = RayJobProvider()
    diff = provider.diff(created.id, olds, props)
    assert diff.changes is True and diff.replaces == []
    assert provider.diff(created.id, created.outs, props).changes is False
    outs = provider.update(created.id, olds, props).outs
    assert outs["report_path"] == str(page) and page_keys(page)[0]["final_loss"] == "1.0"
    assert outs["start_time"] == created.outs["start_time"]
    assert [job.submission_id for job in client(local_ray_head).list_jobs()].count(created.id) == 1


def test_a_finished_runs_page_that_cannot_be_drawn_leaves_the_update_succeeding(capsys):
    """The head that ran it is gone: the update succeeds, with a warning and a null report_path
    (recorded, so the next `pulumi up` does not try again)."""
    olds = {"status": "SUCCEEDED", "final_loss": 1.5, "address": f"http://127.0.0.1:{free_port()}", "gke": None}
    news = {**olds, "timeout_seconds": 20}
    outs = RayJobProvider().update("pulumi-test-gone", olds, news).outs
    assert (outs["report_path"], outs["page_written"], outs["final_loss"]) == (None, False, 1.5)
    assert not RayJobProvider().diff("pulumi-test-gone", outs, news).changes  # not tried again
    assert "warning: the run's page was not drawn: its record could not be read" in capsys.readouterr().err


def test_check_names_bad_inputs():
    failures = (
        RayJobProvider().check({}, {"entrypoint": " ", "address": None, "gke": None, "timeout_seconds": 0}).failures
    )
    assert {failure.property for failure in failures} == {"entrypoint", "address", "timeout_seconds"}


def test_submission_id_is_the_same_for_numbers_the_engine_turned_into_floats():
    gke = {"endpoint": "e", "ca_certificate": "c", "namespace": "n", "service": "s", "port": 8265}
    assert submission_id({"stack": "dev", "gke": gke}) == submission_id(
        {"stack": "dev", "gke": {**gke, "port": 8265.0}}
    )


def test_submission_id_ignores_settings_that_do_not_define_the_job():
    base = {"stack": "dev", "entrypoint": "x", "address": "http://a"}
    assert submission_id(base) == submission_id({**base, "timeout_seconds": 5, "total_steps": 9})
    assert submission_id(base) != submission_id({**base, "stack": "prod"})


def test_progress_lines_show_steps_loss_and_eta():
    stream = io.StringIO()
    progress = ProgressReporter("job-1", total_steps=10, stream=stream, every_seconds=0)
    steps = StepCollector()
    steps.add(STEP.format(step=0, tokens=1, loss=4.0))
    progress.update(steps)
    time.sleep(0.05)
    steps.add("\n".join(STEP.format(step=step, tokens=1, loss=3.5) for step in range(5)))
    progress.update(steps)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "RayJob job-1: step 1/10 (10%), loss 4.000"
    assert lines[1].startswith("RayJob job-1: step 5/10 (50%), loss 3.500, ETA 0m0")


def test_progress_lines_show_each_phase_of_a_start_as_it_ends_and_every_start_at_the_end():
    stream = io.StringIO()
    progress = ProgressReporter("job-1", total_steps=10, stream=stream, every_seconds=60)
    log = JobLog()
    log.add_lines([event_line("attempt", time=104.0, workers=1, process_started=100.0)])
    progress.starting(log.record, job_start_ms=90_000)
    progress.starting(log.record, job_start_ms=90_000)  # nothing new: no line
    log.add_lines(
        [
            event_line("phase", time=120.0, phase="trainer_start", seconds=16.0),
            event_line("phase", time=120.0, phase="restore", seconds=0.0),
            event_line("phase", time=123.5, phase="compile", seconds=3.5, cache="hit"),
        ]
    )
    progress.starting(log.record, job_start_ms=90_000)
    progress.started(log.record.summary(90.0, 130.0)["start_phases"])
    assert stream.getvalue().splitlines() == [
        "RayJob job-1: starting its worker group: queued 10.0 s, worker_start 4.0 s",
        "RayJob job-1: starting its worker group: queued 10.0 s, worker_start 4.0 s, trainer_start 16.0 s, "
        "restore 0.0 s, compile 3.5 s (cache hit)",
        "RayJob job-1: its worker group started: queued 10.0 s, worker_start 4.0 s, trainer_start 16.0 s, "
        "restore 0.0 s, compile 3.5 s (cache hit)",
    ]


def test_summary_of_a_log_without_steps():
    steps = StepCollector()
    steps.add("no steps here")
    assert steps.summary()["steps_completed"] == 0 and steps.summary()["final_loss"] is None


def test_overlapping_tail_reads_count_each_step_once_in_bounded_memory():
    steps = StepCollector(window=3)
    lines = [STEP.format(step=step, tokens=float(step), loss=10.0 - step) for step in range(8)]
    steps.add("\n".join(lines[:5]))
    steps.add("\n".join(lines[3:8]))  # the next read repeats steps 3 and 4
    summary = steps.summary()
    assert (summary["steps_completed"], summary["final_loss"]) == (8, 3.0)
    assert summary["tokens_per_second_per_device"] == 6.0  # median of the last 3 steps: 5, 6, 7
    # An elastic restart sets the step count back: the final loss is the latest line's.
    steps.add(STEP.format(step=6, tokens=6.0, loss=2.5))
    assert steps.summary()["final_loss"] == 2.5 and steps.summary()["steps_completed"] == 8


def test_error_kinds_come_from_the_status_code_not_the_exception_type():
    def ray_sdk_error(status: int, body: str = "") -> RuntimeError:
        return RuntimeError(f"Request failed with status code {status}: {body}.")

    assert classify(ray_sdk_error(404, "Job pulumi-x does not exist"))[0] is ErrorKind.NOT_FOUND
    assert classify(ray_sdk_error(503, "no endpoints available"))[0] is ErrorKind.SERVER_ERROR
    assert classify(ray_sdk_error(500, TRACEBACK_500))[0] is ErrorKind.SERVER_ERROR
    assert classify(ray_sdk_error(401))[0] is ErrorKind.UNAUTHORIZED
    # The API server's own 404 (no such service): the cluster is what is missing, not the job.
    status = '{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}'
    assert classify(ray_sdk_error(404, status))[0] is ErrorKind.UNREACHABLE
    assert classify(ConnectionError("refused"))[0] is ErrorKind.UNREACHABLE


def test_diff_treats_an_unknown_job_input_as_a_possible_replacement():
    from pulumi.runtime import rpc

    olds = {"stack": "s", "entrypoint": "a", "address": "http://x", "gke": None, "runtime_env": None, "metadata": None}
    olds["input_digests"] = ray_job_record.input_digests(olds)
    assert RayJobProvider().diff("id", olds, {**olds, "entrypoint": rpc.UNKNOWN}).replaces == ["entrypoint"]


def test_a_gke_target_that_gains_the_cluster_id_is_the_same_job():
    gke = {"endpoint": "e", "ca_certificate": "c", "namespace": "n", "service": "s", "port": 8265}
    richer = {**gke, "cluster_id": "projects/p/locations/l/clusters/c", "auth_secret": "maxtext-tpu-cluster"}
    assert submission_id({"stack": "dev", "gke": gke}) == submission_id({"stack": "dev", "gke": richer})


# ---------------------------------------------------------------- a Jobs API that misbehaves


@pytest.mark.parametrize("status, body", [(503, "upstream connect error"), (401, "Unauthorized"), (500, TRACEBACK_500)])
def test_refresh_keeps_the_job_when_the_jobs_api_does_not_say_it_is_gone(status, body):
    with FakeJobsApi(status, body) as fake:
        with pytest.raises(RayJobError) as caught:
            RayJobProvider().read("pulumi-test-1", {"address": fake.address, "gke": None, "status": "RUNNING"})
    message = str(caught.value)
    assert "refresh could not read RayJob pulumi-test-1" in message and "stays in the stack" in message
    assert fake.address in message


@pytest.mark.parametrize("status", [503, 401, 500])
def test_destroy_fails_when_the_stop_cannot_be_confirmed(status):
    with FakeJobsApi(status, TRACEBACK_500) as fake:
        with pytest.raises(RayJobError) as caught:
            RayJobProvider().delete("pulumi-test-1", {"address": fake.address, "gke": None})
        with pytest.raises(RayJobError):
            RayJobGuardProvider().delete("pulumi-test-1-guard", {"job_id": "pulumi-test-1", "address": fake.address})
    message = str(caught.value)
    assert "could not confirm that RayJob pulumi-test-1 is stopped" in message
    assert f"a server still answers at {fake.address}" in message
    assert "pulumi state delete" in message and "pulumi destroy` again" in message


def test_the_wait_applies_the_lost_contact_rule_to_a_503():
    with FakeJobsApi(503, "Service Unavailable") as fake, JobsApi(fake.address) as api:
        started = time.monotonic()
        with pytest.raises(RayJobError, match="lost contact with the Ray Jobs API"):
            RayJobProvider()._wait(
                api,
                "pulumi-test-1",
                job_wait.Deadlines(run=600, queue=600),
                ProgressReporter("j", None, io.StringIO()),
                StepCollector(),
                job_wait.RunClock(None),
            )
        assert time.monotonic() - started >= job_wait.LOST_CONTACT_SECONDS
        assert len(fake.requests) > 3  # it kept asking


def test_a_head_whose_job_agent_registers_late_gets_the_job_once_it_has():
    """A head that has just started (a RayCluster's head pod, a local head) answers submissions
    "No available agent" until its job agent registers: that answer is retried, and the job is
    submitted once it is taken."""
    with FakeRayHead(text(*good_events(), *steps_log()), agentless_submissions=2) as head:
        outs = RayJobProvider().create(inputs(head, "python train.py")).outs
    assert outs["status"] == "SUCCEEDED"
    assert head.submissions == 3 and len(head.jobs) == 1


def test_a_head_whose_job_agent_never_registers_fails_the_create_saying_so(monkeypatch):
    monkeypatch.setattr(ray_job, "AGENT_WAIT_SECONDS", 2.0)
    with FakeRayHead(text(*good_events()), agentless_submissions=10**6) as head:
        started = time.monotonic()
        with pytest.raises(JobsApiError) as caught:
            RayJobProvider().create(inputs(head, "python train.py"))
    assert time.monotonic() - started < 30
    assert caught.value.kind is ErrorKind.SERVER_ERROR
    message = str(caught.value)
    assert f"at {head.address}" in message
    assert "the Ray head answers, but its job agent did not register within 2 s" in message
    assert "dashboard_agent.log" in message
    assert head.jobs == {} and head.submissions >= 2


def test_destroy_fails_when_a_local_head_accepts_connections_but_never_answers(monkeypatch):
    """Unreachable without a refusal: no proof the head is gone, and no hang either."""
    import socket

    monkeypatch.setattr(jobs_api, "REQUEST_TIMEOUT_SECONDS", 2)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever reads or answers
        address = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(RayJobError) as caught:
            RayJobProvider().delete("pulumi-test-1", {"address": address, "gke": None})
    assert time.monotonic() - started < 30
    message = str(caught.value)
    assert "could not confirm that RayJob pulumi-test-1 is stopped" in message and "unreachable" in message
    assert f"{address} did not answer" in message


def test_a_401_is_an_authentication_problem_not_a_missing_job():
    with FakeJobsApi(401, "Unauthorized: Missing authentication token") as fake, JobsApi(fake.address) as api:
        with pytest.raises(JobsApiError) as caught:
            api.call("asking", lambda c: c.get_job_info("x"))
    assert caught.value.kind is ErrorKind.UNAUTHORIZED


# ---------------------------------------------------------------- logs, deadlines, secrets, the guard

NOT_UTF8 = (
    "python -c \"import sys; sys.stdout.buffer.write(b'before \\xff\\xfe after\\n'); sys.stdout.flush(); {rest}\""
)


@slow
def test_a_job_printing_bytes_that_are_not_utf8_is_recorded_succeeded(local_ray_head):
    entrypoint = NOT_UTF8.format(
        rest="; ".join(f"print('{STEP.format(step=step, tokens=100.0, loss=3.0 - step)}')" for step in range(3))
    )
    result = RayJobProvider().create(inputs(local_ray_head, entrypoint=entrypoint))
    assert result.outs["status"] == "SUCCEEDED"
    assert (result.outs["steps_completed"], result.outs["final_loss"]) == (3, 1.0)


@slow
def test_a_failing_job_printing_bytes_that_are_not_utf8_keeps_its_status_and_reason(local_ray_head):
    entrypoint = NOT_UTF8.format(rest="print('loss exploded'); sys.exit(3)")
    with pytest.raises(RayJobError) as caught:
        RayJobProvider().create(inputs(local_ray_head, entrypoint=entrypoint))
    message = str(caught.value)
    assert "loss exploded" in message and "before \ufffd\ufffd after" in message
    assert message.splitlines()[-1].startswith(
        "status: FAILED; message: Job entrypoint command failed with exit code 3"
    )


@slow
def test_log_reads_are_bounded_whatever_the_log_size(local_ray_head):
    ray = client(local_ray_head)
    job_id = ray.submit_job(entrypoint="python -c \"[print('x' * 99) for _ in range(20000)]\"")
    wait_for(ray, job_id, {JobStatus.SUCCEEDED})
    node = ray.get_job_info(job_id).driver_node_id
    with JobsApi(local_ray_head.address) as api:
        tail = api.log_tail(job_id, node)
        # The 20,000-line log is 2 MB; one read is its last jobs_api.LOG_TAIL_LINES (500) lines.
        assert tail.count(b"\n") <= jobs_api.LOG_TAIL_LINES and len(tail) < 200_000
        assert tail.splitlines()[-1] == b"x" * 99
        capped = api.log_tail(job_id, node, lines=20000, max_bytes=10_000)
        whole = list(api.log_lines(job_id, node))  # streamed, for the goodput read at the end
    assert len(capped) <= 10_000 and capped.endswith(b"\n" + b"x" * 99 + b"\n")  # whole lines, the newest
    assert whole.count("x" * 99) == 20000 and whole[-1] == "x" * 99


@slow
def test_goodput_is_read_from_the_whole_log_stray_bytes_and_all(local_ray_head):
    """Events spread over a log, a damaged line and bytes that are not UTF-8 among them."""
    events = [
        event_line("attempt", time=1000.0, workers=1),
        *(event_line("step", time=1010.0 + step, step=step, seconds=0.05) for step in range(4)),
        event_line("attempt", time=1020.0, workers=1),
        *(event_line("step", time=1030.0 + step, step=step, seconds=0.05) for step in range(2, 6)),
    ]
    script = "; ".join(
        [
            "import sys",
            *(f"print({line!r})" for line in events[:5]),
            "sys.stdout.buffer.write(b'maxtext-tpu-event {\\xff\\xfe\\n')",
            "[print('x' * 99) for _ in range(3000)]",  # far from the end: only a whole read finds them
            *(f"print({line!r})" for line in events[5:]),
            "[print('y' * 99) for _ in range(3000)]",
        ]
    )
    outs = RayJobProvider().create(inputs(local_ray_head, entrypoint=f"python -c {shlex.quote(script)}")).outs
    assert outs["status"] == "SUCCEEDED"
    assert (outs["restarts"], outs["steps_recomputed"], outs["seconds_lost_to_restarts"]) == (1, 2, 1032.0 - 1013.0)
    assert (outs["preemptions"], outs["failures"]) == (0, 0)  # no Ray Train retry in this log
    # The step time of the six distinct steps over the job's own wall time.
    assert outs["goodput_percent"] == pytest.approx(100 * 6 * 0.05 / outs["duration_seconds"], rel=0.1, abs=0.1)


def test_the_tokens_trained_are_counted_from_the_whole_log_not_the_tails_seen_while_it_ran(local_ray_head, monkeypatch):
    """Steps far from the end when the job was watched are missed by every tail read then; the
    ended job's whole log still counts each step's own tokens."""
    monkeypatch.setattr(job_wait, "PROGRESS_EVERY_SECONDS", 0.5)

    def step(number: int) -> str:
        return STEP.format(step=number, tokens=1.0, loss=1.0).replace(
            "total_weights: 64", f"total_weights: {number + 1}"
        )

    script = "; ".join(
        [
            "import time",
            *(f"print({step(number)!r})" for number in range(4)),
            "[print('x' * 99) for _ in range(3000)]",
            f"print({step(4)!r}, flush=True)",
            "time.sleep(3)",  # several polls see step 4, and no earlier step, in the tail
            f"print({step(5)!r})",
        ]
    )
    outs = RayJobProvider().create(inputs(local_ray_head, entrypoint=f"python -c {shlex.quote(script)}")).outs
    assert (outs["status"], outs["steps_completed"]) == ("SUCCEEDED", 6)
    assert outs["tokens_trained"] == sum(range(1, 7))


@slow
def test_an_adopted_job_gets_only_the_time_left_of_its_deadline(local_ray_head):
    props = inputs(local_ray_head, entrypoint="sleep 120", timeout_seconds=3)
    job_id = submission_id(props)
    ray = client(local_ray_head)
    ray.submit_job(entrypoint="sleep 120", submission_id=job_id)
    wait_for(ray, job_id, {JobStatus.RUNNING})
    time.sleep(4)  # the interrupted `pulumi up` already used the whole deadline
    started = time.monotonic()
    with pytest.raises(RayJobError, match="did not finish within timeout_seconds=3 of its start"):
        RayJobProvider().create(props)
    assert time.monotonic() - started < 20
    assert ray.get_job_status(job_id) == JobStatus.STOPPED


@slow
def test_a_secret_env_var_never_reaches_the_outputs_or_the_progress_lines(local_ray_head, capsys):
    secret = "wandb-key-" + str(time.monotonic_ns())
    props = inputs(local_ray_head, runtime_env={"env_vars": {"WANDB_API_KEY": secret}}, metadata={"note": secret})
    result = RayJobProvider().create(props)
    assert result.outs["status"] == "SUCCEEDED"
    assert secret not in repr(result.outs)
    assert secret not in capsys.readouterr().err


@slow
def test_the_guard_stops_every_running_attempt_of_its_job(local_ray_head):
    base_id = f"pulumi-test-guard{time.monotonic_ns()}"
    ray = client(local_ray_head)
    ray.submit_job(entrypoint="exit 1", submission_id=base_id)
    ray.submit_job(entrypoint="sleep 300", submission_id=f"{base_id}-2")
    ray.submit_job(entrypoint="sleep 300", submission_id=f"{base_id}0")  # another job: left alone
    wait_for(ray, f"{base_id}-2", {JobStatus.RUNNING})
    wait_for(ray, base_id, {JobStatus.FAILED})
    RayJobGuardProvider().delete(f"{base_id}-guard", {"job_id": base_id, "address": local_ray_head.address})
    assert ray.get_job_status(f"{base_id}-2") == JobStatus.STOPPED
    assert ray.get_job_status(base_id) == JobStatus.FAILED
    assert ray.get_job_status(f"{base_id}0") in (JobStatus.PENDING, JobStatus.RUNNING)
    ray.stop_job(f"{base_id}0")


# ------------------------------------------------------------------ one job per stack (issue 19)
# The ids and state of the first releases: tests/test_ray_job_migration.py.
def test_two_projects_or_organizations_dev_stacks_get_two_jobs():
    ids = {
        submission_id(NOW),
        submission_id({**NOW, "project": "other-workloads"}),
        submission_id({**NOW, "organization": "other-org"}),
    }
    assert len(ids) == 3
    assert submission_id(NOW).startswith("pulumi-acme-maxtext-tpu-workloads-dev-")


def test_the_id_stays_readable_and_short_whatever_the_names():
    long = {**NOW, "organization": "o" * 40, "project": "p" * 100, "stack": "s" * 100}
    job_id = submission_id(long)
    assert len(job_id) <= len("pulumi-") + ray_job_record.ID_NAME_MAX + 1 + 16
    assert job_id != submission_id({**long, "stack": "s" * 99 + "t"})  # the digest has the full names
    odd = submission_id({**NOW, "stack": "a/b c"})
    assert odd.startswith("pulumi-acme-maxtext-tpu-workloads-a-b-c-")


# ------------------------------------------------------------------ one clock (issue 19)
# ClockedJobsApi and timed_create: tests/support/ray_job_harness.py.
@pytest.mark.parametrize("offset", [600, -600], ids=["cluster-10-min-ahead", "cluster-10-min-behind"])
@pytest.mark.parametrize("already_run", [0, 100], ids=["fresh", "adopted"])
def test_the_timeout_does_not_depend_on_the_skew_between_the_two_clocks(offset, already_run):
    timeout = 3
    with ClockedJobsApi(offset) as api:
        props = {**inputs(api), "timeout_seconds": already_run + timeout}
        # A job already running under this id (as `pulumi up` submits it, or an interrupted
        # one left it `already_run` seconds ago on the cluster's clock): create adopts it.
        api.add_job(submission_id(props), started_seconds_ago=already_run)
        error, seconds = timed_create(props, within=timeout + 15)
        assert isinstance(error, RayJobError) and "did not finish within timeout_seconds" in str(error)
        # The Date header has whole seconds: the job is stopped up to a second (and a poll) late.
        assert timeout - 0.5 <= seconds <= timeout + LATE_STOP_SECONDS, f"stopped after {seconds:.1f} s"
        assert api.jobs[submission_id(props)]["status"] == "STOPPED"


def test_without_a_date_header_a_job_counts_from_when_it_was_first_seen():
    clock = job_wait.RunClock(None)
    far_past = int((time.time() - 10_000) * 1000)
    assert clock.elapsed(far_past) < 1
    time.sleep(0.3)
    assert 0.3 <= clock.elapsed(far_past) < 1.3


# ------------------------------------------------------------------ strict JSON (issue 19)
def reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


@slow
def test_a_diverged_run_gives_a_strict_json_line_that_says_so(local_ray_head, capsys):
    diverging = (
        'python -c "'
        + "; ".join(
            f"print('{STEP.format(step=step, tokens=100.0, loss=loss)}')" for step, loss in enumerate(["2.0", "nan"])
        )
        + '"'
    )
    outs = RayJobProvider().create(inputs(local_ray_head, entrypoint=diverging)).outs
    assert outs["status"] == "SUCCEEDED"
    line = smoke.result_line(outs)
    parsed = json.loads(line, parse_constant=reject_constant)  # what JSON.parse accepts
    assert parsed["final_loss"] is None and parsed["diverged"] is True
    assert "DIVERGED" in capsys.readouterr().err


def test_a_value_json_cannot_hold_fails_loudly_rather_than_printing_nan():
    with pytest.raises(ValueError):
        smoke.result_line({"final_loss": float("nan")})
    assert json.loads(smoke.result_line({"final_loss": None}), parse_constant=reject_constant)["final_loss"] is None


def test_progress_says_the_run_diverged():
    steps = StepCollector()
    steps.add(STEP.format(step=0, tokens=1.0, loss="nan"))
    stream = io.StringIO()
    ProgressReporter("job", 10, stream=stream, every_seconds=0).update(steps)
    assert "DIVERGED" in stream.getvalue()
