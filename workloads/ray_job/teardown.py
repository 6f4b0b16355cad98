"""Stopping a job, and destroying what the stack holds of it, only on proof.

A stop counts once Ray shows the job ended; a destroy succeeds only when it confirmed its effect,
when Ray has no record of the job, or when the cluster is known to be gone. Anything else keeps
the resource in the stack (the job may still be running, and paying for its TPUs) and says what
to do.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from workloads.jobs_api import JobsApi
from workloads.jobs_api.errors import ErrorKind, JobsApiError
from workloads.ray_job.record import TERMINAL, RayJobError

# How long a stop may take to show before destroy (or a timeout) gives up on confirming it.
STOP_CONFIRM_SECONDS = 60.0


def job_status(api: JobsApi, job_id: str) -> str:
    return str(api.call(f"asking for the status of {job_id}", lambda client: client.get_job_status(job_id)))


def stop_and_confirm(api: JobsApi, job_id: str) -> str:
    """Stops a job unless it has ended, and returns its final status only once Ray shows it;
    raises if Ray still shows it running after STOP_CONFIRM_SECONDS."""
    status = job_status(api, job_id)
    if status in TERMINAL:
        return status
    api.call(f"stopping {job_id}", lambda client: client.stop_job(job_id))
    deadline = time.monotonic() + STOP_CONFIRM_SECONDS
    while status not in TERMINAL:
        if time.monotonic() > deadline:
            raise RayJobError(
                f"asked Ray to stop {job_id} at {api.describe()}, but it is still {status} after "
                f"{STOP_CONFIRM_SECONDS:.0f} s"
            )
        time.sleep(1)
        status = job_status(api, job_id)
    return status


def teardown(api: JobsApi, job_ids: str, action: Callable[[], None]) -> None:
    """Runs a destroy action; succeeds only when it confirmed its effect, when the job record is
    gone, or when the cluster is known to be gone. Everything else fails, and says what to do."""
    try:
        action()
        return
    except JobsApiError as error:
        if error.kind is ErrorKind.NOT_FOUND:
            return  # no record under this id: nothing of it runs
        failure, kind = str(error), error.kind
    except RayJobError as error:
        failure, kind = str(error), ErrorKind.UNREACHABLE
    check = api.cluster_check()
    if check.gone:
        print(f"RayJob {job_ids}: {check.evidence}; nothing left to stop", file=sys.stderr, flush=True)
        return
    raise RayJobError(
        f"could not confirm that RayJob {job_ids} is stopped: {failure}.\n"
        f"{api.cluster_name()} is not known to be gone: {check.evidence}.\n"
        f"The job may still be running (and paying for its TPUs), so it stays in the stack. To fix: "
        f"{api.fix_for(kind)}; then run `pulumi destroy` again.\n"
        f"Only if you know it no longer runs: `pulumi state delete <URN>` forgets it without "
        f"stopping it (`pulumi stack --show-urns` lists the URNs)."
    )
