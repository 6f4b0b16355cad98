"""A Ray job as a Pulumi resource: `pulumi up` submits it and finishes when the job has finished.

A *completed* job is the resource: its outputs are the job's result (status, timings, steps,
loss, throughput). The submission id is derived from the stack and the job-defining inputs, so
an interrupted `pulumi up` resumes the same run instead of starting a second one.

Python dynamic providers run inside the engine's `pulumi-resource-pulumi-python` plugin: they
are pickled into state (this class is importable and holds no client or credential, so it is
pickled by reference), `custom_timeouts` never reach them (the job carries its own deadline),
and Cancel is a no-op. The engine streams that plugin's stderr to the user as info lines, which
is where progress goes (see ProgressReporter).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any, Mapping, TextIO

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

from workloads.job_metrics import parse_steps, summarize
from workloads.jobs_api import JobsApi, JobsApiUnreachable

# Inputs that define the job: changing one means another run (a new submission id). A failed
# run's retry is a new attempt of the same job: `<id>-2`, `<id>-3`, ...
JOB_DEFINING = ("stack", "entrypoint", "runtime_env", "metadata", "address", "gke")
DEFAULT_TIMEOUT_SECONDS = 6 * 60 * 60
LOG_TAIL_LINES = 50
POLL_SECONDS = 2.0
# How long the Jobs API may stay unreachable during a wait before the job is reported lost.
LOST_CONTACT_SECONDS = 30.0
PROGRESS_EVERY_SECONDS = 15.0
AGENT_WAIT_SECONDS = 60.0


class RayJobError(RuntimeError):
    pass


def _integral(value: Any) -> Any:
    """The engine sends every number as a float (8265 arrives as 8265.0): undo that for whole
    numbers, so an id computed here matches the one computed under the engine."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: _integral(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_integral(item) for item in value]
    return value


def submission_id(inputs: Mapping[str, Any]) -> str:
    """Deterministic: the same stack and job-defining inputs always name the same job."""
    defining = {key: _integral(inputs.get(key)) for key in JOB_DEFINING}
    digest = hashlib.sha256(json.dumps(defining, sort_keys=True, default=str).encode()).hexdigest()
    return f"pulumi-{inputs.get('stack', 'stack')}-{digest[:16]}"


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
    return datetime.fromtimestamp(milliseconds / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def _tail(log: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(log.splitlines()[-lines:])


class ProgressReporter:
    """Honest live progress as plain lines: steps done of the total, loss and an ETA from the
    measured step rate. Lines, not a redrawn bar: the engine shows the plugin's stderr line by
    line, and a terminal shows them the same way."""

    def __init__(self, job_id: str, total_steps: int | None, stream: TextIO | None = None,
                 every_seconds: float = PROGRESS_EVERY_SECONDS):
        self.job_id = job_id
        self.total_steps = total_steps
        self.stream = stream or sys.stderr
        self.every_seconds = every_seconds
        self._last_print = 0.0
        self._last_line = ""
        self._first_seen: tuple[float, int] | None = None

    def status(self, status: str) -> None:
        self._emit(f"RayJob {self.job_id}: {status}", force=True)

    def update(self, log: str) -> None:
        steps = parse_steps(log)
        if not steps:
            return
        latest = steps[-1]
        done = latest.step + 1
        now = time.monotonic()
        if self._first_seen is None:
            self._first_seen = (now, done)
        parts = [f"RayJob {self.job_id}: step {done}"]
        if self.total_steps:
            parts[0] += f"/{self.total_steps} ({100 * done // self.total_steps}%)"
        parts.append(f"loss {latest.loss:.3f}")
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


class RayJobProvider(ResourceProvider):
    """Create submits and waits; read reports; delete stops and removes. Stateless."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        entrypoint = news.get("entrypoint")
        if isinstance(entrypoint, str) and not entrypoint.strip():
            failures.append(CheckFailure("entrypoint", "entrypoint is empty; give the command to run"))
        has_address, has_gke = news.get("address") is not None, news.get("gke") is not None
        if has_address == has_gke:
            failures.append(CheckFailure(
                "address", "give exactly one of address (a Ray dashboard URL) or gke (the infra stack's cluster)"
            ))
        timeout = news.get("timeout_seconds")
        if isinstance(timeout, (int, float)) and timeout <= 0:
            failures.append(CheckFailure("timeout_seconds", f"timeout_seconds = {timeout} must be positive"))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # `__provider` is deliberately ignored: a new version of this code is not a new job.
        replaces = [key for key in JOB_DEFINING if olds.get(key) != news.get(key)]
        updates = [key for key in ("timeout_seconds", "total_steps", "checkpoint_dir") if olds.get(key) != news.get(key)]
        return DiffResult(changes=bool(replaces or updates), replaces=replaces)

    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = self._run(submission_id(props), props)
        return CreateResult(id_=outs["submission_id"], outs=outs)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only settings that do not define the job changed: keep every output of the run.
        return UpdateResult(outs={**olds, **{k: news.get(k) for k in ("timeout_seconds", "total_steps", "checkpoint_dir")}})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        api = JobsApi(props.get("address"), props.get("gke"))
        try:
            info = api.client().get_job_info(id_)
        except JobsApiUnreachable:
            raise
        except RuntimeError:
            # The job record is gone (deleted, or the cluster was replaced): so is the resource.
            return ReadResult(id_=None, outs={})
        return ReadResult(id_=id_, outs={**props, **self._info_outputs(info)})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        api = JobsApi(props.get("address"), props.get("gke"))
        try:
            client = api.client()
            status = client.get_job_status(id_)
        except (JobsApiUnreachable, ConnectionError) as error:
            print(f"RayJob {id_}: cluster unreachable, nothing to delete ({error})", file=sys.stderr, flush=True)
            return
        except RuntimeError:
            return  # the job record is already gone
        if not status.is_terminal():
            client.stop_job(id_)
            deadline = time.monotonic() + 60
            while not client.get_job_status(id_).is_terminal() and time.monotonic() < deadline:
                time.sleep(1)
        client.delete_job(id_)

    # ------------------------------------------------------------------ helpers

    def _run(self, job_id: str, props: dict[str, Any]) -> dict[str, Any]:
        api = JobsApi(props.get("address"), props.get("gke"))
        api.check_reachable()
        client = api.client()
        latest_id, existing = self._latest_attempt(client, job_id)
        if existing in ("FAILED", "STOPPED"):
            # A new attempt under a new id: Ray may still be finalizing the old one, and reusing
            # its id races with that (its supervisor actor has the same name). The failed
            # record stays as history.
            job_id = _next_attempt(job_id, latest_id)
            progress = ProgressReporter(job_id, _integral(props.get("total_steps")))
            progress.status(f"the previous attempt {latest_id} ended {existing}; submitting {job_id}")
            existing = None
        else:
            job_id = latest_id
            progress = ProgressReporter(job_id, _integral(props.get("total_steps")))
        if existing is None:
            self._submit(client, job_id, props)
            progress.status(f"submitted to {api.describe()}")
        else:
            progress.status(f"adopting the existing {existing} job with this id")
        status = self._wait(api, job_id, props, progress)
        client = api.client()
        log = client.get_job_logs(job_id)
        info = client.get_job_info(job_id)
        if status != "SUCCEEDED":
            # Ray's message repeats the log; its first line is the reason.
            reason = (info.message or "no message").splitlines()[0]
            raise RayJobError(
                f"RayJob {job_id} ended {status}.\n"
                f"--- last {LOG_TAIL_LINES} log lines ---\n{_tail(log)}\n"
                f"status: {status}; message: {reason}"
            )
        progress.status("SUCCEEDED")
        return {**props, **self._info_outputs(info), **summarize(log),
                "dashboard_url": None if props.get("gke") else api.address}

    @staticmethod
    def _submit(client, job_id: str, props: dict[str, Any]) -> None:
        """Submits; a head that has just started answers "No available agent" for a few
        seconds until its job agent registers, so that one answer is retried briefly."""
        deadline = time.monotonic() + AGENT_WAIT_SECONDS
        while True:
            try:
                client.submit_job(
                    entrypoint=props["entrypoint"],
                    submission_id=job_id,
                    runtime_env=props.get("runtime_env") or None,
                    metadata={str(k): str(v) for k, v in _integral(props.get("metadata") or {}).items()} or None,
                )
                return
            except RuntimeError as error:
                if "No available agent" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(1)

    @staticmethod
    def _latest_attempt(client, base_id: str) -> tuple[str, str | None]:
        """The newest attempt of this job (`<id>`, `<id>-2`, ...) and its status, if any."""
        attempts = {
            job.submission_id: str(job.status)
            for job in client.list_jobs()
            if job.submission_id and _attempt_number(base_id, job.submission_id)
        }
        if not attempts:
            return base_id, None
        latest = max(attempts, key=lambda job_id: _attempt_number(base_id, job_id))
        return latest, attempts[latest]

    def _wait(self, api: JobsApi, job_id: str, props: dict[str, Any], progress: ProgressReporter) -> str:
        timeout = float(props.get("timeout_seconds") or DEFAULT_TIMEOUT_SECONDS)
        deadline = time.monotonic() + timeout
        unreachable_since: float | None = None
        last_logs_at = 0.0
        while True:
            try:
                client = api.client()
                status = str(client.get_job_status(job_id))
                unreachable_since = None
                if time.monotonic() - last_logs_at >= PROGRESS_EVERY_SECONDS:
                    progress.update(client.get_job_logs(job_id))
                    last_logs_at = time.monotonic()
            except (ConnectionError, OSError, JobsApiUnreachable) as error:
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > LOST_CONTACT_SECONDS:
                    raise RayJobError(
                        f"lost contact with the Ray Jobs API at {api.describe()} while waiting for "
                        f"RayJob {job_id} ({error.__class__.__name__}); the cluster or its head may be "
                        f"gone. {api.how_to_reach()}; then run `pulumi up` again to resume or resubmit"
                    ) from None
                time.sleep(POLL_SECONDS)
                continue
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                return status
            if time.monotonic() > deadline:
                client.stop_job(job_id)
                stop_deadline = time.monotonic() + 60
                while not client.get_job_status(job_id).is_terminal() and time.monotonic() < stop_deadline:
                    time.sleep(1)
                log = client.get_job_logs(job_id)
                raise RayJobError(
                    f"RayJob {job_id} did not finish within timeout_seconds={timeout:.0f}; it was stopped\n"
                    f"--- last {LOG_TAIL_LINES} log lines ---\n{_tail(log)}\n"
                    f"status: STOPPED (timeout after {timeout:.0f} s)"
                )
            time.sleep(POLL_SECONDS)

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
    """`pulumi-python:dynamic/ray:RayJob`: a Ray job that exists once it has completed."""

    submission_id: pulumi.Output[str]
    status: pulumi.Output[str]
    start_time: pulumi.Output[str]
    end_time: pulumi.Output[str]
    duration_seconds: pulumi.Output[float]
    steps_completed: pulumi.Output[int]
    final_loss: pulumi.Output[float]
    tokens_per_second_per_device: pulumi.Output[float]
    tflops_per_device: pulumi.Output[float]
    checkpoint_dir: pulumi.Output[str]
    dashboard_url: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        entrypoint: pulumi.Input[str],
        address: pulumi.Input[str] | None = None,
        gke: pulumi.Input[Mapping[str, Any]] | None = None,
        runtime_env: pulumi.Input[Mapping[str, Any]] | None = None,
        metadata: pulumi.Input[Mapping[str, str]] | None = None,
        timeout_seconds: pulumi.Input[int] = DEFAULT_TIMEOUT_SECONDS,
        total_steps: pulumi.Input[int] | None = None,
        checkpoint_dir: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        outputs = dict.fromkeys(
            ("submission_id", "status", "message", "start_time", "end_time", "duration_seconds",
             "steps_completed", "final_loss", "tokens_per_second_per_device", "tflops_per_device",
             "dashboard_url")
        )
        super().__init__(
            RayJobProvider(),
            name,
            {
                "stack": pulumi.get_stack(),
                "entrypoint": entrypoint,
                "address": address,
                "gke": gke,
                "runtime_env": runtime_env,
                "metadata": metadata,
                "timeout_seconds": timeout_seconds,
                "total_steps": total_steps,
                "checkpoint_dir": checkpoint_dir,
                **outputs,
            },
            opts,
        )
