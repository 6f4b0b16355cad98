"""What a RayJob records: the names of its inputs and outputs, the job's submission id, and the
outputs a job's record at Ray gives.

Written once: the program, the smoke run and the provider all derive from these names. The
submission id is derived from the stack's organization, project and name and the job-defining
inputs, so an interrupted `pulumi up` resumes the same run instead of starting a second one, and
two stacks of the same name in other projects or organizations never share one. What state
written by earlier versions records instead is in workloads/ray_job_migration.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from domain.stack_identity import digest, integral
from domain.training.goodput import OUTPUTS as GOODPUT_OUTPUTS
from domain.training.job_log import DATA_OUTPUTS

# Whose job it is: the stack, named in full (RayJob adds these from the running program).
IDENTITY = ("organization", "project", "stack")
# Inputs that define the job: changing one means another run (a new submission id). A failed
# run's retry is a new attempt of the same job: `<id>-2`, `<id>-3`, ...
JOB_DEFINING = (*IDENTITY, "entrypoint", "runtime_env", "metadata", "address", "gke")
# Inputs that change without a new run. The two deadlines (see workloads/job_wait.py), and what
# the job's worker group asks for (`slices`, `min_slices`, `hosts_per_slice`,
# `resources_per_worker`: counted while the job waits for them).
UPDATABLE = ("queue_timeout_seconds", "timeout_seconds", "worker_group", "total_steps", "checkpoint_dir")
# Where the job runs (one of the two), and what the program derives from the job description.
TARGET_INPUTS = ("address", "gke")
JOB_INPUTS = tuple(name for name in JOB_DEFINING + UPDATABLE if name not in (*TARGET_INPUTS, *IDENTITY))
# Inputs copied into the outputs: whose job it is, where it runs (refresh and destroy need it)
# and the updatable settings. The command, runtime env and metadata may carry secrets (`pulumi
# config set --secret`); state keeps only a digest of each, which is all `diff` needs.
KEPT_INPUTS = (*IDENTITY, *TARGET_INPUTS, *UPDATABLE)
# Outputs, and whether the workloads stack exports them (under their camelCase name).
OUTPUTS = (
    "submission_id",
    "status",
    "message",
    "start_time",
    "end_time",
    "duration_seconds",
    "steps_completed",
    "final_loss",
    "diverged",
    "tokens_per_second_per_device",
    "tflops_per_device",
    *DATA_OUTPUTS,
    *GOODPUT_OUTPUTS,
    "checkpoint_dir",
    "tensorboard_dir",
    "dashboard_url",
    "input_digests",
)
EXPORTED = tuple(name for name in OUTPUTS if name not in ("message", "input_digests"))

# The statuses of a job that has ended.
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class RayJobError(RuntimeError):
    """Why a RayJob operation failed, and what to do about it."""


def export_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


# What in a GKE target says *where* the job runs; the rest (how destroy asks GKE about the
# cluster, where the Ray token is) may be added to an infra stack later without making the same
# job a new one.
GKE_LOCATION_KEYS = ("endpoint", "ca_certificate", "namespace", "service", "port")


def defining(inputs: Mapping[str, Any], key: str) -> Any:
    """The value of a job-defining input, as far as it defines the job."""
    value = integral(inputs.get(key))
    if key == "gke" and isinstance(value, Mapping):
        return {name: value.get(name) for name in GKE_LOCATION_KEYS}
    return value


# The readable part of a submission id is cut to this many characters (the digest covers the full
# names). Ray sets no limit of its own, but names the job's log file `job-driver-<id>.log`, which
# must fit the 255 bytes of a file name: ids stay far below that, attempt suffixes included.
ID_NAME_MAX = 100
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9._-]+")


def submission_id(inputs: Mapping[str, Any]) -> str:
    """Deterministic: the same stack (organization, project and name) and job-defining inputs
    always name the same job, `pulumi-<organization>-<project>-<stack>-<digest>`; a name the
    program cannot know (the organization under mocks) is left out of the readable part."""
    name = "-".join(str(inputs[key]) for key in IDENTITY if inputs.get(key))
    name = _NOT_IN_ID.sub("-", name)[:ID_NAME_MAX].strip("-.") or "stack"
    return f"pulumi-{name}-{digest({key: defining(inputs, key) for key in JOB_DEFINING})}"


def input_digests(inputs: Mapping[str, Any]) -> dict[str, str]:
    """One digest per job-defining input: what `diff` compares, without the values in state."""
    return {key: digest(defining(inputs, key)) for key in JOB_DEFINING}


def attempt_number(base_id: str, job_id: str) -> int:
    """1 for the first attempt (`base_id` itself), N for `base_id-N`, 0 for another job."""
    if job_id == base_id:
        return 1
    prefix, _, number = job_id.rpartition("-")
    return int(number) if prefix == base_id and number.isdigit() else 0


def next_attempt(base_id: str, latest_id: str) -> str:
    return f"{base_id}-{attempt_number(base_id, latest_id) + 1}"


def latest_attempt(jobs: Iterable[Any], base_id: str) -> tuple[str, str | None]:
    """The newest attempt of this job (`<id>`, `<id>-2`, ...) among `jobs` and its status, if any."""
    attempts = {
        job.submission_id: str(job.status)
        for job in jobs
        if job.submission_id and attempt_number(base_id, job.submission_id)
    }
    if not attempts:
        return base_id, None
    latest = max(attempts, key=lambda job_id: attempt_number(base_id, job_id))
    return latest, attempts[latest]


def iso(milliseconds: int | None) -> str | None:
    if not milliseconds:
        return None
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC).isoformat(timespec="seconds")


def info_outputs(info: Any) -> dict[str, Any]:
    """The outputs Ray's record of the job (its JobDetails) gives."""
    duration = None
    if info.start_time and info.end_time:
        duration = round((info.end_time - info.start_time) / 1000, 1)
    return {
        "submission_id": info.submission_id,
        "status": str(info.status),
        "message": info.message,
        "start_time": iso(info.start_time),
        "end_time": iso(info.end_time),
        "duration_seconds": duration,
    }
