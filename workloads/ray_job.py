"""A Ray job as a Pulumi resource: `pulumi up` submits it and finishes when the job has finished.

A *completed* job is the resource: its outputs are the job's result (status, timings, steps,
loss, throughput). The submission id is derived from the stack's organization, project and name
and the job-defining inputs, so an interrupted `pulumi up` resumes the same run instead of
starting a second one, and two stacks of the same name in other projects or organizations never
share one. A small
`RayJobGuard`, registered before the job, is in the state from the moment of submission, so
`pulumi destroy` stops a job whose `pulumi up` was interrupted (the job resource itself enters
the state only when the job has finished).

Python dynamic providers run inside the engine's `pulumi-resource-pulumi-python` plugin: they
are pickled into state (this class is importable and holds no client or credential, so it is
pickled by reference), `custom_timeouts` never reach them (the job carries its own deadline),
and Cancel is a no-op. The engine streams that plugin's stderr to the user as info lines, which
is where progress goes (see ProgressReporter).
"""

from __future__ import annotations

import email.utils
import math
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)
from pulumi.runtime import rpc

from domain.config.workload_settings import TIMEOUT_SECONDS
from domain.ray.queueing import WORKER_GROUP_START_TIMEOUT_ENV, Node, slices_up, waiting_line
from domain.stack_identity import digest
from domain.stack_identity import integral as _integral
from domain.training.goodput import OUTPUTS as GOODPUT_OUTPUTS
from domain.training.job_log import DATA_OUTPUTS, JobLog, StepCollector, tensorboard_directory
from stack_config import stack_identity
from workloads.jobs_api import LOST_CONTACT_KINDS, ErrorKind, JobsApi, JobsApiError

# ---------------------------------------------------------------------- the resource's record
# Written once: the program, the smoke run and the provider all derive from these names.
# Whose job it is: the stack, named in full (RayJob adds these from the running program).
IDENTITY = ("organization", "project", "stack")
# Identity inputs that submission ids of this code's first releases did not include (they were
# `pulumi-<stack>-<digest>`): state written then has no record of them, see RayJobProvider.diff.
ADDED_TO_IDENTITY = ("organization", "project")
# Inputs that define the job: changing one means another run (a new submission id). A failed
# run's retry is a new attempt of the same job: `<id>-2`, `<id>-3`, ...
JOB_DEFINING = (*IDENTITY, "entrypoint", "runtime_env", "metadata", "address", "gke")
# Inputs that change without a new run. The two deadlines (see RayJobProvider._wait), and what
# the job's worker group asks for (`slices`, `min_slices`, `hosts_per_slice`,
# `resources_per_worker`: counted while the job waits for them).
UPDATABLE = ("queue_timeout_seconds", "timeout_seconds", "worker_group", "total_steps", "checkpoint_dir")
# Updatable inputs of later releases: state written before them records a job submitted without
# them, and they only act on a submission or a wait, so their absence there is no change.
ADDED_TO_UPDATABLE = ("queue_timeout_seconds", "worker_group")
# The job's submission id under the earlier scheme, when the stack's guard recorded one (see
# RayJobGuardProvider): create adopts a run still going (or finished) under that id.
LEGACY_JOB_ID = "legacy_job_id"
INPUTS = JOB_DEFINING + UPDATABLE + (LEGACY_JOB_ID,)
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

LOG_TAIL_LINES = 50
POLL_SECONDS = 2.0
# How long the Jobs API may stay unreachable during a wait before the job is reported lost.
LOST_CONTACT_SECONDS = 30.0
PROGRESS_EVERY_SECONDS = 15.0
AGENT_WAIT_SECONDS = 60.0
# How long a stop may take to show before destroy (or a timeout) gives up on confirming it.
STOP_CONFIRM_SECONDS = 60.0
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def export_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


class RayJobError(RuntimeError):
    pass


# What in a GKE target says *where* the job runs; the rest (how destroy asks GKE about the
# cluster, where the Ray token is) may be added to an infra stack later without making the same
# job a new one.
GKE_LOCATION_KEYS = ("endpoint", "ca_certificate", "namespace", "service", "port")


def _defining(inputs: Mapping[str, Any], key: str) -> Any:
    value = _integral(inputs.get(key))
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
    return f"pulumi-{name}-{digest({key: _defining(inputs, key) for key in JOB_DEFINING})}"


def legacy_submission_id(inputs: Mapping[str, Any]) -> str:
    """The same job's id as the first releases named it, `pulumi-<stack>-<digest>`, from the
    stack's name alone: kept only to find runs those releases started (see RayJobGuardProvider)."""
    earlier = digest({key: _defining(inputs, key) for key in JOB_DEFINING if key not in ADDED_TO_IDENTITY})
    return f"pulumi-{inputs.get('stack', 'stack')}-{earlier}"


def input_digests(inputs: Mapping[str, Any]) -> dict[str, str]:
    """One digest per job-defining input: what `diff` compares, without the values in state."""
    return {key: digest(_defining(inputs, key)) for key in JOB_DEFINING}


def _attempt_number(base_id: str, job_id: str) -> int:
    """1 for the first attempt (`base_id` itself), N for `base_id-N`, 0 for another job."""
    if job_id == base_id:
        return 1
    prefix, _, number = job_id.rpartition("-")
    return int(number) if prefix == base_id and number.isdigit() else 0


def _next_attempt(base_id: str, latest_id: str) -> str:
    return f"{base_id}-{_attempt_number(base_id, latest_id) + 1}"


def _iso(milliseconds: int | None) -> str | None:
    if not milliseconds:
        return None
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC).isoformat(timespec="seconds")


def _shown(read: JobLog, problem: str | None) -> str:
    """The log's last lines for an error message (the reader leaves out Ray's echo of the
    command, which may hold settings the stack keeps secret), or why the log could not be read."""
    return f"--- last {LOG_TAIL_LINES} log lines ---\n{read.tail_text()}" if problem is None else problem


class ProgressReporter:
    """Honest live progress as plain lines: steps done of the total, loss and an ETA from the
    measured step rate. Lines, not a redrawn bar: the engine shows the plugin's stderr line by
    line, and a terminal shows them the same way."""

    def __init__(
        self,
        job_id: str,
        total_steps: int | None,
        stream: TextIO | None = None,
        every_seconds: float = PROGRESS_EVERY_SECONDS,
    ):
        self.job_id = job_id
        self.total_steps = total_steps
        self.stream = stream or sys.stderr
        self.every_seconds = every_seconds
        self._last_print = 0.0
        self._last_line = ""
        self._first_seen: tuple[float, int] | None = None
        self._waiting_for: tuple[int, int | None] | None = None

    def status(self, status: str) -> None:
        self._emit(f"RayJob {self.job_id}: {status}", force=True)

    def waiting(self, asked: int, up: int | None) -> None:
        """While the job waits for its slices: a line when the numbers change, none otherwise."""
        if (asked, up) != self._waiting_for:
            self._waiting_for = (asked, up)
            self._emit(f"RayJob {self.job_id}: {waiting_line(asked, up)}", force=True)

    def update(self, steps: StepCollector) -> None:
        latest = steps.latest
        if latest is None:
            return
        done = latest.step + 1
        now = time.monotonic()
        if self._first_seen is None:
            self._first_seen = (now, done)
        parts = [f"RayJob {self.job_id}: step {done}"]
        if self.total_steps:
            parts[0] += f"/{self.total_steps} ({100 * done // self.total_steps}%)"
        parts.append(f"loss {latest.loss:.3f}" if math.isfinite(latest.loss) else f"loss {latest.loss}: DIVERGED")
        started, first_done = self._first_seen
        if self.total_steps and done > first_done:
            seconds_per_step = (now - started) / (done - first_done)
            remaining = max(self.total_steps - done, 0) * seconds_per_step
            parts.append(f"ETA {int(remaining // 60)}m{int(remaining % 60):02d}s")
        self._emit(", ".join(parts))

    def _emit(self, line: str, force: bool = False) -> None:
        now = time.monotonic()
        if line == self._last_line or (not force and now - self._last_print < self.every_seconds):
            return
        print(line, file=self.stream, flush=True)
        self._last_print, self._last_line = now, line


def submitted_runtime_env(props: Mapping[str, Any]) -> dict[str, Any] | None:
    """The runtime env the job is submitted with: the stack's, plus Ray Train's worker-group
    start timeout set to the queue deadline (domain/ray/queueing.py says why). Added at submission
    only, so the deadline stays a setting that changes without a new run (it is not part of the
    submission id); a job adopted after a change keeps the value it was submitted with."""
    runtime_env = dict(props.get("runtime_env") or {})
    queue = _integral(props.get("queue_timeout_seconds"))
    if queue is not None:
        runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), WORKER_GROUP_START_TIMEOUT_ENV: str(queue)}
    return runtime_env or None


def _api(props: Mapping[str, Any]) -> JobsApi:
    return JobsApi(props.get("address"), props.get("gke"))


def _status(api: JobsApi, job_id: str) -> str:
    return str(api.call(f"asking for the status of {job_id}", lambda client: client.get_job_status(job_id)))


def stop_and_confirm(api: JobsApi, job_id: str) -> str:
    """Stops a job unless it has ended, and returns its final status only once Ray shows it;
    raises if Ray still shows it running after STOP_CONFIRM_SECONDS."""
    status = _status(api, job_id)
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
        status = _status(api, job_id)
    return status


def _teardown(api: JobsApi, job_ids: str, action: Callable[[], None]) -> None:
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


class RunClock:
    """How long ago an instant of the cluster's clock was (a job's start_time, its first worker
    group's start), without ever comparing the cluster's clock with this machine's: the
    cluster's time at one answer (its HTTP Date header, whole seconds) plus this process's
    monotonic time since that answer. An offset between the two clocks cancels out, so a cluster
    minutes ahead or behind times a job out as late as one in step. Without a Date header, an
    instant counts as now when this process first asks about it (an adopted job then gets its
    whole deadline again, never less)."""

    def __init__(self, date_header: str | None):
        self.anchored_at = time.monotonic()
        self.cluster_time: float | None = None
        if date_header:
            try:
                self.cluster_time = email.utils.parsedate_to_datetime(date_header).timestamp()
            except (TypeError, ValueError):
                pass
        self._first_seen: dict[float, float] = {}

    def elapsed(self, start_time_ms: int) -> float:
        """Seconds since a job's start_time (milliseconds, as Ray reports it)."""
        return self.since(start_time_ms / 1000)

    def since(self, instant: float) -> float:
        """Seconds since `instant` (epoch seconds on the cluster's clock)."""
        now = time.monotonic()
        first_seen = self._first_seen.setdefault(instant, now)
        if self.cluster_time is None:
            return now - first_seen
        return self.cluster_time + (now - self.anchored_at) - instant


@dataclass(frozen=True)
class Deadlines:
    """A job's two deadlines, from its inputs.

    `queue`: queue_timeout_seconds, how long the job may wait for its slices, from its start on
    the cluster (Ray's start_time) until its first worker group starts (the trainer's first
    `attempt` event, see domain/training/job_events.py). `run`: timeout_seconds, how long it may run from
    then until it ends. Both count on the cluster's clock (RunClock). A job given no queue
    deadline (state written before there was one, or a command that starts no worker group)
    has no wait apart: its run deadline counts from its start, as it always did."""

    run: float
    queue: float | None = None
    worker_group: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, props: Mapping[str, Any]) -> Deadlines:
        queue = props.get("queue_timeout_seconds")
        return cls(
            run=float(props.get("timeout_seconds") or TIMEOUT_SECONDS),
            queue=float(queue) if queue is not None else None,
            worker_group=_integral(props.get("worker_group")) or None,
        )


class QueueWatch:
    """What a job's wait for its slices looks like, until its first worker group starts.

    The trainer's rank 0 writes an `attempt` event when a worker group starts: a tail of the log
    that holds one (or a step) means the group started, and the first group's start is then
    read from the whole log (a tail may have lost it), once. While the job waits, the slices
    that are up are counted from Ray's node list, and a line is printed when the numbers change.
    At the queue deadline, the whole log is read again before anything is stopped: the group
    may have started since the last look."""

    def __init__(self, api: JobsApi, job_id: str, deadlines: Deadlines, progress: ProgressReporter, clock: RunClock):
        self.api, self.job_id, self.deadlines, self.progress, self.clock = api, job_id, deadlines, progress, clock
        group = deadlines.worker_group or {}
        self.asked = int(group.get("slices") or 1)
        self.needed = int(group.get("min_slices") or self.asked)
        self.hosts_per_slice = int(group.get("hosts_per_slice") or 1)
        self.resources_per_worker = {str(k): float(v) for k, v in (group.get("resources_per_worker") or {}).items()}
        self.started_at: float | None = None  # the first group's start, epoch seconds (the cluster's clock)
        self.up: int | None = None
        self.up_problem: str | None = None
        self._no_log_start = False  # the log could not be read: the run counts from the job's start

    @property
    def waiting(self) -> bool:
        return self.deadlines.queue is not None and self.started_at is None and not self._no_log_start

    def run_started_at(self, info) -> float | None:
        """Where the run deadline counts from (epoch seconds, the cluster's clock), or None while
        the job waits for its slices."""
        if self.deadlines.queue is None or self._no_log_start:
            return info.start_time / 1000 if info.start_time else None
        return self.started_at

    def read(self, info, tail: JobLog) -> None:
        """Looks for the first worker group in a tail of the log, as the job's reader read it."""
        if not self.waiting:
            return
        # An `attempt` event, or a step (whose group's start the tail lost).
        if (seen := tail.first_group_start()) is not None:
            whole, _ = self._first_group(info)
            self._started(info, whole if whole is not None else seen)

    def count(self) -> None:
        """Counts the slices that are up, and says so when the numbers changed."""
        if not self.waiting:
            return
        try:
            nodes = [Node.from_state(entry) for entry in self.api.nodes()]
        except JobsApiError as error:
            self.up, problem = None, f"the slices that are up could not be counted ({error})"
            if problem != self.up_problem:
                self.progress.status(problem)
            self.up_problem = problem
            return
        self.up_problem = None
        self.up = slices_up(nodes, hosts_per_slice=self.hosts_per_slice, resources_per_worker=self.resources_per_worker)
        self.progress.waiting(self.asked, self.up)

    def at_deadline(self, info) -> None:
        """The queue deadline has passed: reads the whole log before the job may be stopped. A
        log that cannot be read cannot say the group did not start: the job is stopped then only
        if the cluster has fewer slices up than it needs; otherwise its run counts from its start."""
        self.count()
        if not info.driver_node_id:
            return  # no driver yet: no worker group either
        first, problem = self._first_group(info)
        if first is not None:
            self._started(info, first)
        elif problem is not None and (self.up is None or self.up >= self.needed):
            self.progress.status(
                f"{problem}; whether its worker group started cannot be told, so its run deadline "
                "counts from the job's start"
            )
            self._no_log_start = True

    def capacity_report(self) -> str:
        """How many slices the job asked for, how many were up, and what to do."""
        need = f"{self.asked} slice{'s' if self.asked != 1 else ''}"
        if self.needed != self.asked:
            need += f" (at least {self.needed} to start)"
        hosts = f"{self.hosts_per_slice} host{'s' if self.hosts_per_slice != 1 else ''} each"
        if self.up is None:
            up = f"how many were up could not be counted ({self.up_problem})"
        elif self.up >= self.needed:
            up = (
                f"{self.up} {'was' if self.up == 1 else 'were'} up, yet its worker group did not start: see the "
                "log below for what held its driver or its placement"
            )
        else:
            up = f"{self.up} {'was' if self.up == 1 else 'were'} up"
        return (
            f"It asked for {need}, {hosts}; {up}. To wait longer for capacity, raise queueTimeoutSeconds "
            "(`pulumi config set queueTimeoutSeconds SECONDS` in the workloads stack), or bring more slices "
            "up (the infra stack's minSlices keeps slices up while idle)."
        )

    def _first_group(self, info) -> tuple[float | None, str | None]:
        """The first worker group's start from the whole log, and why the log could not be read."""
        whole = JobLog()
        try:
            whole.add_lines(self.api.log_lines(info.submission_id, info.driver_node_id))
        except JobsApiError as error:
            return None, f"the job's log could not be read ({error})"
        return whole.first_group_start(), None

    def _started(self, info, at: float | None) -> None:
        if at is None:
            return
        self.started_at = at
        queued = f" {at - info.start_time / 1000:.0f} s after the job's start" if info.start_time else ""
        self.progress.status(f"its first worker group started{queued}")


class RayJobProvider(ResourceProvider):
    """Create submits and waits; read reports; delete stops and removes. Stateless."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        entrypoint = news.get("entrypoint")
        if isinstance(entrypoint, str) and not entrypoint.strip():
            failures.append(CheckFailure("entrypoint", "entrypoint is empty; give the command to run"))
        has_address, has_gke = news.get("address") is not None, news.get("gke") is not None
        if has_address == has_gke:
            failures.append(
                CheckFailure(
                    "address", "give exactly one of address (a Ray dashboard URL) or gke (the infra stack's cluster)"
                )
            )
        for deadline in ("timeout_seconds", "queue_timeout_seconds"):
            seconds = news.get(deadline)
            if isinstance(seconds, (int, float)) and seconds <= 0:
                failures.append(CheckFailure(deadline, f"{deadline} = {seconds} must be positive"))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # `__provider` is deliberately ignored: a new version of this code is not a new job.
        digests = olds.get("input_digests")
        new_digests = input_digests(news)

        def changed(key: str) -> bool:
            if news.get(key) == rpc.UNKNOWN:
                return True  # preview cannot tell yet: show the replacement it may be
            recorded = key in olds if digests is None else key in digests
            if key in ADDED_TO_IDENTITY and not recorded:
                # State written before the id named the organization and project: the job it
                # records is this one (its id stays the earlier form until the job changes).
                return False
            if digests is None:  # state written before digests were kept
                return _defining(olds, key) != _defining(news, key)
            return digests.get(key) != new_digests[key]

        replaces = [key for key in JOB_DEFINING if changed(key)]
        updates = [
            key
            for key in UPDATABLE
            if _integral(olds.get(key)) != _integral(news.get(key))
            and not (key in ADDED_TO_UPDATABLE and key not in olds)
        ]
        return DiffResult(changes=bool(replaces or updates), replaces=replaces)

    def create(self, props: dict[str, Any]) -> CreateResult:
        with _api(props) as api:
            outs = self._run(api, submission_id(props), props)
        return CreateResult(id_=outs["submission_id"], outs=outs)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only settings that do not define the job changed: keep every output of the run.
        return UpdateResult(outs={**olds, **{key: news.get(key) for key in UPDATABLE}})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        with _api(props) as api:
            try:
                info = api.call(f"reading RayJob {id_}", lambda client: client.get_job_info(id_))
            except JobsApiError as error:
                if error.kind is ErrorKind.NOT_FOUND:
                    # Ray itself says the record is gone (deleted, or a new cluster): so is the resource.
                    return ReadResult(id_=None, outs={})
                raise RayJobError(
                    f"refresh could not read RayJob {id_}: {error}. The resource stays in the stack "
                    f"as it was. To fix: {api.fix_for(error.kind)}"
                ) from None
        return ReadResult(id_=id_, outs={**props, **self._info_outputs(info)})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        with _api(props) as api:

            def stop_then_delete() -> None:
                stop_and_confirm(api, id_)
                api.call(f"deleting the record of {id_}", lambda client: client.delete_job(id_))

            _teardown(api, id_, stop_then_delete)

    # ------------------------------------------------------------------ helpers

    def _run(self, api: JobsApi, job_id: str, props: dict[str, Any]) -> dict[str, Any]:
        clock = RunClock(api.check_reachable())
        jobs = api.call("listing jobs", lambda client: client.list_jobs())
        latest_id, existing = self._latest_attempt(jobs, job_id)
        legacy_id = props.get(LEGACY_JOB_ID)
        if existing is None and legacy_id:
            # A run the earlier id scheme started for this stack (its guard recorded the id):
            # one still going or finished is this job's, so it is adopted, never run twice.
            legacy_latest, legacy_status = self._latest_attempt(jobs, legacy_id)
            if legacy_status is not None:
                latest_id, existing = legacy_latest, legacy_status
        total_steps = _integral(props.get("total_steps"))
        if existing in ("FAILED", "STOPPED"):
            # A new attempt under a new id: Ray may still be finalizing the old one, and reusing
            # its id races with that (its supervisor actor has the same name). The failed
            # record stays as history.
            job_id = _next_attempt(job_id, latest_id) if _attempt_number(job_id, latest_id) else job_id
            progress = ProgressReporter(job_id, total_steps)
            progress.status(f"the previous attempt {latest_id} ended {existing}; submitting {job_id}")
            existing = None
        else:
            job_id = latest_id
            progress = ProgressReporter(job_id, total_steps)
        if existing is None:
            self._submit(api, job_id, props)
            progress.status(f"submitted to {api.describe()}")
        else:
            progress.status(f"adopting the existing {existing} job with this id")
        steps = StepCollector()
        deadlines = Deadlines.of(props)
        info = self._wait(api, job_id, deadlines, progress, steps, clock)
        status = str(info.status)
        if status != "SUCCEEDED":
            # Ray's message repeats the log; its first line is the reason. The trainer says which
            # retry budget ran out, when one did (its last word: the tail has it).
            read, log_problem = self._read_log(api, info, steps)
            reason = (info.message or "no message").splitlines()[0]
            failure = read.record.failure
            headline = f"RayJob {job_id} ended {status}" + (f": {failure}" if failure else "")
            raise RayJobError(f"{headline}.\n{_shown(read, log_problem)}\nstatus: {status}; message: {reason}")
        steps, goodput, log_problem = self._read_whole_log(api, info, steps)
        if log_problem is not None:
            progress.status(log_problem)
        summary = steps.summary()
        if summary.get("diverged"):
            progress.status("SUCCEEDED, but the run DIVERGED: its last loss is not a finite number")
        else:
            progress.status("SUCCEEDED")
        return {
            **{key: props.get(key) for key in KEPT_INPUTS},
            "input_digests": input_digests(props),
            **self._info_outputs(info),
            **summary,
            **goodput,
            # MaxText writes TensorBoard logs on TPU workers only: the CPU workers of a local head
            # run it without Google Cloud (DECOUPLE_GCLOUD), where its writer is a no-op.
            "tensorboard_dir": tensorboard_directory(props["checkpoint_dir"])
            if props.get("gke") and props.get("checkpoint_dir")
            else None,
            "dashboard_url": None if props.get("gke") else api.address,
        }

    @staticmethod
    def _read_whole_log(api: JobsApi, info, seen: StepCollector) -> tuple[StepCollector, dict[str, Any], str | None]:
        """The ended job's log, read once, whole and streamed (the events are spread over all of
        it): its steps, and the goodput outputs. The steps are a fresh count, since the tails read
        while the job ran can miss lines between them. On failure, the steps `seen` while it ran,
        None for each goodput output and a line saying why. A log can never change what the job's
        status says."""
        no_goodput = dict.fromkeys(GOODPUT_OUTPUTS)
        if not info.driver_node_id:
            return seen, no_goodput, "the job never started a driver, so it has no log"
        read = JobLog(StepCollector())
        try:
            read.add_lines(api.log_lines(info.submission_id, info.driver_node_id))
        except JobsApiError as error:
            return (
                seen,
                no_goodput,
                (
                    f"the job's log could not be read whole ({error}); its metrics are only what was seen before, "
                    "and it has no goodput"
                ),
            )
        start = info.start_time / 1000 if info.start_time else None
        end = info.end_time / 1000 if info.end_time else None
        return read.steps, read.record.summary(start, end), None

    @staticmethod
    def _read_log(api: JobsApi, info, steps: StepCollector) -> tuple[JobLog, str | None]:
        """The log's tail, read once by the job's reader (its steps into `steps`); on failure, an
        empty read and a line saying that the metrics are incomplete. A log can never change what
        the job's status says."""
        read = JobLog(steps, tail_lines=LOG_TAIL_LINES)
        if not info.driver_node_id:
            return read, "the job never started a driver, so it has no log"
        try:
            tail = api.log_tail(info.submission_id, info.driver_node_id)
        except JobsApiError as error:
            return read, f"the job's log could not be read ({error}); its metrics are only what was seen before"
        read.add_text(tail.decode("utf-8", errors="replace"))
        return read, None

    @staticmethod
    def _submit(api: JobsApi, job_id: str, props: dict[str, Any]) -> None:
        """Submits; a head that has just started answers "No available agent" for a few
        seconds until its job agent registers, so that one answer is retried briefly."""
        deadline = time.monotonic() + AGENT_WAIT_SECONDS
        metadata = {str(k): str(v) for k, v in _integral(props.get("metadata") or {}).items()} or None
        runtime_env = submitted_runtime_env(props)
        while True:
            try:
                api.call(
                    f"submitting {job_id}",
                    lambda client: client.submit_job(
                        entrypoint=props["entrypoint"],
                        submission_id=job_id,
                        runtime_env=runtime_env,
                        metadata=metadata,
                    ),
                )
                return
            except JobsApiError as error:
                if "No available agent" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(1)

    @staticmethod
    def _latest_attempt(jobs, base_id: str) -> tuple[str, str | None]:
        """The newest attempt of this job (`<id>`, `<id>-2`, ...) among `jobs` and its status, if any."""
        attempts = {
            job.submission_id: str(job.status)
            for job in jobs
            if job.submission_id and _attempt_number(base_id, job.submission_id)
        }
        if not attempts:
            return base_id, None
        latest = max(attempts, key=lambda job_id: _attempt_number(base_id, job_id))
        return latest, attempts[latest]

    def _wait(
        self,
        api: JobsApi,
        job_id: str,
        deadlines: Deadlines,
        progress: ProgressReporter,
        steps: StepCollector,
        clock: RunClock,
    ):
        """Polls until the job ends, or one of its deadlines passes (see Deadlines): while its
        first worker group has not started, the queue deadline, counted from the job's start;
        from then on, the run deadline, counted from that group's start. Both are measured by
        `clock` on the cluster's clock (never by comparing it with this machine's), so an
        adopted job gets only the time it has left. Any answer that says nothing about the job
        (unreachable, unauthorized, 5xx, no credentials) starts the lost-contact clock."""
        unreachable_since: float | None = None
        last_logs_at = 0.0
        log_problem_shown = False
        queue = QueueWatch(api, job_id, deadlines, progress, clock)
        while True:
            try:
                info = api.call(f"asking for {job_id}", lambda client: client.get_job_info(job_id))
            except JobsApiError as error:
                if error.kind not in LOST_CONTACT_KINDS:
                    raise RayJobError(f"RayJob {job_id} could not be followed: {error}") from None
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > LOST_CONTACT_SECONDS:
                    raise RayJobError(
                        f"lost contact with the Ray Jobs API at {api.describe()} while waiting for "
                        f"RayJob {job_id} for {LOST_CONTACT_SECONDS:.0f} s ({error}); the cluster or its "
                        f"head may be gone. To fix: {api.fix_for(error.kind)}; then run `pulumi up` again "
                        f"to resume, or `pulumi destroy` to stop the job"
                    ) from None
                time.sleep(POLL_SECONDS)
                continue
            unreachable_since = None
            status = str(info.status)
            if status in TERMINAL:
                return info
            if time.monotonic() - last_logs_at >= PROGRESS_EVERY_SECONDS:
                if info.driver_node_id:
                    tail, problem = self._read_log(api, info, steps)
                    if problem is not None and not log_problem_shown:
                        progress.status(problem)
                        log_problem_shown = True
                    queue.read(info, tail)
                    progress.update(steps)
                queue.count()
                last_logs_at = time.monotonic()
            if queue.waiting and info.start_time and clock.elapsed(info.start_time) > (deadlines.queue or 0):
                queue.at_deadline(info)
                if queue.waiting:
                    self._stop_for_capacity(api, job_id, deadlines, queue, steps)
            run_from = queue.run_started_at(info)
            if run_from is not None and clock.since(run_from) > deadlines.run:
                final = stop_and_confirm(api, job_id)
                info = api.call(f"asking for {job_id}", lambda client: client.get_job_info(job_id))
                tail, problem = self._read_log(api, info, steps)
                since = (
                    f"of its first worker group's start ({_iso(int(run_from * 1000))})"
                    if deadlines.queue is not None
                    else f"of its start ({_iso(info.start_time)})"
                )
                raise RayJobError(
                    f"RayJob {job_id} did not finish within timeout_seconds={deadlines.run:.0f} {since}; "
                    f"it was stopped\n{_shown(tail, problem)}\n"
                    f"status: {final} (timeout after {deadlines.run:.0f} s)"
                )
            time.sleep(POLL_SECONDS)

    def _stop_for_capacity(
        self, api: JobsApi, job_id: str, deadlines: Deadlines, queue: QueueWatch, steps: StepCollector
    ) -> None:
        """Stops a job whose first worker group did not start before its queue deadline, once Ray
        shows it stopped, and raises saying it could not get its slices."""
        final = stop_and_confirm(api, job_id)
        info = api.call(f"asking for {job_id}", lambda client: client.get_job_info(job_id))
        tail, problem = self._read_log(api, info, steps)
        raise RayJobError(
            f"RayJob {job_id} could not get capacity: its first worker group did not start within "
            f"queueTimeoutSeconds = {deadlines.queue:.0f} of the job's start ({_iso(info.start_time)}), so it "
            f"was stopped. {queue.capacity_report()}\n{_shown(tail, problem)}\n"
            f"status: {final} (queue timeout after {deadlines.queue:.0f} s)"
        )

    @staticmethod
    def _info_outputs(info) -> dict[str, Any]:
        duration = None
        if info.start_time and info.end_time:
            duration = round((info.end_time - info.start_time) / 1000, 1)
        return {
            "submission_id": info.submission_id,
            "status": str(info.status),
            "message": info.message,
            "start_time": _iso(info.start_time),
            "end_time": _iso(info.end_time),
            "duration_seconds": duration,
        }


class RayJob(Resource, module="ray", name="RayJob"):
    """`pulumi-python:dynamic/ray:RayJob`: a Ray job that exists once it has completed.

    `inputs` takes the names in INPUTS (except IDENTITY, which is this stack's); the outputs are
    attributes named as in OUTPUTS, and `stack_outputs()` gives the exported ones."""

    def __init__(self, name: str, inputs: Mapping[str, pulumi.Input[Any]], opts: pulumi.ResourceOptions | None = None):
        allowed = [key for key in INPUTS if key not in IDENTITY]
        unknown = sorted(set(inputs) - set(allowed))
        if unknown:
            raise ValueError(f"RayJob {name}: unknown inputs {unknown}; the inputs are {allowed}")
        placeholders = dict.fromkeys(output for output in OUTPUTS if output not in INPUTS)
        super().__init__(RayJobProvider(), name, {**placeholders, **inputs, **stack_identity().as_inputs()}, opts)

    def stack_outputs(self) -> dict[str, pulumi.Output[Any]]:
        return {export_name(output): getattr(self, output) for output in EXPORTED}


# ---------------------------------------------------------------------- the guard


class RayJobGuardProvider(ResourceProvider):
    """Holds a job's base submission id from before the submission; its delete stops every
    attempt of that job (`<id>`, `<id>-2`, ...) that is still running.

    A guard written by the first releases holds the job's id in the earlier form (`pulumi-<stack>-
    <digest>`, which the program passes again as `previous_job_id`). For the same job the guard
    is updated, not replaced (a replaced guard's delete would stop the run it guards): it takes
    the new id and keeps the earlier one as `legacy_job_id`, which the RayJob's create uses to
    adopt the run, and its delete stops the attempts of both. A guard created by this code never
    records an earlier id: another project's stack of the same name may run under it."""

    KEYS = ("job_id", LEGACY_JOB_ID, *TARGET_INPUTS)

    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = {**{key: props.get(key) for key in self.KEYS}, LEGACY_JOB_ID: None}
        return CreateResult(id_=f"{props['job_id']}-guard", outs=outs)

    @staticmethod
    def _adopts_earlier_id(olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
        return olds.get("job_id") != news.get("job_id") and olds.get("job_id") == news.get("previous_job_id")

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        migrating = self._adopts_earlier_id(olds, news)
        replaces = [
            key
            for key in ("job_id", *TARGET_INPUTS)
            if _defining(olds, key) != _defining(news, key) and not (key == "job_id" and migrating)
        ]
        changes = (
            bool(replaces)
            or migrating
            or any(_integral(olds.get(key)) != _integral(news.get(key)) for key in ("job_id", *TARGET_INPUTS))
        )
        return DiffResult(changes=changes, replaces=replaces)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only how to reach the cluster changed (e.g. the infra stack now exports its id), or the
        # job's id changed form (see the class).
        legacy = olds.get("job_id") if self._adopts_earlier_id(olds, news) else olds.get(LEGACY_JOB_ID)
        return UpdateResult(outs={**{key: news.get(key) for key in self.KEYS}, LEGACY_JOB_ID: legacy})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        base_ids = [base for base in (props["job_id"], props.get(LEGACY_JOB_ID)) if base]
        with _api(props) as api:

            def stop_every_attempt() -> None:
                jobs = api.call("listing jobs", lambda client: client.list_jobs())
                for job in jobs:
                    if job.submission_id and any(_attempt_number(base, job.submission_id) for base in base_ids):
                        if str(job.status) not in TERMINAL:
                            stop_and_confirm(api, job.submission_id)
                            print(f"RayJob {job.submission_id}: stopped", file=sys.stderr, flush=True)

            _teardown(api, f"{' and '.join(base_ids)} (every attempt)", stop_every_attempt)


class RayJobGuard(Resource, module="ray", name="RayJobGuard"):
    """`pulumi-python:dynamic/ray:RayJobGuard`: registered before the RayJob (which depends on
    it), so it is in the state before the job is submitted and leaves it after the job."""

    legacy_job_id: pulumi.Output[str | None]

    def __init__(
        self,
        name: str,
        *,
        job_id: pulumi.Input[str],
        previous_job_id: pulumi.Input[str] | None = None,
        address: pulumi.Input[str] | None = None,
        gke: pulumi.Input[Mapping[str, Any]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        props = {
            "job_id": job_id,
            "previous_job_id": previous_job_id,
            LEGACY_JOB_ID: None,  # an output: set only by the update of a guard the first releases wrote
            "address": address,
            "gke": gke,
        }
        super().__init__(RayJobGuardProvider(), name, props, opts)
