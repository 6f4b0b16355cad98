"""State written by earlier versions of the RayJob and its guard, read as the same job.

The first releases named a job `pulumi-<stack>-<digest>` (without the organization and project),
kept its job-defining inputs as values (not digests), and had neither a queue deadline nor a
worker group. A stack they wrote must neither run its finished job again nor start a second run
beside one still going: what they recorded is read here as this code's record of the same job.
(The tests: tests/test_ray_job_migration.py.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from domain.stack_identity import digest
from workloads.ray_job.record import JOB_DEFINING, GuardRecord, JobRequest, latest_attempt

# Identity inputs that submission ids of this code's first releases did not include (they were
# `pulumi-<stack>-<digest>`): state written then has no record of them.
ADDED_TO_IDENTITY = ("organization", "project")
# Updatable inputs of later releases: state written before them records a job submitted without
# them, and they only act on a submission, a wait or what is written after the run, so their
# absence there is no change.
ADDED_TO_UPDATABLE = ("queue_timeout_seconds", "worker_group", "estimate", "checkpoint_bucket")
# The job's submission id under the earlier scheme, when the stack's guard recorded one (see
# guard_legacy_id): the RayJob's create adopts a run still going (or finished) under that id
# (JobRequest.legacy_job_id).
LEGACY_JOB_ID = "legacy_job_id"


def legacy_submission_id(props: Mapping[str, Any]) -> str:
    """The id the first releases gave the job the engine's props describe, `pulumi-<stack>-<digest>`,
    from the stack's name alone: kept only to find runs those releases started."""
    job = JobRequest.from_props(props)
    earlier = digest({key: job.defining(key) for key in JOB_DEFINING if key not in ADDED_TO_IDENTITY})
    return f"pulumi-{job.stack if 'stack' in job.recorded else 'stack'}-{earlier}"


# ------------------------------------------------------------------ the RayJob's diff


def identity_unrecorded(key: str, olds: JobRequest) -> bool:
    """Whether `key` is an identity input the state predates: state written before the id named
    the organization and project records this same job (its id stays the earlier form until the
    job changes)."""
    recorded = key in olds.recorded if olds.input_digests is None else key in olds.input_digests
    return key in ADDED_TO_IDENTITY and not recorded


def undigested_change(key: str, olds: JobRequest, news: JobRequest) -> bool:
    """For state written before digests were kept (it holds the values): whether `key` changed."""
    return olds.defining(key) != news.defining(key)


def updatable_unrecorded(key: str, olds: JobRequest) -> bool:
    """Whether `key` is an updatable input the state predates (no change, see ADDED_TO_UPDATABLE)."""
    return key in ADDED_TO_UPDATABLE and key not in olds.recorded


# ------------------------------------------------------------------ the RayJob's create


def legacy_run(jobs: Iterable[Any], job: JobRequest) -> tuple[str, str] | None:
    """The newest attempt, and its status, of a run the earlier id scheme started for this stack
    (its guard recorded the id): one still going or finished is this job's, so create adopts it
    instead of running it twice. None without one."""
    if not job.legacy_job_id:
        return None
    latest, status = latest_attempt(jobs, job.legacy_job_id)
    return (latest, status) if status is not None else None


# ------------------------------------------------------------------ the guard


def adopts_earlier_id(olds: GuardRecord, news: GuardRecord) -> bool:
    """Whether a guard the first releases wrote (holding the job's id in the earlier form, which
    the program passes again as `previous_job_id`) now takes the same job's new id."""
    return olds.job_id != news.job_id and olds.job_id == news.previous_job_id


def guard_legacy_id(olds: GuardRecord, news: GuardRecord) -> str | None:
    """The earlier id a guard keeps as LEGACY_JOB_ID on update: the one it held, if it is taking
    the new id now, else whatever it kept before."""
    return olds.job_id if adopts_earlier_id(olds, news) else olds.legacy_job_id
