"""Elastic training through a Spot preemption, on a real multi-node Ray cluster on this machine:
a head and a second node, each its own `ray start` (one CPU each, so one worker each), two JAX
processes training one MaxText model over gloo.

Mid-run the second node gets what GKE gives a Ray worker pod whose Spot VM is reclaimed
(docs/spot.md): SIGTERM to its `ray start`, which drains the node with the preemption reason and
ends it at the drain's deadline. The trainer must save at the notice, Ray Train must restart
before that deadline and charge the restart to the preemption budget (not to `maxFailures = 0`,
which would fail the job), the job must shrink to the one worker left and resume from the step
saved at the notice, grow back to two when a node returns, and succeed. The job runs through the RayJob provider,
so its goodput outputs are checked against what the log and the checkpoints say happened.

Ray binds every interface while nodes may join (see LocalRayHead), behind the head's token.
"""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from domain.compile_cache import COMPILE_CACHE_ENV
from domain.ray.preemption import NOTICE_POLL_SECONDS, PREEMPTION_POLL_SECONDS, RESTART_LEAD_SECONDS
from domain.training.goodput import OUTPUTS as GOODPUT_OUTPUTS
from domain.training.job import resolve_job
from domain.training.job_log import JobLog
from tests.support.provider_run import ProviderRun
from tests.support.trainer_logs import RESTORE_LINE, committed_steps, notice_saves
from workloads.local_ray import LocalRayHead, LocalRayNode
from workloads.ray_job import wait as job_wait

pytestmark = pytest.mark.slow

# Two layers of the fault-run model: ~0.5 s a step with two workers on 2 cores, ~0.3 s with the
# one left (measured with two busy processes beside the test). 200 steps: the notice, a few
# steps in, cannot come after the last one, and the one worker left has over a minute of steps
# to run, two or more of Ray Train's looks for capacity, when capacity comes back.
OVERRIDES = {
    "steps": 200,
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
# The node's drain, which `ray start` reads when it starts (before any step can be timed): it
# must hold the notice's way to MaxText (Ray Train's poll, then the trainer's), the step in
# flight and the one all processes agree to stop at, and the save. Measured with two busy
# processes beside this test on 2 cores: steps of 0.5 s, the save committed ~3 s after the
# SIGTERM. Before preempting, the test checks that this machine's notice and steps take under
# half of what the drain leaves before Ray Train's restart, the rest for writing the save.
DRAIN_SECONDS = 40
# The most steps MaxText runs between the notice and its save: the step in flight, then the
# next, which JAX's preemption sync picks for every process.
STEPS_TO_THE_SAVE = 2
# A worker group's start when nothing is measured yet: Ray Train's workers, JAX and MaxText's
# compilation. Once the first group has started, the waits derive from how long it took.
FIRST_START_SECONDS = 900


def test_a_preempted_node_saves_at_the_notice_shrinks_resumes_grows_back_and_succeeds(tmp_path, monkeypatch):
    monkeypatch.setattr(job_wait, "POLL_SECONDS", 0.5)
    # A compilation cache of its own (the suite's may hold these programs already), which the
    # Ray nodes started below pass to the trainer.
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "jax-cache"))
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
    # Ray Train looks for more capacity this long after a group starts, and every such period
    # after: the node that comes back is started as soon as the one worker left has started.
    job = dataclasses.replace(job, resize_check_seconds=30.0)
    total = OVERRIDES["steps"]

    with LocalRayHead(num_cpus=1, multi_node=True) as head, head.client_environment():
        spare = LocalRayNode(head, "spare-a", drain_seconds=DRAIN_SECONDS).start()
        returned: LocalRayNode | None = None
        try:
            run = ProviderRun(head, job).start()
            run.wait_for(
                lambda: max(run.record().steps, default=-1) >= DRAIN_AT_STEP,
                f"step {DRAIN_AT_STEP}",
                FIRST_START_SECONDS,
            )
            first = run.record()
            group_start = first.attempts[0].first_step_at - first.attempts[0].started
            step_seconds = statistics.median(seconds for step, (_, seconds, _) in first.steps.items() if step > 0)
            # The time the save needs at most, but for writing it, against the drain it has.
            to_the_save = PREEMPTION_POLL_SECONDS + NOTICE_POLL_SECONDS + STEPS_TO_THE_SAVE * step_seconds
            measured = (
                f"steps of {step_seconds:.1f} s, a worker group's start of {group_start:.0f} s, "
                f"{to_the_save:.0f} s from the notice to the save of the drain's {DRAIN_SECONDS} s"
            )
            to_the_restart = DRAIN_SECONDS - RESTART_LEAD_SECONDS
            assert to_the_save < to_the_restart / 2, f"this machine is too slow for the drain: {measured}"
            spare.preempt()  # the Spot VM is being reclaimed
            # Waited for until the trainer says it saved, or the group restarts without it: the
            # restart comes shortly before the drain's deadline, whatever the speed.
            run.wait_for(
                lambda: notice_saves(run.log()) or len(run.record().attempts) >= 2,
                "the checkpoint at the notice, or the restart",
                DRAIN_SECONDS + group_start,
            )
            saves = notice_saves(run.log())
            assert saves, f"no checkpoint at the notice before the restart ({measured}):\n{run.log()[-3000:]}"
            [saved] = saves.values()
            saved_at_notice = saved["step"]
            assert saved_at_notice in committed_steps(job)
            # Committed before Ray Train's restart, which ends the group ahead of the deadline.
            assert saved["seconds_to_deadline"] > RESTART_LEAD_SECONDS, (saved, measured)
            # The one worker left starts after Ray Train's restart and its 60 s for a worker that
            # cannot start: the preempted node is still there when Ray Train counts the workers
            # the cluster has room for (domain/ray/preemption.py).
            run.wait_for(
                lambda: len(run.record().attempts) >= 2,
                "the worker group's restart",
                saved["seconds_to_deadline"] + 60 + 3 * group_start,
            )
            returned = LocalRayNode(head, "spare-b").start()  # capacity comes back
            run.join(timeout=6 * group_start + 3 * total * step_seconds + 2 * job.resize_check_seconds)
            full_log = run.log()
            assert spare.log_path is not None
            preempted_node_log = spare.log_path.read_text(errors="replace")
        finally:
            for node in (spare, returned):
                if node is not None:
                    node.stop()

    assert run.error is None, run.error
    # The preempted node ended on its own once Ray Train's restart left it idle, before its
    # deadline: its raylet ends with the drain's preemption reason, and never on `ray start`'s
    # SIGTERM at the deadline, which Ray may record as an ordinary end (domain/ray/preemption.py).
    assert "Local node finished draining" in preempted_node_log, preempted_node_log[-2000:]
    outs = run.outs
    assert outs is not None and outs["status"] == "SUCCEEDED"
    print("outputs:", {key: outs[key] for key in (*GOODPUT_OUTPUTS, "duration_seconds")})  # shown with -s
    read = JobLog()
    read.add_text(full_log)
    record = read.record
    deadline = saved["time"] + saved["seconds_to_deadline"]
    started = [None if attempt.started is None else round(attempt.started - deadline, 1) for attempt in record.attempts]
    print("measured:", measured, "; the save at the notice:", saved, "; attempts started, from the deadline:", started)
    # Two workers, then the one left after the preemption, then two again.
    assert [attempt.workers for attempt in record.attempts] == [2, 1, 2], record.attempts
    # The cache's key holds the devices: the group of one compiles a program of its own (unless
    # it grew back before compiling), and the group that grew back finds the first group's.
    caches = [(phases["compile_cache"], phases["compile_cache_why"]) for phases in outs["start_phases"]]
    assert caches[0][0] == "miss" and caches[0][1].startswith("no entry yet for this program"), caches
    assert caches[1][0] is None or caches[1] == ("miss", "a program of its own for 1 worker (the start before had 2)")
    assert caches[2][0] == "hit" or "JAX did not write it" in caches[2][1], caches
    restored = [int(step) for step in RESTORE_LINE.findall(full_log)]
    assert restored and restored[0] == saved_at_notice, (restored, saved_at_notice)
    # Resumed right after the step saved at the notice: nothing recomputed across the shrink.
    # (MaxText writes a step's line one step late, so the step it stops at to save is not logged.)
    # The one worker left may grow back before its first step if its start outlasts Ray Train's
    # look for capacity; the group that grew then resumes from that same checkpoint.
    assert record.attempts[0].last_step in (saved_at_notice - 1, saved_at_notice)
    resumed = next(attempt for attempt in record.attempts[1:] if attempt.first_step is not None)
    assert resumed.first_step == saved_at_notice + 1
    assert set(record.steps) | {saved_at_notice} == set(range(total)), "every step of the run"
    # The restart at the preemption charged to the preemption budget, none to maxFailures (the
    # job would have failed), and the grow-back charged to neither.
    assert (outs["restarts"], outs["preemptions"], outs["failures"]) == (2, 1, 0)
    assert outs["steps_recomputed"] == sum(runs - 1 for runs, _, _ in record.steps.values())
    assert outs["seconds_lost_to_restarts"] > 0
    assert 0 < outs["goodput_percent"] < 100
    assert outs["steps_completed"] == total
