"""What the RayJob's guard does: it holds a job's base submission id from before the submission,
and its delete stops every attempt of that job (`<id>`, `<id>-2`, ...) that is still running.

The RayJob resource enters the state only once its job has finished; the guard, registered before
it, is in the state from the moment of submission, so `pulumi destroy` stops a job whose `pulumi up`
was interrupted. Its provider class, RayJobGuardProvider, stays in workloads/ray_job/__init__.py: state
holds it pickled by reference under that module path (see the note there).

A guard written by the first releases holds the job's id in the earlier form (see
workloads/ray_job/migration.py). For the same job the guard is updated, not replaced (a replaced
guard's delete would stop the run it guards): it takes the new id and keeps the earlier one as
`legacy_job_id`, which the RayJob's create uses to adopt the run, and its delete stops the attempts
of both. A guard created by this code never records an earlier id: another project's stack of the
same name may run under it.
"""

from __future__ import annotations

import sys
from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, UpdateResult

from workloads.jobs_api import JobsApi
from workloads.ray_job.migration import adopts_earlier_id, guard_legacy_id
from workloads.ray_job.record import TARGET_INPUTS, TERMINAL, GuardRecord, attempt_number
from workloads.ray_job.teardown import stop_and_confirm, teardown


def create(props: dict[str, Any]) -> CreateResult:
    guard = GuardRecord.from_props(props)
    outs = GuardRecord(job_id=guard.job_id, address=guard.address, gke=guard.gke).to_props()
    return CreateResult(id_=f"{guard.job_id}-guard", outs=outs)


def diff(old_props: dict[str, Any], new_props: dict[str, Any]) -> DiffResult:
    olds, news = GuardRecord.from_props(old_props), GuardRecord.from_props(new_props)
    migrating = adopts_earlier_id(olds, news)
    replaces = [
        key
        for key in ("job_id", *TARGET_INPUTS)
        if olds.defining(key) != news.defining(key) and not (key == "job_id" and migrating)
    ]
    changes = (
        bool(replaces)
        or migrating
        or any(getattr(olds, key) != getattr(news, key) for key in ("job_id", *TARGET_INPUTS))
    )
    return DiffResult(changes=changes, replaces=replaces)


def update(old_props: dict[str, Any], new_props: dict[str, Any]) -> UpdateResult:
    # Only how to reach the cluster changed (e.g. the infra stack now exports its id), or the
    # job's id changed form (see the module).
    olds, news = GuardRecord.from_props(old_props), GuardRecord.from_props(new_props)
    kept = GuardRecord(
        job_id=news.job_id, legacy_job_id=guard_legacy_id(olds, news), address=news.address, gke=news.gke
    )
    return UpdateResult(outs=kept.to_props())


def delete(props: dict[str, Any]) -> None:
    guard = GuardRecord.from_props(props)
    base_ids = [base for base in (guard.job_id, guard.legacy_job_id) if base]
    with JobsApi(guard.address, guard.gke) as api:

        def stop_every_attempt() -> None:
            jobs = api.call("listing jobs", lambda client: client.list_jobs())
            for job in jobs:
                if job.submission_id and any(attempt_number(base, job.submission_id) for base in base_ids):
                    if str(job.status) not in TERMINAL:
                        stop_and_confirm(api, job.submission_id)
                        print(f"RayJob {job.submission_id}: stopped", file=sys.stderr, flush=True)

        teardown(api, f"{' and '.join(base_ids)} (every attempt)", stop_every_attempt)
