"""docs/spot.md: the durations of a Spot preemption, and the Ray 2.60 behaviour they rely on.

The manifests and node pool arguments that carry these numbers are checked in
tests/test_kuberay_manifests.py, tests/test_gcp_resource_args.py and tests/test_infra_program.py;
here, the arithmetic between them, and the Ray source the workers run, as installed.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time

import pytest

from domain.config.settings import SettingsError
from domain.gcp import gke
from domain.ray import preemption
from domain.resources import shutdown_grace
from domain.training.job_events import NOTICE_SAVED_EVENT, parse_event
from tests.support.cli_settings import infra_settings
from tests.support.refusals import assert_one_problem
from trainer import maxtext_trainer, train_loop

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)

BASE = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}


def settings(**overrides):
    return infra_settings({**BASE, **overrides})


CAPACITIES = {
    "standard": settings(),
    "standard-spot": settings(capacity="spot"),
    "autopilot": settings(mode="autopilot"),
    "autopilot-spot": settings(mode="autopilot", capacity="spot"),
}


@pytest.mark.parametrize(
    ("capacity", "grace", "drain"),
    [("standard", 30, 27), ("standard-spot", 105, 102), ("autopilot", 30, 27), ("autopilot-spot", 15, 12)],
)
def test_each_capacity_drains_before_its_grace_period_ends(capacity, grace, drain):
    stack = CAPACITIES[capacity]
    assert shutdown_grace.worker_grace_seconds(stack) == grace
    assert shutdown_grace.drain_timeout_seconds(stack) == drain
    # Ray Train sees the drain well inside the window, with time left to save.
    assert preemption.PREEMPTION_POLL_SECONDS < drain < grace


@pytest.mark.parametrize(
    ("capacity", "window"), [("standard", 20), ("standard-spot", 95), ("autopilot", 20), ("autopilot-spot", 5)]
)
def test_ray_train_restarts_before_the_deadline_leaving_every_capacity_time_to_save(capacity, window):
    """Ray Train restarts RESTART_LEAD_SECONDS before the drain's deadline (a negative
    preemption_grace_s); what is left after the notice's way to MaxText is the save's."""
    drain = shutdown_grace.drain_timeout_seconds(CAPACITIES[capacity])
    to_the_notice = preemption.PREEMPTION_POLL_SECONDS + preemption.NOTICE_POLL_SECONDS
    assert shutdown_grace.save_window_seconds(CAPACITIES[capacity]) == window
    assert preemption.RESTART_LEAD_SECONDS < drain - to_the_notice - preemption.SAVE_ALLOWANCE_SECONDS
    assert preemption.RESTART_GRACE_SECONDS == -preemption.RESTART_LEAD_SECONDS < 0


def test_the_restart_lead_covers_the_controllers_lateness():
    """Ray Train's controller sees the deadline up to two health checks late (a wait, then a poll
    as long): the restart must still be charged before `ray start` ends the node at the deadline."""
    assert preemption.RESTART_LEAD_SECONDS > 2 * preemption.RAY_TRAIN_HEALTH_CHECK_SECONDS


def test_spot_grace_is_the_nodes_share_for_ordinary_pods():
    """The kubelet grants a pod at most its group's share of the node's shutdown grace period."""
    standard, autopilot = CAPACITIES["standard-spot"], CAPACITIES["autopilot-spot"]
    assert shutdown_grace.spot_shutdown_seconds(standard) == 120  # the largest value GKE's API takes
    assert shutdown_grace.spot_shutdown_seconds(autopilot) == 30  # Compute Engine's notice, GKE's default
    for stack in (standard, autopilot):
        assert (
            shutdown_grace.worker_grace_seconds(stack)
            == shutdown_grace.spot_shutdown_seconds(stack) - preemption.CRITICAL_PODS_SHUTDOWN_SECONDS
        )


def test_spot_on_standard_needs_the_version_that_takes_the_grace_period():
    assert gke.SPOT_SHUTDOWN_GRACE_MINIMUM_VERSION == "1.35.0-gke.1171000"
    assert gke.supports_dranet(gke.SPOT_SHUTDOWN_GRACE_MINIMUM_VERSION, "standard")
    assert settings(capacity="spot", gkeVersion="1.35.0-gke.1171000").spot
    # On-demand keeps Standard's DRANET minimum.
    assert settings(gkeVersion="1.34.1-gke.1829001").gke_version == "1.34.1-gke.1829001"
    with pytest.raises(SettingsError) as caught:
        settings(capacity="spot", gkeVersion="1.35.0-gke.1170999")
    [problem] = caught.value.problems
    assert problem.startswith("gkeVersion = '1.35.0-gke.1170999' with capacity = spot")
    # Below Standard's DRANET minimum too: one message, naming the version that satisfies both.
    with pytest.raises(SettingsError) as caught:
        settings(capacity="spot", gkeVersion="1.33.5-gke.1000")
    assert_one_problem(
        caught.value.problems,
        setting="gkeVersion",
        value="'1.33.5-gke.1000' with capacity = spot",
        phrase="the Spot TPU node pools extend the kubelet's shutdown grace period",
        fix="use 1.35.0-gke.1171000 or later, or another capacity choice",
    )


# ---------------------------------------------------------------- the installed Ray (2.60)


def test_ray_train_reads_the_poll_interval_the_pods_set():
    from ray.train.v2._internal import constants
    from ray.train.v2._internal.callbacks.preemption_callback import PreemptionCallback

    assert constants.PREEMPTION_POLL_INTERVAL_S_ENV_VAR == preemption.POLL_INTERVAL_ENV
    assert constants.DEFAULT_PREEMPTION_POLL_INTERVAL_S == 5.0
    # Propagated from the driver to the controller and the workers when set in its environment.
    assert preemption.POLL_INTERVAL_ENV in constants.ENV_VARS_TO_PROPAGATE
    # Read by the controller's callback, which passes it to the watcher actor it starts.
    source = inspect.getsource(PreemptionCallback)
    assert "PREEMPTION_POLL_INTERVAL_S_ENV_VAR" in inspect.getsource(PreemptionCallback.__init__)
    assert "poll_interval_s=self._poll_interval_s" in source


def test_ray_train_restarts_a_preemption_the_lead_before_its_deadline():
    """Ray 2.60 adds preemption_grace_s to the deadline as is (a negative one restarts earlier),
    checking once a health check, which the pods leave at its default."""
    from ray.train import FailureConfig
    from ray.train.v2._internal import constants
    from ray.train.v2._internal.execution.controller.controller import TrainController
    from ray.train.v2.api.preemption import PreemptionInfo

    assert constants.DEFAULT_HEALTH_CHECK_INTERVAL_S == preemption.RAY_TRAIN_HEALTH_CHECK_SECONDS
    assert "poll_status(timeout=self._health_check_interval_s)" in inspect.getsource(TrainController._poll_workers)
    grace = FailureConfig(preemption_grace_s=preemption.RESTART_GRACE_SECONDS).preemption_grace_s
    now = time.time()

    def restarts(seconds_to_deadline: float) -> bool:
        info = PreemptionInfo(deadline_ms=int((now + seconds_to_deadline) * 1000), preempted_node_to_ranks={"n": [1]})
        return TrainController._is_preemption_deadline_exceeded(info, now, grace)

    assert restarts(preemption.RESTART_LEAD_SECONDS - 1)
    assert not restarts(preemption.RESTART_LEAD_SECONDS + 1)


def test_ray_start_drains_its_node_as_preempted_on_sigterm():
    from ray._private.node import Node

    handler = inspect.getsource(Node._register_shutdown_hooks)
    assert "set_sigterm_handler" in handler and "_drain_node_before_shutdown" in handler
    drain = inspect.getsource(Node._drain_node_before_shutdown)
    assert "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S" in drain
    assert "DRAIN_NODE_REASON_PREEMPTION" in drain


def test_ray_reads_the_drain_timeout_the_workers_set():
    """Read from the environment when Ray's constants are imported, as in a worker pod."""
    code = "from ray._private import ray_constants as c; print(c.RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S)"
    env = {**os.environ, preemption.DRAIN_TIMEOUT_ENV: "12"}
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.split()[-1] == "12.0"
    env.pop(preemption.DRAIN_TIMEOUT_ENV)
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.split()[-1] == "30.0"  # Ray's default: Kubernetes' default grace, to the second


# ---------------------------------------------------------------- after the notice, in the trainer


@pytest.mark.parametrize(
    ("committed", "total", "completed"),
    [(99, 100, True), (98, 100, False), (25, 100, False), (0, 1, True), (None, 100, False), (99, None, False)],
)
def test_a_group_has_finished_the_run_only_with_its_last_step_committed(committed, total, completed):
    assert preemption.run_completed(committed, total) is completed


def notice_with_deadline_in(seconds: float) -> train_loop.PreemptionNotice:
    notice = train_loop.PreemptionNotice(poll_seconds=1, report=True)
    notice.received, notice.deadline_ms = True, int((time.time() + seconds) * 1000)
    return notice


def events(out: str) -> list[dict]:
    return [event for event in map(parse_event, out.splitlines()) if event is not None]


@pytest.mark.parametrize("step", [25, 27])
def test_the_trainer_names_the_step_it_saved_at_the_notice_periodic_or_not(monkeypatch, capsys, step):
    """The save at the notice is told by what it is, an event, not by its step number: the step
    JAX's preemption sync picks may also be a periodic one (25, with checkpoint_period = 25)."""
    monkeypatch.setattr(train_loop, "_latest_committed_step", lambda directory: step)
    assert (
        train_loop._report_the_notice_save(
            notice_with_deadline_in(30), checkpoint_dir="ignored", total_steps=100, rank0=True
        )
        is False
    )
    out = capsys.readouterr().out
    [saved] = events(out)
    assert (saved["event"], saved["step"]) == (NOTICE_SAVED_EVENT, step)
    assert 28 < saved["seconds_to_deadline"] <= 30
    assert f"the checkpoint at the preemption notice is step {step}, committed" in out
    assert "s before the node's deadline" in out


def test_a_save_committed_after_the_deadline_says_so(monkeypatch, capsys):
    monkeypatch.setattr(train_loop, "_latest_committed_step", lambda directory: 40)
    assert (
        train_loop._report_the_notice_save(
            notice_with_deadline_in(-4), checkpoint_dir="ignored", total_steps=100, rank0=True
        )
        is False
    )
    out = capsys.readouterr().out
    [saved] = events(out)
    assert -6 < saved["seconds_to_deadline"] < -3
    assert "s AFTER the node's deadline" in out


def test_a_notice_during_the_last_steps_lets_the_group_finish_the_run(monkeypatch, capsys):
    """Waiting for a restart then would restart a finished run, which MaxText refuses (a
    checkpoint already at the last step): the job would fail with its work done."""
    monkeypatch.setattr(train_loop, "_latest_committed_step", lambda directory: 99)
    assert (
        train_loop._report_the_notice_save(
            notice_with_deadline_in(30), checkpoint_dir="ignored", total_steps=100, rank0=True
        )
        is True
    )
    out = capsys.readouterr().out
    assert events(out) == []
    assert "the run is complete" in out


def test_the_workers_learn_where_maxtext_saves_and_the_run_length():
    from domain.training.job import resolve_job

    job = resolve_job("tiny-cpu", run_name="r", checkpoint_root="gs://bucket/runs", overrides={"steps": 40})
    config = maxtext_trainer.build_trainer(job).train_loop_config
    assert config["checkpoint_dir"] == "gs://bucket/runs/r/checkpoints"
    assert config["total_steps"] == 40
