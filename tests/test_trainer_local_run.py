"""Real MaxText runs of the tiny preset through a local Ray cluster on CPU, and a real fault: the
Ray Train worker SIGKILLed with no retry left. (A worker SIGKILLed after a checkpoint, and the run
resuming on exactly its data, is tests/test_data_resume.py's.)"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from domain.training.job import JobSpec, resolve_job
from tests.support.provider_run import ProviderRun
from tests.support.trainer_logs import STEP_LINE, committed_steps, the_worker
from workloads.ray_job.record import RayJobError

pytestmark = pytest.mark.slow


# Slower steps than the tiny preset's (~0.5 s each on 2 cores) so a fault can land mid-run.
FAULT_RUN_OVERRIDES = {
    "steps": 30,
    "checkpoint_period": 5,
    "per_device_batch_size": 4,
    "max_target_length": 256,
    "base_emb_dim": 256,
    "base_num_decoder_layers": 4,
    "base_mlp_dim": 1024,
    "base_num_query_heads": 8,
    "base_num_kv_heads": 8,
    "head_dim": 32,
    "vocab_size": 1024,
}


def submit(head, job: JobSpec) -> tuple[JobSubmissionClient, str]:
    client = JobSubmissionClient(head.address)
    job_id = client.submit_job(entrypoint=job.entrypoint())
    return client, job_id


def wait(client: JobSubmissionClient, job_id: str, timeout: float = 420) -> JobStatus:
    deadline = time.monotonic() + timeout
    while not (status := client.get_job_status(job_id)).is_terminal():
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            pytest.fail(f"job {job_id} still {status} after {timeout} s:\n{client.get_job_logs(job_id)[-3000:]}")
        time.sleep(1)
    return status


def steps_and_losses(logs: str) -> list[tuple[int, float]]:
    return [(int(step), float(loss)) for step, loss in STEP_LINE.findall(logs)]


def test_tiny_preset_trains_logs_finite_losses_and_checkpoints(local_ray_head, tmp_path):
    job = resolve_job("tiny-cpu", run_name="tiny-run", checkpoint_root=str(tmp_path))
    client, job_id = submit(local_ray_head, job)
    status = wait(client, job_id)
    logs = client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    steps = steps_and_losses(logs)
    total = int(job.maxtext_overrides["steps"])
    assert [step for step, _ in steps] == list(range(total))
    assert all(math.isfinite(loss) for _, loss in steps)
    assert steps[-1][1] < steps[0][1], "the loss should fall on the synthetic data"
    # checkpoint_period=2 and a final save: Orbax step directories, each with its state.
    assert committed_steps(job) == [0, 2, 4, total - 1]
    assert any((Path(job.run_directory) / "checkpoints" / "4").iterdir())


def kill_the_worker(head) -> None:
    os.kill(the_worker(head), signal.SIGKILL)


def test_more_worker_errors_than_max_failures_fail_the_job_naming_the_budget(local_ray_head, tmp_path):
    job = resolve_job(
        "tiny-cpu",
        run_name="no-retries",
        checkpoint_root=str(tmp_path),
        elastic=True,
        max_failures=0,
        overrides=FAULT_RUN_OVERRIDES,
    )
    run = ProviderRun(local_ray_head, job).start()
    run.wait_for(lambda: max(run.record().steps, default=-1) >= 2, "step 2", 300)
    kill_the_worker(local_ray_head)
    run.join(timeout=300)
    assert isinstance(run.error, RayJobError), run.outs
    headline = str(run.error).splitlines()[0]
    assert headline.startswith(
        f"RayJob {run.job_id} ended FAILED: training failed: worker errors used up maxFailures = 0"
    )
    assert "rank 0:" in headline
