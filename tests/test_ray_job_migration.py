"""State written by earlier versions of the RayJob and its guard (workloads/ray_job/migration.py),
read as the same job: the first releases' submission ids and state, through the provider's
methods, against a real Ray head on 127.0.0.1, and through the dynamic-provider plugin as the
engine drives it. What the first releases wrote is in tests/support/ray_job_harness.py
(FIRST_RELEASE_*)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc
from ray.job_submission import JobStatus, JobSubmissionClient

from tests.support.provider_plugin import (
    GUARD_PROVIDER,
    GUARD_TYPE,
    GUARD_URN,
    TYPE,
    URN,
    from_struct,
    running_plugin,
    to_struct,
    with_provider,
)
from tests.support.ray_job_harness import (
    FAKE_TRAINER,
    FIRST_RELEASE_ID,
    FIRST_RELEASE_INPUTS,
    NOW,
    client,
    first_release_state,
    inputs,
    wait_for,
)
from workloads.ray_job import RayJobGuardProvider, RayJobProvider
from workloads.ray_job import migration as ray_job_migration
from workloads.ray_job import record as ray_job_record
from workloads.ray_job.record import RayJobError, submission_id

slow = pytest.mark.slow


pytestmark = [pytest.mark.usefixtures("fast_polling"), pytest.mark.timed]


def test_the_earlier_id_form_is_the_one_the_first_releases_computed():
    assert ray_job_migration.legacy_submission_id(NOW) == FIRST_RELEASE_ID
    assert submission_id(NOW) != FIRST_RELEASE_ID


def test_a_finished_job_in_first_release_state_is_not_run_again():
    """The first `pulumi up` after the upgrade: no organization or project in the state, and the
    id in its earlier form. The job is the same, so it is not run again: its only change is an
    update that draws its page (the first releases recorded none); once drawn, nothing happens."""
    provider = RayJobProvider()
    same = provider.diff(FIRST_RELEASE_ID, first_release_state(), NOW)
    assert same.changes is True and same.replaces == []
    drawn = provider.diff(FIRST_RELEASE_ID, {**first_release_state(), "page_written": False}, NOW)
    assert drawn.changes is False and drawn.replaces == []
    # State written before digests were kept: the same.
    raw = {**FIRST_RELEASE_INPUTS, "submission_id": FIRST_RELEASE_ID}
    assert provider.diff(FIRST_RELEASE_ID, raw, NOW).replaces == []
    # A real change of the job is still a new run (and then the id takes the new form).
    changed = provider.diff(FIRST_RELEASE_ID, first_release_state(), {**NOW, "entrypoint": "python -m other"})
    assert changed.replaces == ["entrypoint"]
    # State written by this code records the organization and project: moving the stack's job
    # to another project is another job.
    current = {**NOW, "input_digests": ray_job_record.input_digests(NOW)}
    assert provider.diff("id", current, {**NOW, "project": "other"}).replaces == ["project"]


def test_the_checkpoint_bucket_given_since_is_no_new_run():
    """A GKE stack's state from before the RayJob was told its checkpoint bucket (where a GKE run's
    TensorBoard scalars go): the same job, unchanged; a bucket that changes later is an update."""
    provider = RayJobProvider()
    bucket = {"mount": "/data", "url": "gs://acme-ckpt"}
    recorded = {**NOW, "input_digests": ray_job_record.input_digests(NOW), "page_written": True}
    given = provider.diff("id", recorded, {**NOW, "checkpoint_bucket": bucket})
    assert given.changes is False and given.replaces == []
    moved = provider.diff(
        "id", {**recorded, "checkpoint_bucket": bucket}, {**NOW, "checkpoint_bucket": {**bucket, "url": "gs://b"}}
    )
    assert moved.changes is True and moved.replaces == []
    assert "checkpoint_bucket" in ray_job_migration.ADDED_TO_UPDATABLE


def test_a_first_release_guard_is_updated_not_replaced_and_keeps_the_earlier_id():
    """A replaced guard's delete would stop the run it guards (still running under the earlier
    id after an interrupted `pulumi up`); an update keeps it guarded."""
    guard = RayJobGuardProvider()
    olds = {"job_id": FIRST_RELEASE_ID, "address": NOW["address"], "gke": None}
    news = {
        "job_id": submission_id(NOW),
        "previous_job_id": ray_job_migration.legacy_submission_id(NOW),
        "address": NOW["address"],
        "gke": None,
    }
    diff = guard.diff(f"{FIRST_RELEASE_ID}-guard", olds, news)
    assert diff.changes is True and diff.replaces == []
    outs = guard.update(f"{FIRST_RELEASE_ID}-guard", olds, news).outs
    assert outs["job_id"] == submission_id(NOW) and outs["legacy_job_id"] == FIRST_RELEASE_ID
    # The next `pulumi up`: nothing to do, the earlier id kept.
    again = guard.diff(f"{FIRST_RELEASE_ID}-guard", outs, news)
    assert again.changes is False
    assert guard.update("x", outs, {**news, "address": "http://127.0.0.1:1"}).outs["legacy_job_id"] == FIRST_RELEASE_ID
    # Another job (a changed input) is a replacement, as before.
    other = {**news, "job_id": "pulumi-acme-p-dev-0000", "previous_job_id": "pulumi-dev-0000"}
    assert guard.diff("x", outs, other).replaces == ["job_id"]
    # A guard this code creates never holds an earlier id (another project's `dev` may run under it).
    assert guard.create(news).outs["legacy_job_id"] is None


def legacy_run(head, entrypoint: str) -> tuple[dict, str, JobSubmissionClient]:
    """A job the first releases submitted (its id in the earlier form) and the inputs this code
    gives the same job's create, the guard's recorded earlier id included."""
    props = {
        **inputs(head, entrypoint=entrypoint),
        "organization": "acme",
        "project": "maxtext-tpu-workloads",
    }
    legacy_id = ray_job_migration.legacy_submission_id(props)
    ray = client(head)
    ray.submit_job(entrypoint=entrypoint, submission_id=legacy_id)
    return {**props, "legacy_job_id": legacy_id}, legacy_id, ray


def attempts_of(ray: JobSubmissionClient, *base_ids: str) -> list[str]:
    return sorted(
        job.submission_id
        for job in ray.list_jobs()
        if job.submission_id and any(ray_job_record.attempt_number(base, job.submission_id) for base in base_ids)
    )


@slow
def test_create_adopts_a_finished_first_release_run_instead_of_training_again(local_ray_head):
    props, legacy_id, ray = legacy_run(local_ray_head, FAKE_TRAINER)
    wait_for(ray, legacy_id, {JobStatus.SUCCEEDED})
    result = RayJobProvider().create(props)
    assert result.id == legacy_id and result.outs["status"] == "SUCCEEDED" and result.outs["steps_completed"] == 3
    assert attempts_of(ray, legacy_id, submission_id(props)) == [legacy_id], "the job was submitted again"


@slow
def test_create_waits_for_a_first_release_run_still_going_instead_of_starting_a_second(local_ray_head):
    props, legacy_id, ray = legacy_run(local_ray_head, f"sleep 3 && {FAKE_TRAINER}")
    wait_for(ray, legacy_id, {JobStatus.RUNNING})
    result = RayJobProvider().create(props)
    assert result.id == legacy_id and result.outs["status"] == "SUCCEEDED"
    assert attempts_of(ray, legacy_id, submission_id(props)) == [legacy_id], "two runs at once"


@slow
def test_a_failed_first_release_run_is_retried_under_the_new_id_and_the_guard_covers_both(local_ray_head, tmp_path):
    marker = tmp_path / "failed-once"
    props, legacy_id, ray = legacy_run(
        local_ray_head, f"test -f {marker} && exec sleep 300 || (touch {marker}; exit 3)"
    )
    wait_for(ray, legacy_id, {JobStatus.FAILED})
    new_id = submission_id(props)
    errors: list[BaseException] = []

    def create() -> None:
        try:
            RayJobProvider().create(props)
        except RayJobError as error:  # stopped by the guard below
            errors.append(error)

    creating = threading.Thread(target=create)
    creating.start()
    deadline = time.monotonic() + 60
    while new_id not in attempts_of(ray, new_id):  # until create has submitted it
        assert time.monotonic() < deadline, f"{new_id} was never submitted"
        time.sleep(0.2)
    wait_for(ray, new_id, {JobStatus.RUNNING})
    assert attempts_of(ray, legacy_id, new_id) == sorted([legacy_id, new_id])
    guard = {"job_id": new_id, "legacy_job_id": legacy_id, "address": local_ray_head.address}
    RayJobGuardProvider().delete(f"{new_id}-guard", guard)
    assert ray.get_job_status(new_id) == JobStatus.STOPPED
    creating.join(30)
    assert not creating.is_alive() and errors and "STOPPED" in str(errors[0])


@slow
def test_a_new_stack_never_adopts_another_projects_run_of_the_same_stack_name(local_ray_head):
    """The bug itself: project A's `dev` ran this job under the earlier id; project B's `dev`
    (a new stack, so its guard recorded no earlier id) must run its own."""
    props, legacy_id, ray = legacy_run(local_ray_head, FAKE_TRAINER)
    wait_for(ray, legacy_id, {JobStatus.SUCCEEDED})
    result = RayJobProvider().create({**props, "legacy_job_id": None, "project": "project-b"})
    assert result.id == submission_id({**props, "project": "project-b"}) != legacy_id


# ------------------------------------------------------------------ through the plugin
@pytest.fixture(scope="module")
def plugin(tmp_path_factory, local_ray_head) -> Iterator[tuple[provider_pb2_grpc.ResourceProviderStub, Path]]:
    """A plugin started after the local head, so it inherits the head's token location."""
    yield from running_plugin(tmp_path_factory)


@slow
def test_state_of_the_first_releases_keeps_its_job_through_the_plugin(plugin):
    """The first `pulumi up` after the submission id gained the organization and project, as the
    engine sends it: a finished job's state (no organization or project recorded, the id in its
    earlier form) is the same job, and its guard is updated in place, keeping the earlier id."""
    stub, _ = plugin
    now = {**NOW, "address": "http://127.0.0.1:8265"}
    same = stub.Diff(
        provider_pb2.DiffRequest(
            id=FIRST_RELEASE_ID,
            urn=URN,
            name="grpc-job",
            type=TYPE,
            olds=to_struct(with_provider({**first_release_state(), "page_written": True})),
            news=to_struct(with_provider(now)),
        )
    )
    # (Its page drawn: without page_written, the one change is the update that draws it.)
    assert same.changes == provider_pb2.DiffResponse.DIFF_NONE and list(same.replaces) == []

    old_guard = with_provider({"job_id": FIRST_RELEASE_ID, "address": now["address"]}, GUARD_PROVIDER)
    new_guard = with_provider(
        {
            "job_id": submission_id(now),
            "previous_job_id": ray_job_migration.legacy_submission_id(now),
            "address": now["address"],
        },
        GUARD_PROVIDER,
    )
    guard_diff = stub.Diff(
        provider_pb2.DiffRequest(
            id=f"{FIRST_RELEASE_ID}-guard",
            urn=GUARD_URN,
            name="grpc-job-guard",
            type=GUARD_TYPE,
            olds=to_struct(old_guard),
            news=to_struct(new_guard),
        )
    )
    assert guard_diff.changes == provider_pb2.DiffResponse.DIFF_SOME and list(guard_diff.replaces) == []
    updated = stub.Update(
        provider_pb2.UpdateRequest(
            id=f"{FIRST_RELEASE_ID}-guard",
            urn=GUARD_URN,
            name="grpc-job-guard",
            type=GUARD_TYPE,
            olds=to_struct(old_guard),
            news=to_struct(new_guard),
        )
    )
    outputs = from_struct(updated.properties)
    assert outputs["job_id"] == submission_id(now) and outputs["legacy_job_id"] == FIRST_RELEASE_ID
