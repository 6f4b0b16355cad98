"""A Ray job as a Pulumi resource: `pulumi up` submits it and finishes when the job has finished.

A *completed* job is the resource: its outputs are the job's result (status, timings, steps,
loss, throughput). A small `RayJobGuard`, registered before the job, is in the state from the
moment of submission, so `pulumi destroy` stops a job whose `pulumi up` was interrupted (the job
resource itself enters the state only when the job has finished).

Python dynamic providers run inside the engine's `pulumi-resource-pulumi-python` plugin: they
are pickled into state, by reference (these classes are importable and hold no client or
credential): state holds the module path `workloads.ray_job` and the class name, and the plugin
unpickles them from there for every stack written so far, so RayJobProvider and
RayJobGuardProvider stay in this package's own module. `custom_timeouts` never reach them (the
job carries its own deadline), and Cancel is a no-op. The engine streams that plugin's stderr to
the user as info lines, which is where progress goes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

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

from domain.ray.queueing import WORKER_GROUP_START_TIMEOUT_ENV
from domain.ray.resource_types import MODULE, RAY_JOB_GUARD_NAME, RAY_JOB_NAME
from domain.reports.run_page import outputs_of
from domain.setting import camel_case
from domain.training.job_log import StepCollector, tensorboard_directory
from domain.training.run_scalars import Scalar, estimate_scalars
from domain.training.run_series import RunSeries
from workloads.jobs_api import JobsApi
from workloads.jobs_api.errors import ErrorKind, JobsApiError
from workloads.ray_job import guard
from workloads.ray_job.bucket_scalars import BucketScalars
from workloads.ray_job.migration import (
    LEGACY_JOB_ID,
    identity_unrecorded,
    legacy_run,
    undigested_change,
    updatable_unrecorded,
)
from workloads.ray_job.progress import LOG_TAIL_LINES, ProgressReporter, read_ended_log, read_whole_log, shown
from workloads.ray_job.record import (
    EXPORTED,
    IDENTITY,
    INPUTS,
    JOB_DEFINING,
    OUTPUTS,
    UPDATABLE,
    JobInfo,
    JobRequest,
    JobResult,
    RayJobError,
    attempt_number,
    latest_attempt,
    next_attempt,
)
from workloads.ray_job.report import draw_finished, header_of, page_path, undrawn, write_run_page
from workloads.ray_job.teardown import stop_and_confirm, teardown
from workloads.ray_job.tensorboard import ScalarWriter
from workloads.ray_job.wait import Deadlines, RunClock, until_ended

# How long a submission retries a head whose job agent has not registered yet; Ray answers
# that with this text (ray/dashboard/modules/job/job_head.py, submit_job).
AGENT_WAIT_SECONDS = 60.0
NO_AGENT_ANSWER = "No available agent to submit job"


def submitted_runtime_env(job: JobRequest) -> dict[str, Any] | None:
    """The runtime env the job is submitted with: the stack's, plus Ray Train's worker-group
    start timeout set to the queue deadline (domain/ray/queueing.py says why). Added at submission
    only, so the deadline stays a setting that changes without a new run (it is not part of the
    submission id); a job adopted after a change keeps the value it was submitted with."""
    runtime_env = dict(job.runtime_env or {})
    queue = job.queue_timeout_seconds
    if queue is not None:
        runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), WORKER_GROUP_START_TIMEOUT_ENV: str(queue)}
    return runtime_env or None


def _api(job: JobRequest) -> JobsApi:
    return JobsApi(job.address, job.gke)


def _scalar_writer(job: JobRequest, logdir: str | None, shares_files: bool) -> ScalarWriter | BucketScalars | None:
    """Where the run's scalars go: its TensorBoard directory on this machine, or on GKE the
    checkpoint bucket behind it (uploaded at `finish`); None for a head elsewhere."""
    if logdir is None:
        return None
    if shares_files:
        return ScalarWriter(logdir)
    return BucketScalars(logdir, job.checkpoint_bucket, job.gke) if job.gke is not None else None


class RayJobProvider(ResourceProvider):
    """Create submits and waits; read reports; delete stops and removes. Stateless."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        job = JobRequest.from_props(news)
        if isinstance(job.entrypoint, str) and not job.entrypoint.strip():
            failures.append(CheckFailure("entrypoint", "entrypoint is empty; give the command to run"))
        has_address, has_gke = job.address is not None, job.gke is not None or "gke" in job.unknown
        if has_address == has_gke:
            failures.append(
                CheckFailure(
                    "address", "give exactly one of address (a Ray dashboard URL) or gke (the infra stack's cluster)"
                )
            )
        for deadline in ("timeout_seconds", "queue_timeout_seconds"):
            seconds = getattr(job, deadline)
            if isinstance(seconds, (int, float)) and seconds <= 0:
                failures.append(CheckFailure(deadline, f"{deadline} = {seconds} must be positive"))
        return CheckResult(news, failures)

    def diff(self, _id: str, old_props: dict[str, Any], new_props: dict[str, Any]) -> DiffResult:
        # `__provider` is deliberately ignored: a new version of this code is not a new job.
        olds, news = JobRequest.from_props(old_props), JobRequest.from_props(new_props)
        digests, new_digests = olds.input_digests, news.digests()

        def changed(key: str) -> bool:
            if key in news.unknown:
                return True  # preview cannot tell yet: show the replacement it may be
            if identity_unrecorded(key, olds):
                return False
            if digests is None:  # state written before digests were kept
                return undigested_change(key, olds, news)
            return digests.get(key) != new_digests[key]

        replaces = [key for key in JOB_DEFINING if changed(key)]
        updates = [
            key
            for key in UPDATABLE
            if (key in news.unknown or getattr(olds, key) != getattr(news, key)) and not updatable_unrecorded(key, olds)
        ]
        return DiffResult(changes=bool(replaces or updates or undrawn(old_props)), replaces=replaces)

    def create(self, props: dict[str, Any]) -> CreateResult:
        job = JobRequest.from_props(props)
        with _api(job) as api:
            result = self._run(api, job.submission_id(), job)
        # The result beside what state keeps of the inputs (checkpoint_dir and input_digests are both).
        return CreateResult(id_=result.submission_id, outs={**job.to_props(), **result.props()})

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only settings that do not define the job changed: keep every output of the run.
        job = JobRequest.from_props(news)
        outs = {**olds, **job.props(UPDATABLE)}
        if undrawn(olds):
            # A run recorded before runs had pages: drawn now from its log, not run again.
            page = draw_finished(id_, job, _api(job))
            outs.update(report_path=page, page_written=page is not None)
        return UpdateResult(outs=outs)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        with _api(JobRequest.from_props(props)) as api:
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
        return ReadResult(id_=id_, outs={**props, **JobInfo.of(info).props()})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        with _api(JobRequest.from_props(props)) as api:

            def stop_then_delete() -> None:
                stop_and_confirm(api, id_)
                api.call(f"deleting the record of {id_}", lambda client: client.delete_job(id_))

            teardown(api, id_, stop_then_delete)

    # ------------------------------------------------------------------ helpers

    # The wait for the job to end, within its deadlines (workloads/ray_job/wait.py).
    _wait = staticmethod(until_ended)

    def _run(self, api: JobsApi, job_id: str, job: JobRequest) -> JobResult:
        clock = RunClock(api.check_reachable())
        jobs = api.call("listing jobs", lambda client: client.list_jobs())
        latest_id, existing = latest_attempt(jobs, job_id)
        if existing is None and (legacy := legacy_run(jobs, job)) is not None:
            latest_id, existing = legacy
        total_steps = job.total_steps
        if existing in ("FAILED", "STOPPED"):
            # A new attempt under a new id: Ray may still be finalizing the old one, and reusing
            # its id races with that (its supervisor actor has the same name). The failed
            # record stays as history.
            job_id = next_attempt(job_id, latest_id) if attempt_number(job_id, latest_id) else job_id
            progress = ProgressReporter(job_id, total_steps)
            progress.status(f"the previous attempt {latest_id} ended {existing}; submitting {job_id}")
            existing = None
        else:
            job_id = latest_id
            progress = ProgressReporter(job_id, total_steps)
        if existing is None:
            self._submit(api, job_id, job)
            progress.status(f"submitted to {api.describe()}")
        else:
            progress.status(f"adopting the existing {existing} job with this id")
        steps = StepCollector()
        info = self._wait(api, job_id, Deadlines.of(job), progress, steps, clock)
        status = str(info.status)
        page = page_path(job_id, job.checkpoint_dir, api.shares_files())
        series = RunSeries()
        if status != "SUCCEEDED":
            # Ray's message repeats the log; its first line is the reason. The trainer says which
            # retry budget ran out, when one did (its last word: the tail has it).
            # Read once, whole: the page shows what it reached, the error its last lines.
            read, goodput, log_problem = read_ended_log(api, info, steps, series.add, tail_lines=LOG_TAIL_LINES)
            reason = (info.message or "no message").splitlines()[0]
            failure = read.record.failure
            headline = f"RayJob {job_id} ended {status}" + (f": {failure}" if failure else "")
            header = header_of(JobInfo.of(info), job.total_steps, failure=f"{headline} ({reason})")
            outputs = outputs_of(read.steps.summary(), goodput)
            page_problem = write_run_page(page, header, outputs, series, job.estimate)
            where = f"the run's page: {page}" if page_problem is None else f"warning: {page_problem}"
            raise RayJobError(f"{headline}.\n{where}\n{shown(read, log_problem)}\nstatus: {status}; message: {reason}")
        # The run's scalars, from its log, beside its checkpoints: on this machine for a head
        # reached here, in the checkpoint bucket on GKE. MaxText writes its own on TPU workers only.
        logdir = tensorboard_directory(job.checkpoint_dir) if job.checkpoint_dir else None
        writer = _scalar_writer(job, logdir, api.shares_files())

        def scalars(batch: list[Scalar]) -> None:
            series.add(batch)
            if writer is not None:
                writer.add(batch)
                if job.estimate is not None:
                    writer.add(estimate_scalars(batch, job.estimate))

        steps, goodput, log_problem = read_whole_log(api, info, steps, scalars)
        if log_problem is not None:
            progress.status(log_problem)
        if writer is not None:
            writer.finish(goodput["start_phases"])
            if writer.problem is not None:
                progress.status(f"warning: {writer.problem}")
        result = JobResult(
            **JobInfo.of(info).props(),
            **steps.summary(),
            **goodput,
            checkpoint_dir=job.checkpoint_dir,
            # On GKE MaxText's logs (its TPU workers write them) and the product's `job-log` run
            # beside them in the bucket; on a local head (whose CPU workers run MaxText without
            # Google Cloud, DECOUPLE_GCLOUD, where its writer is a no-op) the product's scalars
            # where it wrote them.
            tensorboard_dir=logdir if job.gke or (writer is not None and writer.wrote) else None,
            report_path=str(page),
            page_written=True,
            dashboard_url=None if job.gke else api.address,
            input_digests=job.digests(),
        )
        header = header_of(result, job.total_steps)
        page_problem = write_run_page(page, header, (result, result, result), series, job.estimate)
        if page_problem is not None:
            progress.status(f"warning: {page_problem}")
            result = dataclasses.replace(result, report_path=None, page_written=False)
        progress.started(result.start_phases)
        if result.diverged:
            progress.status("SUCCEEDED, but the run DIVERGED: its last loss is not a finite number")
        else:
            progress.status("SUCCEEDED")
        if result.report_path is not None:
            progress.status(f"the run's page: {result.report_path}")
        return result

    @staticmethod
    def _submit(api: JobsApi, job_id: str, job: JobRequest) -> None:
        """Submits; a head that has just started answers "No available agent" for a few
        seconds until its job agent registers, so that one answer is retried briefly."""
        deadline = time.monotonic() + AGENT_WAIT_SECONDS
        metadata = {str(k): str(v) for k, v in (job.metadata or {}).items()} or None
        runtime_env = submitted_runtime_env(job)
        while True:
            try:
                api.call(
                    f"submitting {job_id}",
                    lambda client: client.submit_job(
                        entrypoint=job.entrypoint,
                        submission_id=job_id,
                        runtime_env=runtime_env,
                        metadata=metadata,
                    ),
                )
                return
            except JobsApiError as error:
                if NO_AGENT_ANSWER not in str(error):
                    raise
                if time.monotonic() > deadline:
                    raise JobsApiError(
                        error.kind,
                        f"submitting {job_id} at {api.describe()}: the Ray head answers, but its job agent "
                        f'did not register within {AGENT_WAIT_SECONDS:.0f} s ("{NO_AGENT_ANSWER}" to every try), '
                        "so no job can start there; see the head's dashboard_agent.log "
                        "(on GKE: the head pod's /tmp/ray/session_latest/logs/)",
                        error.status,
                    ) from None
                time.sleep(1)


class RayJob(Resource, module=MODULE, name=RAY_JOB_NAME):
    """`pulumi-python:dynamic/ray:RayJob`: a Ray job that exists once it has completed.

    `inputs` takes the names in INPUTS, IDENTITY (whose job it is) among them; the outputs are
    attributes named as in OUTPUTS, and `stack_outputs()` gives the exported ones."""

    def __init__(self, name: str, inputs: Mapping[str, pulumi.Input[Any]], opts: pulumi.ResourceOptions | None = None):
        unknown = sorted(set(inputs) - set(INPUTS))
        if unknown:
            raise ValueError(f"RayJob {name}: unknown inputs {unknown}; the inputs are {list(INPUTS)}")
        missing = [key for key in IDENTITY if key not in inputs]
        if missing:
            raise ValueError(f"RayJob {name}: no {', '.join(missing)}; the job's inputs name whose job it is")
        placeholders = dict.fromkeys(output for output in OUTPUTS if output not in INPUTS)
        super().__init__(RayJobProvider(), name, {**placeholders, **inputs}, opts)

    def stack_outputs(self) -> dict[str, pulumi.Output[Any]]:
        return {camel_case(output): getattr(self, output) for output in EXPORTED}


class RayJobGuardProvider(ResourceProvider):
    """Holds a job's base submission id from before the submission; its delete stops every
    attempt of that job that is still running (workloads/ray_job/guard.py)."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return guard.create(props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return guard.diff(olds, news)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return guard.update(olds, news)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        guard.delete(props)


class RayJobGuard(Resource, module=MODULE, name=RAY_JOB_GUARD_NAME):
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
