"""State written by earlier versions of the RayJob and its guard, read as the same job.

The first releases named a job `pulumi-<stack>-<digest>` (without the organization and project),
kept its job-defining inputs as values (not digests), and had neither a queue deadline nor a
worker group. A stack they wrote must neither run its finished job again nor start a second run
beside one still going: what they recorded is read here as this code's record of the same job.
(The tests: the first-release cases in tests/test_ray_job.py and tests/test_ray_job_grpc.py.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from domain.stack_identity import digest
from workloads.ray_job_record import JOB_DEFINING, defining, latest_attempt

# Identity inputs that submission ids of this code's first releases did not include (they were
# `pulumi-<stack>-<digest>`): state written then has no record of them.
ADDED_TO_IDENTITY = ("organization", "project")
# Updatable inputs of later releases: state written before them records a job submitted without
# them, and they only act on a submission or a wait, so their absence there is no change.
ADDED_TO_UPDATABLE = ("queue_timeout_seconds", "worker_group")
# The job's submission id under the earlier scheme, when the stack's guard recorded one (see
# guard_legacy_id): the RayJob's create adopts a run still going (or finished) under that id.
LEGACY_JOB_ID = "legacy_job_id"


def legacy_submission_id(inputs: Mapping[str, Any]) -> str:
    """The same job's id as the first releases named it, `pulumi-<stack>-<digest>`, from the
    stack's name alone: kept only to find runs those releases started."""
    earlier = digest({key: defining(inputs, key) for key in JOB_DEFINING if key not in ADDED_TO_IDENTITY})
    return f"pulumi-{inputs.get('stack', 'stack')}-{earlier}"


# ------------------------------------------------------------------ the RayJob's diff


def identity_unrecorded(key: str, olds: Mapping[str, Any]) -> bool:
    """Whether `key` is an identity input the state predates: state written before the id named
    the organization and project records this same job (its id stays the earlier form until the
    job changes)."""
    digests = olds.get("input_digests")
    recorded = key in olds if digests is None else key in digests
    return key in ADDED_TO_IDENTITY and not recorded


def undigested_change(key: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    """For state written before digests were kept (it holds the values): whether `key` changed."""
    return defining(olds, key) != defining(news, key)


def updatable_unrecorded(key: str, olds: Mapping[str, Any]) -> bool:
    """Whether `key` is an updatable input the state predates (no change, see ADDED_TO_UPDATABLE)."""
    return key in ADDED_TO_UPDATABLE and key not in olds


# ------------------------------------------------------------------ the RayJob's create


def legacy_run(jobs: Iterable[Any], props: Mapping[str, Any]) -> tuple[str, str] | None:
    """The newest attempt, and its status, of a run the earlier id scheme started for this stack
    (its guard recorded the id): one still going or finished is this job's, so create adopts it
    instead of running it twice. None without one."""
    legacy_id = props.get(LEGACY_JOB_ID)
    if not legacy_id:
        return None
    latest, status = latest_attempt(jobs, legacy_id)
    return (latest, status) if status is not None else None


# ------------------------------------------------------------------ the guard


def adopts_earlier_id(olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    """Whether a guard the first releases wrote (holding the job's id in the earlier form, which
    the program passes again as `previous_job_id`) now takes the same job's new id."""
    return olds.get("job_id") != news.get("job_id") and olds.get("job_id") == news.get("previous_job_id")


def guard_legacy_id(olds: Mapping[str, Any], news: Mapping[str, Any]) -> str | None:
    """The earlier id a guard keeps as LEGACY_JOB_ID on update: the one it held, if it is taking
    the new id now, else whatever it kept before."""
    return olds.get("job_id") if adopts_earlier_id(olds, news) else olds.get(LEGACY_JOB_ID)
