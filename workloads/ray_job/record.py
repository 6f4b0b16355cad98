"""What a RayJob records: its inputs as one typed record (JobRequest), its outputs as another
(JobResult), and the job's submission id.

Written once: each input is a field of JobRequest, which declares its role (whose job it is,
whether it defines the job or may change without a new run, where the job runs, whether state
keeps it), and each output a field of JobResult; the program, the smoke run and the provider
derive the names from those fields. Each provider method parses the engine's props into a
JobRequest once (`from_props`), reads attributes, and writes props once on return.
The submission id is derived from the stack's organization, project and name and the
job-defining inputs, so an interrupted `pulumi up` resumes the same run instead of starting a
second one, and two stacks of the same name in other projects or organizations never share one.
What state written by earlier versions records instead is in workloads/ray_job/migration.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from pulumi.runtime import rpc

from domain.stack_identity import digest, integral
from domain.training.goodput import GoodputOutputs
from domain.training.job import JobSpec
from domain.training.job_log import DataOutputs, StepOutputs
from domain.training.run_estimate import RunEstimate
from workloads.jobs_api.gke_access import GkeTarget

# The roles an input of the RayJob has (declared on JobRequest's fields).
# Whose job it is: the stack, named in full (the workloads program adds these to the inputs).
IDENTITY_ROLE = "identity"
# Defines the job: changing one means another run (a new submission id). A failed run's retry is
# a new attempt of the same job: `<id>-2`, `<id>-3`, ...
DEFINING_ROLE = "defining"
# Changes without a new run.
UPDATABLE_ROLE = "updatable"
# Where the job runs (one of the two).
TARGET_ROLE = "target"
# Copied into the outputs: whose job it is, where it runs (refresh and destroy need it) and the
# updatable settings. The command, runtime env and metadata may carry secrets (`pulumi config set
# --secret`); state keeps only a digest of each, which is all `diff` needs.
KEPT_ROLE = "kept"


def _input(*roles: str) -> dict[str, Any]:
    """A field's metadata: it is an input, with these roles."""
    return {"input": True, "roles": frozenset(roles)}


@dataclass(frozen=True)
class WorkerGroup:
    """What the job's worker group asks the cluster for (the `worker_group` input): the RayJob
    counts the slices that are up while the job waits for them, and names them when it could not
    get them. Values as the inputs gave them (None where state lacks one)."""

    slices: int | None = None
    min_slices: int | None = None
    hosts_per_slice: int | None = None
    resources_per_worker: Mapping[str, float] | None = None

    @classmethod
    def of(cls, job: JobSpec) -> WorkerGroup:
        return cls(job.slices, job.min_slices, job.hosts_per_slice, job.resources_per_worker)

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> WorkerGroup:
        return cls(**{f.name: props.get(f.name) for f in fields(cls)})

    def to_props(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class CheckpointBucket:
    """The bucket behind the cluster's checkpoint mount (the `checkpoint_bucket` input): the
    workers' mount path (the infra stack's checkpointRoot) and the `gs://BUCKET[/PREFIX]` it
    mounts (its checkpointBucketUrl). A GKE run's TensorBoard scalars are uploaded there
    (workloads/ray_job/bucket_scalars.py)."""

    mount: str
    url: str

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> CheckpointBucket:
        return cls(mount=str(props.get("mount") or ""), url=str(props.get("url") or ""))

    def to_props(self) -> dict[str, Any]:
        return {"mount": self.mount, "url": self.url}

    def mounts(self) -> dict[str, str]:
        """As workloads/bucket_files.py takes mounts: the mount path -> the bucket URL."""
        return {self.mount: self.url}


@dataclass(frozen=True)
class JobRequest:
    """The RayJob's inputs (or, parsed from its state, what state keeps of them), one field per
    input: its name is the input's name on the wire and in state, its metadata its roles.

    Numbers are whole where the engine sent whole floats (8265.0 is 8265); `gke` and
    `worker_group` are parsed into their records. A value preview cannot tell yet (the engine's
    unknown) is kept as that sentinel and named in `unknown` (a record that is, or holds, one is
    None here)."""

    organization: str | None = field(default=None, metadata=_input(IDENTITY_ROLE, DEFINING_ROLE, KEPT_ROLE))
    project: str | None = field(default=None, metadata=_input(IDENTITY_ROLE, DEFINING_ROLE, KEPT_ROLE))
    stack: str | None = field(default=None, metadata=_input(IDENTITY_ROLE, DEFINING_ROLE, KEPT_ROLE))
    entrypoint: str | None = field(default=None, metadata=_input(DEFINING_ROLE))
    runtime_env: Mapping[str, Any] | None = field(default=None, metadata=_input(DEFINING_ROLE))
    metadata: Mapping[str, Any] | None = field(default=None, metadata=_input(DEFINING_ROLE))
    address: str | None = field(default=None, metadata=_input(DEFINING_ROLE, TARGET_ROLE, KEPT_ROLE))
    gke: GkeTarget | None = field(default=None, metadata=_input(DEFINING_ROLE, TARGET_ROLE, KEPT_ROLE))
    # The two deadlines (see workloads/ray_job/wait.py), and what the job's worker group asks for.
    queue_timeout_seconds: float | None = field(default=None, metadata=_input(UPDATABLE_ROLE, KEPT_ROLE))
    timeout_seconds: float | None = field(default=None, metadata=_input(UPDATABLE_ROLE, KEPT_ROLE))
    worker_group: WorkerGroup | None = field(default=None, metadata=_input(UPDATABLE_ROLE, KEPT_ROLE))
    total_steps: int | None = field(default=None, metadata=_input(UPDATABLE_ROLE, KEPT_ROLE))
    checkpoint_dir: str | None = field(default=None, metadata=_input(UPDATABLE_ROLE, KEPT_ROLE))
    # The bucket behind checkpoint_dir's mount on the cluster (None for a local head): where a GKE
    # run's TensorBoard scalars are uploaded, once the run has ended.
    checkpoint_bucket: CheckpointBucket | None = field(default=None, metadata=_input(UPDATABLE_ROLE, KEPT_ROLE))
    # What the stack predicted of the run, for its page and scalars (None for a CPU job).
    estimate: RunEstimate | None = field(default=None, metadata=_input(UPDATABLE_ROLE, KEPT_ROLE))
    # The job's submission id under the earlier scheme, when the stack's guard recorded one (see
    # workloads/ray_job/migration.py): create adopts a run still going (or finished) under it.
    legacy_job_id: str | None = field(default=None, metadata=_input())

    # Not inputs. What state recorded of the job-defining inputs (one digest each; None in state
    # written before digests were kept, and in the inputs).
    input_digests: Mapping[str, str] | None = None
    # Which inputs the props named at all (state written by earlier versions lacks some), and
    # which of them preview cannot tell yet.
    recorded: frozenset[str] = field(default=frozenset(), compare=False)
    unknown: frozenset[str] = field(default=frozenset(), compare=False)

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> JobRequest:
        """The record of the engine's props (a create's inputs, a diff's olds or news, state):
        the names of other props (the outputs) are left out."""
        values, unknown = _parsed(props, INPUTS)
        digests = props.get("input_digests")
        return cls(
            **values,
            input_digests=dict(digests) if isinstance(digests, Mapping) else None,
            recorded=frozenset(name for name in INPUTS if name in props),
            unknown=frozenset(unknown),
        )

    def props(self, names: Iterable[str]) -> dict[str, Any]:
        """These inputs as the wire and state hold them (the GKE target as a mapping)."""
        return {name: _wire(getattr(self, name)) for name in names}

    def to_props(self) -> dict[str, Any]:
        """What state keeps of the inputs: the kept ones, and a digest of each job-defining one."""
        return {**self.props(KEPT_INPUTS), "input_digests": self.digests()}

    def defining(self, name: str) -> Any:
        """The value of a job-defining input, as far as it defines the job."""
        return _defining(getattr(self, name))

    def digests(self) -> dict[str, str]:
        """One digest per job-defining input: what `diff` compares, without the values in state."""
        return {name: digest(self.defining(name)) for name in JOB_DEFINING}

    def submission_id(self) -> str:
        """Deterministic: the same stack (organization, project and name) and job-defining inputs
        always name the same job, `pulumi-<organization>-<project>-<stack>-<digest>`; a name the
        program cannot know (the organization under mocks) is left out of the readable part."""
        name = "-".join(str(getattr(self, key)) for key in IDENTITY if getattr(self, key))
        name = _NOT_IN_ID.sub("-", name)[:ID_NAME_MAX].strip("-.") or "stack"
        return f"pulumi-{name}-{digest({key: self.defining(key) for key in JOB_DEFINING})}"


@dataclass(frozen=True)
class GuardRecord:
    """The RayJobGuard's inputs and state (workloads/ray_job/guard.py): the job's base submission
    id, where the job runs, and the ids of the same job in the first releases' form (see
    workloads/ray_job/migration.py): `previous_job_id`, an input, and `legacy_job_id`, what state
    keeps of it."""

    job_id: str | None = None
    previous_job_id: str | None = None
    legacy_job_id: str | None = None
    address: str | None = None
    gke: GkeTarget | None = None

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> GuardRecord:
        values, _ = _parsed(props, GUARD_PROPS)
        return cls(**values)

    def to_props(self) -> dict[str, Any]:
        """What state keeps: the id, the earlier one, where the job runs."""
        return {name: _wire(getattr(self, name)) for name in GUARD_KEPT}

    def defining(self, name: str) -> Any:
        """The value of the id or of a target input, as far as it defines what is guarded."""
        return _defining(getattr(self, name))


GUARD_PROPS = tuple(f.name for f in fields(GuardRecord))
GUARD_KEPT = tuple(name for name in GUARD_PROPS if name != "previous_job_id")


# The props held as records, and how each is parsed from its mapping.
_RECORDS: dict[str, Any] = {
    "gke": GkeTarget.from_inputs,
    "worker_group": WorkerGroup.from_props,
    "estimate": RunEstimate.from_props,
    "checkpoint_bucket": CheckpointBucket.from_props,
}


def _parsed(props: Mapping[str, Any], names: tuple[str, ...]) -> tuple[dict[str, Any], set[str]]:
    """The values of `names` in the engine's props (absent ones None, whole floats whole, `gke`
    and `worker_group` records), and which of them preview cannot tell yet."""
    values: dict[str, Any] = {name: integral(props.get(name)) for name in names}
    unknown = {name for name in names if values[name] == rpc.UNKNOWN}
    for name in _RECORDS.keys() & set(names):
        value = values[name]
        if isinstance(value, Mapping) and rpc.UNKNOWN not in value.values():
            values[name] = _RECORDS[name](value)
        else:
            values[name] = None
            if value is not None:
                unknown.add(name)
    return values, unknown


def _wire(value: Any) -> Any:
    """A value as the wire and state hold it: a GKE target without the fields it has no value
    for, a worker group, an estimate and a checkpoint bucket as their mappings."""
    if isinstance(value, GkeTarget):
        return value.as_inputs()
    return value.to_props() if isinstance(value, (WorkerGroup, RunEstimate, CheckpointBucket)) else value


def _defining(value: Any) -> Any:
    """A value as far as it defines the job: a GKE target's location only."""
    if isinstance(value, GkeTarget):
        return {key: getattr(value, key) for key in GKE_LOCATION_KEYS}
    return value


def _named(role: str) -> tuple[str, ...]:
    return tuple(f.name for f in fields(JobRequest) if role in f.metadata.get("roles", ()))


# The names, derived from JobRequest's fields.
INPUTS = tuple(f.name for f in fields(JobRequest) if f.metadata.get("input"))
IDENTITY = _named(IDENTITY_ROLE)
JOB_DEFINING = _named(DEFINING_ROLE)
UPDATABLE = _named(UPDATABLE_ROLE)
TARGET_INPUTS = _named(TARGET_ROLE)
KEPT_INPUTS = _named(KEPT_ROLE)
# What the program derives from the job description.
JOB_INPUTS = tuple(name for name in JOB_DEFINING + UPDATABLE if name not in (*TARGET_INPUTS, *IDENTITY))


# The metadata of an output the workloads stack does not export.
_NOT_EXPORTED = {"exported": False}


@dataclass(frozen=True, kw_only=True)
class JobInfo:
    """The outputs Ray's record of the job (its JobDetails) gives."""

    submission_id: str
    status: str
    message: str | None = field(metadata=_NOT_EXPORTED)  # it repeats the log's last words
    start_time: str | None
    end_time: str | None
    duration_seconds: float | None

    @classmethod
    def of(cls, details: Any) -> JobInfo:
        duration = None
        if details.start_time and details.end_time:
            duration = round((details.end_time - details.start_time) / 1000, 1)
        return cls(
            submission_id=details.submission_id,
            status=str(details.status),
            message=details.message,
            start_time=iso(details.start_time),
            end_time=iso(details.end_time),
            duration_seconds=duration,
        )

    def props(self) -> dict[str, Any]:
        """These outputs as the wire and state hold them, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# A dataclass lists its bases' fields from the last base to the first, then its own: Ray's
# record, the steps, the data, the goodput, then the provider's own, in that order.
@dataclass(frozen=True, kw_only=True)
class JobResult(GoodputOutputs, DataOutputs, StepOutputs, JobInfo):
    """The RayJob's outputs, one field each, under its name; beside them state keeps the inputs
    JobRequest.to_props names (checkpoint_dir and input_digests are both)."""

    checkpoint_dir: str | None
    tensorboard_dir: str | None
    dashboard_url: str | None
    # The run's page (domain/reports/run_page.py): a file on the machine that ran pulumi up.
    report_path: str | None
    # Whether the page was written. Always recorded (the engine drops a null output from the state
    # it hands back, so report_path alone cannot tell "not written" from "recorded before runs
    # had pages", which the next `pulumi up` draws).
    page_written: bool = field(metadata=_NOT_EXPORTED)
    input_digests: dict[str, str] = field(metadata=_NOT_EXPORTED)  # only what `diff` compares

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> JobResult:
        """The result among a create's outputs (the kept inputs beside it are left out)."""
        return cls(**{name: props[name] for name in OUTPUTS})


OUTPUTS = tuple(f.name for f in fields(JobResult))
# The outputs the workloads stack exports (under their camelCase names).
EXPORTED = tuple(f.name for f in fields(JobResult) if f.metadata.get("exported", True))

# The statuses of a job that has ended.
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class RayJobError(RuntimeError):
    """Why a RayJob operation failed, and what to do about it."""


# What in a GKE target says *where* the job runs; the rest (how destroy asks GKE about the
# cluster, where the Ray token is) may be added to an infra stack later without making the same
# job a new one.
GKE_LOCATION_KEYS = ("endpoint", "ca_certificate", "namespace", "service", "port")


# The readable part of a submission id is cut to this many characters (the digest covers the full
# names). Ray sets no limit of its own, but names the job's log file `job-driver-<id>.log`, which
# must fit the 255 bytes of a file name: ids stay far below that, attempt suffixes included.
ID_NAME_MAX = 100
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9._-]+")


def submission_id(props: Mapping[str, Any]) -> str:
    """The submission id (JobRequest.submission_id) of the job the engine's props describe."""
    return JobRequest.from_props(props).submission_id()


def input_digests(props: Mapping[str, Any]) -> dict[str, str]:
    """One digest per job-defining input (JobRequest.digests) of the props' job."""
    return JobRequest.from_props(props).digests()


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
