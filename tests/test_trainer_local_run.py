"""Real MaxText runs of the tiny preset through a local Ray cluster on CPU, and a real fault:
the Ray Train worker SIGKILLed after a checkpoint has committed."""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient
from ray.util.state import list_actors

from domain.training.goodput import OUTPUTS as GOODPUT_OUTPUTS
from domain.training.job import JobSpec, resolve_job
from tests.support.provider_run import ProviderRun
from workloads.ray_job import RayJobError

pytestmark = pytest.mark.slow

STEP_LINE = re.compile(r"completed step: (\d+), seconds: [\d.]+, .*?loss: ([-\d.naninf]+)")
RESTORE_LINE = re.compile(r"restoring from this run's directory step (\d+)")

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


def committed_steps(job: JobSpec) -> list[int]:
    """Orbax writes into a temporary directory and renames it to the step when it commits."""
    directory = Path(job.run_directory) / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(entry.name) for entry in directory.iterdir() if entry.name.isdigit())


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


def the_worker(head) -> int:
    """The pid of the one Ray Train worker, a process of the Ray head this session started."""
    [worker] = list_actors(
        address=head.address,
        filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
    )
    return worker.pid


def kill_the_worker(head) -> None:
    os.kill(the_worker(head), signal.SIGKILL)


def test_worker_killed_after_a_checkpoint_resumes_from_it(local_ray_head, tmp_path):
    """No notice: the run resumes from the last periodic checkpoint, and the outputs count the
    failure and every step run twice."""
    overrides = {**FAULT_RUN_OVERRIDES, "checkpoint_period": 10}
    job = resolve_job(
        "tiny-cpu",
        run_name="fault-run",
        checkpoint_root=str(tmp_path),
        elastic=True,
        overrides=overrides,
    )
    total = overrides["steps"]
    run = ProviderRun(local_ray_head, job).start()
    run.wait_for(lambda: 10 in committed_steps(job), "the checkpoint at step 10", 300)
    worker = the_worker(local_ray_head)  # found first: the kill follows the condition at once
    # Three steps logged past the latest commit (the log may lag the worker, the checkpoints do
    # not), so the restart has steps to recompute however fast or slow the steps are.
    run.wait_for(
        lambda: max(run.record().steps, default=-1) >= max(committed_steps(job)) + 3,
        "three steps past the latest checkpoint",
        300,
    )
    os.kill(worker, signal.SIGKILL)
    committed_before_kill = max(committed_steps(job))
    run.join(timeout=420)

    logs = run.log()
    assert run.error is None, run.error
    assert run.outs is not None and run.outs["status"] == "SUCCEEDED"
    print("outputs:", {key: run.outs[key] for key in (*GOODPUT_OUTPUTS, "duration_seconds")})  # shown with -s
    restored = [int(step) for step in RESTORE_LINE.findall(logs)]
    assert restored and restored[-1] >= committed_before_kill, logs[-3000:]
    counts = Counter(step for step, _ in steps_and_losses(logs))
    assert max(counts) == total - 1, "the run must reach the configured total"
    assert all(counts[step] == 1 for step in range(restored[-1])), counts
    assert all(counts[step] <= 2 for step in range(restored[-1], total)), counts
    assert set(counts) == set(range(total))
    # The goodput outputs, against MaxText's own step lines.
    assert (run.outs["restarts"], run.outs["failures"], run.outs["preemptions"]) == (1, 1, 0)
    assert run.outs["steps_recomputed"] == sum(count - 1 for count in counts.values()) >= 3
    assert run.outs["seconds_lost_to_restarts"] > 0
    assert 0 < run.outs["goodput_percent"] < 100


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
