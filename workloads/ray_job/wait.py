"""Waiting for a job to end, within its two deadlines, measured on the cluster's clock.

While the job's first worker group has not started, the queue deadline counts from the job's start
(QueueWatch counts the slices that are up meanwhile); from then on, the run deadline counts from that
group's start (see Deadlines). Both are measured by a RunClock, never by comparing the cluster's
clock with this machine's, so an adopted job gets only the time it has left. A job past a deadline
is stopped (workloads/ray_job/teardown.py) and the wait raises saying why.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from typing import Any

from domain.ray.queueing import Node, slices_up
from domain.training.job_log import JobLog, StepCollector
from domain.workload_settings import TIMEOUT_SECONDS
from workloads.jobs_api import JobsApi
from workloads.jobs_api.errors import LOST_CONTACT_KINDS, JobsApiError
from workloads.ray_job.progress import PROGRESS_EVERY_SECONDS, ProgressReporter, read_tail, shown
from workloads.ray_job.record import TERMINAL, JobRequest, RayJobError, WorkerGroup, iso
from workloads.ray_job.teardown import stop_and_confirm

POLL_SECONDS = 2.0
# How long the Jobs API may stay unreachable during a wait before the job is reported lost.
LOST_CONTACT_SECONDS = 30.0


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
    worker_group: WorkerGroup | None = None

    @classmethod
    def of(cls, job: JobRequest) -> Deadlines:
        queue = job.queue_timeout_seconds
        return cls(
            run=float(job.timeout_seconds or TIMEOUT_SECONDS),
            queue=float(queue) if queue is not None else None,
            worker_group=job.worker_group,
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
        group = deadlines.worker_group or WorkerGroup()
        self.asked = int(group.slices or 1)
        self.needed = int(group.min_slices or self.asked)
        self.hosts_per_slice = int(group.hosts_per_slice or 1)
        self.resources_per_worker = {str(k): float(v) for k, v in (group.resources_per_worker or {}).items()}
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


def until_ended(
    api: JobsApi,
    job_id: str,
    deadlines: Deadlines,
    progress: ProgressReporter,
    steps: StepCollector,
    clock: RunClock,
) -> Any:
    """Polls until the job ends, and returns Ray's record of it (its JobDetails), or raises once
    one of its deadlines passes (see Deadlines): while its first worker group has not started,
    the queue deadline, counted from the job's start; from then on, the run deadline, counted
    from that group's start. Both are measured by `clock` on the cluster's clock (never by
    comparing it with this machine's), so an adopted job gets only the time it has left. Any
    answer that says nothing about the job (unreachable, unauthorized, 5xx, no credentials)
    starts the lost-contact clock."""
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
                tail, problem = read_tail(api, info, steps)
                if problem is not None and not log_problem_shown:
                    progress.status(problem)
                    log_problem_shown = True
                queue.read(info, tail)
                progress.starting(tail.record, info.start_time)
                progress.update(steps)
            queue.count()
            last_logs_at = time.monotonic()
        if queue.waiting and info.start_time and clock.elapsed(info.start_time) > (deadlines.queue or 0):
            queue.at_deadline(info)
            if queue.waiting:
                _stop_for_capacity(api, job_id, deadlines, queue, steps)
        run_from = queue.run_started_at(info)
        if run_from is not None and clock.since(run_from) > deadlines.run:
            final = stop_and_confirm(api, job_id)
            info = api.call(f"asking for {job_id}", lambda client: client.get_job_info(job_id))
            tail, problem = read_tail(api, info, steps)
            since = (
                f"of its first worker group's start ({iso(int(run_from * 1000))})"
                if deadlines.queue is not None
                else f"of its start ({iso(info.start_time)})"
            )
            raise RayJobError(
                f"RayJob {job_id} did not finish within timeout_seconds={deadlines.run:.0f} {since}; "
                f"it was stopped\n{shown(tail, problem)}\n"
                f"status: {final} (timeout after {deadlines.run:.0f} s)"
            )
        time.sleep(POLL_SECONDS)


def _stop_for_capacity(
    api: JobsApi, job_id: str, deadlines: Deadlines, queue: QueueWatch, steps: StepCollector
) -> None:
    """Stops a job whose first worker group did not start before its queue deadline, once Ray
    shows it stopped, and raises saying it could not get its slices."""
    final = stop_and_confirm(api, job_id)
    info = api.call(f"asking for {job_id}", lambda client: client.get_job_info(job_id))
    tail, problem = read_tail(api, info, steps)
    raise RayJobError(
        f"RayJob {job_id} could not get capacity: its first worker group did not start within "
        f"queueTimeoutSeconds = {deadlines.queue:.0f} of the job's start ({iso(info.start_time)}), so it "
        f"was stopped. {queue.capacity_report()}\n{shown(tail, problem)}\n"
        f"status: {final} (queue timeout after {deadlines.queue:.0f} s)"
    )
