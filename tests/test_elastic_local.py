"""Elastic training through a Spot preemption, on a real multi-node Ray cluster on this machine:
a head and a second node, each its own `ray start` (one CPU each, so one worker each), two JAX
processes training one MaxText model over gloo.

Mid-run the second node gets what GKE gives a Ray worker pod whose Spot VM is reclaimed
(docs/spot.md): SIGTERM to its `ray start`, which drains the node with the preemption reason and
ends it at the drain's deadline. The trainer must save at the notice, the job must shrink to the
one worker left and resume from the step saved at the notice, grow back to two when a node
returns, and succeed, with `maxFailures = 0` untouched. The job runs through the RayJob provider,
so its goodput outputs are checked against what the log and the checkpoints say happened.

Ray binds every interface while nodes may join (see LocalRayHead), behind the head's token.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

from domain.goodput import OUTPUTS as GOODPUT_OUTPUTS
from domain.goodput import RunRecord
from domain.job import JobSpec, resolve_job
from tests.support.provider_run import ProviderRun
from workloads import ray_job
from workloads.local_ray import LocalRayHead, LocalRayNode

pytestmark = pytest.mark.slow

# Two layers of the fault-run model: slow enough (~1-2 s a step on 2 cores) to drain mid-run.
OVERRIDES = {
    "steps": 100,
    "checkpoint_period": 25,
    "per_device_batch_size": 2,
    "max_target_length": 256,
    "base_emb_dim": 256,
    "base_num_decoder_layers": 2,
    "base_mlp_dim": 1024,
    "base_num_query_heads": 8,
    "base_num_kv_heads": 8,
    "head_dim": 32,
    "vocab_size": 1024,
}
DRAIN_AT_STEP = 6
# The node's drain: time for the notice (Ray Train polls every second) and a save at the next step.
DRAIN_SECONDS = 20
RESTORE_LINE = re.compile(r"restoring from this run's directory step (\d+)")


def committed_steps(job: JobSpec) -> set[int]:
    directory = Path(job.run_directory) / "checkpoints"
    return {int(entry.name) for entry in directory.iterdir() if entry.name.isdigit()} if directory.is_dir() else set()


def test_a_preempted_node_saves_at_the_notice_shrinks_resumes_grows_back_and_succeeds(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_job, "POLL_SECONDS", 0.5)
    job = resolve_job(
        "tiny-cpu",
        run_name="elastic-run",
        checkpoint_root=str(tmp_path),
        slices=2,
        elastic=True,
        min_slices=1,
        max_failures=0,  # a preemption must not use it up
        overrides=OVERRIDES,
    )
    # Ray Train looks for more capacity this long after a group starts: long enough for the one
    # worker left to run some steps first, short enough to grow back before the run ends.
    job = dataclasses.replace(job, resize_check_seconds=30.0)
    total = OVERRIDES["steps"]

    with LocalRayHead(num_cpus=1, multi_node=True) as head, head.client_environment():
        spare = LocalRayNode(head, "spare-a", drain_seconds=DRAIN_SECONDS).start()
        returned: LocalRayNode | None = None
        try:
            run = ProviderRun(head, job).start()
            run.wait_for(lambda: max(run.record().steps, default=-1) >= DRAIN_AT_STEP, f"step {DRAIN_AT_STEP}", 300)
            before = committed_steps(job)
            spare.preempt()  # the Spot VM is being reclaimed
            drained_at = time.monotonic()
            # The save at the notice: a checkpoint neither periodic nor final, before the deadline.
            periodic = set(range(0, total, OVERRIDES["checkpoint_period"])) | {total - 1}
            run.wait_for(lambda: committed_steps(job) - before - periodic, "the checkpoint at the notice", 60)
            [saved_at_notice] = committed_steps(job) - before - periodic
            assert time.monotonic() - drained_at < DRAIN_SECONDS
            run.wait_for(lambda: len(run.record().attempts) >= 2, "the worker group's restart", 120)
            returned = LocalRayNode(head, "spare-b").start()  # capacity comes back
            run.join(timeout=600)
            full_log = run.log()
        finally:
            for node in (spare, returned):
                if node is not None:
                    node.stop()

    assert run.error is None, run.error
    outs = run.outs
    assert outs is not None and outs["status"] == "SUCCEEDED"
    print("outputs:", {key: outs[key] for key in (*GOODPUT_OUTPUTS, "duration_seconds")})  # shown with -s
    record = RunRecord()
    record.add_text(full_log)
    # Two workers, then the one left after the preemption, then two again.
    assert [attempt.workers for attempt in record.attempts] == [2, 1, 2], record.attempts
    restored = [int(step) for step in RESTORE_LINE.findall(full_log)]
    assert restored and restored[0] == saved_at_notice, (restored, saved_at_notice)
    # Resumed right after the step saved at the notice: nothing recomputed across the shrink.
    # (MaxText writes a step's line one step late, so the step it stops at to save is not logged.)
    before_notice, after_notice = record.attempts[0], record.attempts[1]
    assert before_notice.last_step in (saved_at_notice - 1, saved_at_notice)
    assert after_notice.first_step == saved_at_notice + 1
    assert set(record.steps) | {saved_at_notice} == set(range(total)), "every step of the run"
    assert (outs["restarts"], outs["preemptions"], outs["failures"]) == (2, 1, 0)
    assert outs["steps_recomputed"] == sum(runs - 1 for runs, _, _ in record.steps.values())
    assert outs["seconds_lost_to_restarts"] > 0
    assert 0 < outs["goodput_percent"] < 100
    assert outs["steps_completed"] == total
