"""A training job run through the RayJob provider on a local head, in a thread, so a test can
inject faults while `create` waits, then read the outputs (or the error) `pulumi up` would get."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ray.job_submission import JobSubmissionClient

from domain.training.goodput import RunRecord
from domain.training.job import JobSpec
from domain.training.job_log import JobLog
from workloads.ray_job import RayJobProvider
from workloads.ray_job.record import submission_id


class ProviderRun:
    def __init__(self, head, job: JobSpec, timeout_seconds: int = 900):
        self.props = {
            "stack": "test",
            "address": head.address,
            "gke": None,
            "entrypoint": job.entrypoint(),
            "runtime_env": None,
            "metadata": None,
            "timeout_seconds": timeout_seconds,
            "total_steps": job.total_steps,
            "checkpoint_dir": job.run_directory,
        }
        self.job_id = submission_id(self.props)
        self.client = JobSubmissionClient(head.address)
        self.outs: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._create, name=f"create {self.job_id}")

    def _create(self) -> None:
        try:
            self.outs = RayJobProvider().create(self.props).outs
        except BaseException as error:  # the test asserts on it
            self.error = error

    def start(self) -> ProviderRun:
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"create() did not return within {timeout} s:\n{self.log()[-3000:]}"

    def log(self) -> str:
        try:
            return self.client.get_job_logs(self.job_id)
        except RuntimeError:  # not submitted yet
            return ""

    def record(self) -> RunRecord:
        read = JobLog()
        read.add_text(self.log())
        return read.record

    def wait_for(self, condition: Callable[[], Any], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self._thread.is_alive(), f"the job ended while waiting for {what}: {self.error or self.outs}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{self.log()[-3000:]}"
            time.sleep(0.5)
