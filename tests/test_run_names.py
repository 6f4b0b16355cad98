"""One run per stack (issue 19): the default MaxText run name, and so the checkpoint directory, is
the stack's own, not that of a same-named stack of another project or organization. Such stacks
share one checkpoint root when they train on one infra stack (its bucket, mounted at /data) or in
one checkout (its `.runs`): with one run name, the second would restore the first's checkpoint
and both would write to it at once.

Each stack runs the real workloads program under mocks, in its own project (its config keys under
that project's name) and organization (the SDK's mocks give none unless told, so the test names
it as a real engine would)."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from domain.ray.resource_types import RAY_JOB, RAY_JOB_GUARD
from tests.support.pulumi_harness import PROJECT_ROOT, RecordingMonitor, run_program, stack_config
from tests.support.workloads_program import INFRA_OUTPUTS, INFRA_STACK, PROJECT, WORKLOADS_DIR, job_of
from workloads.config import read_settings
from workloads.program import build
from workloads.ray_job import RayJobGuardProvider, RayJobProvider
from workloads.ray_job.record import input_digests

GUARD = RAY_JOB_GUARD
# The dev stack's job as the first releases named it (recorded in tests/test_workloads_refusals.py
# before issue 19, when the run name was `<preset>-<stack>`): an existing stack's job.
FIRST_RELEASE_DEV_ID = "pulumi-dev-93dd80df0507937c"
FIRST_RELEASE_KEYS = ("stack", "entrypoint", "runtime_env", "metadata", "address", "gke")


def run_stack(monkeypatch, *, project: str, organization: str | None, stack: str = "dev", **settings: Any):
    """The shipped `stack` file's settings (plus `settings`), run as stack organization/project/stack."""
    monkeypatch.setattr(pulumi, "get_organization", lambda: organization)
    config = {
        key.replace(f"{PROJECT}:", f"{project}:", 1): value for key, value in stack_config(stack, WORKLOADS_DIR).items()
    }
    config.update({f"{project}:{key}": value for key, value in settings.items()})
    monitor = RecordingMonitor(stack_outputs={INFRA_STACK: INFRA_OUTPUTS})
    run = run_program(
        lambda: build(read_settings()), config, project=project, stack=stack, monitor=monitor, project_dir=WORKLOADS_DIR
    )
    return run, run.one(RAY_JOB).inputs


def seen_preset(stack: str) -> str:
    return "llama3-8b" if stack == "dev" else "tiny-cpu"


STACKS = [
    ("acme", PROJECT),
    ("acme", "other-workloads"),  # another project of the same organization
    ("other-org", PROJECT),  # the same project name in another organization
]


@pytest.mark.parametrize("stack", ["dev", "local"])
def test_same_named_stacks_of_other_projects_or_organizations_get_their_own_run_and_checkpoints(monkeypatch, stack):
    seen = []
    for organization, project in STACKS:
        run, inputs = run_stack(monkeypatch, project=project, organization=organization, stack=stack)
        job = job_of(inputs["entrypoint"])
        assert run.outputs["runName"] == job.run_name == inputs["metadata"]["run_name"]
        assert inputs["checkpoint_dir"] == run.outputs["checkpointDir"] == job.run_directory
        seen.append((job.checkpoint_root, job.run_name, inputs["checkpoint_dir"]))
    # One checkpoint root (the infra stack's bucket, or this checkout's .runs) ...
    assert {root for root, _, _ in seen} == {"/data" if stack == "dev" else str(PROJECT_ROOT / ".runs")}
    # ... and a run name and checkpoint directory each, still named after the preset and stack.
    assert len({name for _, name, _ in seen}) == len({directory for _, _, directory in seen}) == len(STACKS)
    assert all(name.startswith(f"{seen_preset(stack)}-{stack}-") for _, name, _ in seen)
    # The same stack again: the same run, so a re-run resumes its checkpoints.
    again = run_stack(monkeypatch, project=STACKS[0][1], organization=STACKS[0][0], stack=stack)[1]
    assert again["checkpoint_dir"] == seen[0][2]


def test_an_explicit_run_name_is_used_as_it_is(monkeypatch):
    for organization, project in STACKS:
        run, inputs = run_stack(monkeypatch, project=project, organization=organization, runName="shared-run")
        assert run.outputs["runName"] == job_of(inputs["entrypoint"]).run_name == "shared-run"
        assert inputs["checkpoint_dir"] == "/data/shared-run"


def first_release_state(inputs: dict[str, Any]) -> dict[str, Any]:
    """The RayJob's state as the first releases wrote it for a finished job of `inputs`: no
    organization or project, the id in its earlier form, a digest per job-defining input."""
    return {
        **{key: inputs.get(key) for key in ("stack", "address", "gke", "timeout_seconds", "total_steps")},
        "checkpoint_dir": inputs["checkpoint_dir"],
        "input_digests": {key: value for key, value in input_digests(inputs).items() if key in FIRST_RELEASE_KEYS},
        "submission_id": FIRST_RELEASE_DEV_ID,
        "status": "SUCCEEDED",
    }


def test_an_existing_stack_that_pins_the_old_run_name_keeps_its_job_and_checkpoints(monkeypatch):
    """What the README tells existing stacks to do before upgrading: `pulumi config set runName
    <preset>-<stack>`. The job is then the first releases' job: nothing is replaced or re-run."""
    run, inputs = run_stack(monkeypatch, project=PROJECT, organization="organization", runName="llama3-8b-dev")
    assert inputs["checkpoint_dir"] == "/data/llama3-8b-dev"
    guard = run.one(GUARD).inputs
    assert guard["previous_job_id"] == FIRST_RELEASE_DEV_ID  # the same entrypoint, metadata, target and stack
    old_guard = {"job_id": FIRST_RELEASE_DEV_ID, "gke": guard["gke"]}
    assert RayJobGuardProvider().diff(f"{FIRST_RELEASE_DEV_ID}-guard", old_guard, guard).replaces == []
    diff = RayJobProvider().diff(FIRST_RELEASE_DEV_ID, first_release_state(inputs), inputs)
    assert diff.replaces == []
    # Its one change is the update that draws its page (the first releases recorded none).
    assert diff.changes is True
    drawn = {**first_release_state(inputs), "page_written": True}
    assert RayJobProvider().diff(FIRST_RELEASE_DEV_ID, drawn, inputs).changes is False


def test_an_existing_stack_that_takes_the_new_default_sees_its_job_replaced_in_the_preview(monkeypatch):
    """Not pinned, the run name changes: a new run from step 0 in a new directory. The preview
    says so (a replacement of the job and its guard), it does not happen silently."""
    pinned = run_stack(monkeypatch, project=PROJECT, organization="organization", runName="llama3-8b-dev")[1]
    run, inputs = run_stack(monkeypatch, project=PROJECT, organization="organization")
    assert inputs["checkpoint_dir"] != "/data/llama3-8b-dev"
    guard = run.one(GUARD).inputs
    old_guard = {"job_id": FIRST_RELEASE_DEV_ID, "gke": guard["gke"]}
    assert RayJobGuardProvider().diff(f"{FIRST_RELEASE_DEV_ID}-guard", old_guard, guard).replaces == ["job_id"]
    diff = RayJobProvider().diff(FIRST_RELEASE_DEV_ID, first_release_state(pinned), inputs)
    assert diff.changes is True and {"entrypoint", "metadata"} <= set(diff.replaces)
