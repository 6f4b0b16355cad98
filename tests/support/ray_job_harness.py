"""Helpers the RayJob provider's tests share: a job's inputs against a head (a fake trainer that
prints three steps), a Jobs API client and a wait on a job's status; a fake Jobs API whose clock
is off this machine's, and a timed create; what the first releases wrote for a job (issue 19)."""

from __future__ import annotations

import email.utils
import json
import tempfile
import threading
import time

from ray.job_submission import JobSubmissionClient

from tests.support.fake_jobs_api import FakeHttpServer
from workloads.ray_job import RayJobProvider
from workloads.ray_job.record import UPDATABLE

STEP = "completed step: {step}, seconds: 0.5, TFLOP/s/device: 2.0, Tokens/s/device: {tokens}, total_weights: 64, loss: {loss}"
FAKE_TRAINER = (
    'python -c "'
    + "; ".join(f"print('{STEP.format(step=step, tokens=100.0 * (step + 1), loss=3.0 - step)}')" for step in range(3))
    + '"'
)


# Each job's run directory, under one removed when the tests' process ends: the provider writes a
# run's TensorBoard scalars there when the head is on this machine.
RUNS = tempfile.TemporaryDirectory(prefix="ray-job-tests-")


def inputs(head, entrypoint: str = FAKE_TRAINER, **overrides) -> dict:
    job = str(time.monotonic_ns())
    props = {
        "stack": "test",
        "entrypoint": entrypoint,
        "address": head.address,
        "gke": None,
        "runtime_env": None,
        "metadata": {"test": job},  # a new job id per test
        "timeout_seconds": 120,
        "total_steps": 3,
        "checkpoint_dir": f"{RUNS.name}/{job}",
    }
    props.update(overrides)
    return props


def client(head) -> JobSubmissionClient:
    return JobSubmissionClient(head.address, headers=head.auth_headers)


def wait_for(ray: JobSubmissionClient, job_id: str, wanted, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while ray.get_job_status(job_id) not in wanted:
        assert time.monotonic() < deadline, f"{job_id} never reached {wanted}"
        time.sleep(0.2)


# What the first releases wrote: `inputs` -> the id and the digests they computed (commit
# 29d9881's submission_id and input_digests, run on these inputs).
FIRST_RELEASE_INPUTS = {
    "stack": "dev",
    "entrypoint": "python -m trainer.x --job {}",
    "runtime_env": None,
    "metadata": {"preset": "tiny-cpu", "run_name": "tiny-cpu-dev"},
    "address": "http://127.0.0.1:8265",
    "gke": None,
    "timeout_seconds": 60,
    "total_steps": 6,
    "checkpoint_dir": "/tmp/c",
}
FIRST_RELEASE_ID = "pulumi-dev-43dc199e4507fe01"
FIRST_RELEASE_DIGESTS = {
    "stack": "8a17302d4ffff29e",
    "entrypoint": "19b9b7e080e492d6",
    "runtime_env": "74234e98afe7498f",
    "metadata": "72b3d3bee35fd159",
    "address": "39308f73cd7cc34e",
    "gke": "74234e98afe7498f",
}
# The same stack now: the program adds the organization and project.
NOW = {**FIRST_RELEASE_INPUTS, "organization": "acme", "project": "maxtext-tpu-workloads"}


def first_release_state(**changes) -> dict:
    """A RayJob's state (its outputs) as the first releases wrote it, for a finished job."""
    return {
        **{
            key: FIRST_RELEASE_INPUTS[key]
            for key in ("stack", "address", "gke", *UPDATABLE)
            if key in FIRST_RELEASE_INPUTS  # inputs added since were not in the first releases' state
        },
        "input_digests": FIRST_RELEASE_DIGESTS,
        "submission_id": FIRST_RELEASE_ID,
        "status": "SUCCEEDED",
        **changes,
    }


class ClockedJobsApi(FakeHttpServer):
    """A Ray Jobs API on 127.0.0.1 whose clock is `offset` seconds off this machine's: its Date
    headers and its jobs' start and end times read that clock. A job runs until it is stopped."""

    def __init__(self, offset: float):
        self.offset = offset
        self.jobs: dict[str, dict] = {}
        super().__init__(self._answer, content_type="application/json")
        server_clock = self.cluster_time
        self.server.RequestHandlerClass.date_time_string = lambda _handler, timestamp=None: email.utils.formatdate(
            server_clock(), usegmt=True
        )

    def cluster_time(self) -> float:
        return time.time() + self.offset

    def add_job(self, job_id: str, started_seconds_ago: float = 0.0) -> None:
        self.jobs[job_id] = {
            "type": "SUBMISSION",
            "submission_id": job_id,
            "status": "RUNNING",
            "entrypoint": "train",
            "start_time": int((self.cluster_time() - started_seconds_ago) * 1000),
        }

    def _answer(self, method: str, path: str) -> tuple[int, bytes]:
        parts = path.split("?")[0].strip("/").split("/")  # api, jobs, <id>, stop
        if parts == ["api", "version"]:
            return 200, json.dumps({"ray_version": "2.60.0", "version": "4", "ray_commit": "x"}).encode()
        if parts == ["api", "jobs"]:
            assert method == "GET", "jobs are added with add_job"
            return 200, json.dumps(list(self.jobs.values())).encode()
        job = self.jobs.get(parts[2]) if len(parts) >= 3 else None
        if job is None:
            return 404, b"no such job"
        if parts[3:] == ["stop"]:
            job.update(status="STOPPED", end_time=int(self.cluster_time() * 1000))
            return 200, json.dumps({"stopped": True}).encode()
        return 200, json.dumps(job).encode()


# How late after its deadline ClockedJobsApi's job may be stopped: the cluster's Date header has
# whole seconds (up to 1 s late), then a poll, the stop and its confirmation, with the fake API's
# and the wait's threads sharing 2 cores with other work (1.2 to 2.1 s late for a 3 s deadline,
# measured with a CPU-bound process beside the tests; 4 s allowed raced that, issue 33). A wait
# that compared the two clocks would be off by their skew, 600 s in these tests, not seconds.
LATE_STOP_SECONDS = 8.0


def timed_create(props: dict, within: float) -> tuple[BaseException | None, float]:
    """Runs create in a thread; (its error, seconds it took). Fails the test if it takes longer
    than `within` (a job that never times out)."""
    outcome: dict = {}

    def run() -> None:
        started = time.monotonic()
        try:
            RayJobProvider().create(props)
        except BaseException as error:  # the test asserts on it
            outcome["error"] = error
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), f"create did not time the job out within {within} s"
    return outcome.get("error"), outcome["seconds"]
