"""How long a Ray worker pod lives after a Spot preemption notice, and the Ray settings derived
from it, so the notice reaches the trainer while the node is still there (docs/spot.md).

The chain, step by step, with Ray 2.60's source for each: docs/spot.md, "The timeline".

The numbers below are the only place these durations are stated; the manifests
(domain/ray/kuberay.py) and the node pools (domain/gcp/gcp_resources.py) take them from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the trainer imports this module on the workers, which need none of the settings
    from domain.stack_settings import StackSettings

# GKE's default shutdown on a Spot VM, kept on Autopilot (which makes its own nodes).
GKE_DEFAULT_SPOT_SHUTDOWN_SECONDS = 30
# GKE's default, kept: whatever is taken from it comes out of the agents that ship the last logs.
CRITICAL_PODS_SHUTDOWN_SECONDS = 15
# The largest the API takes (0, 30 or 120, Spot only), for the most time to write a checkpoint.
EXTENDED_SPOT_SHUTDOWN_SECONDS = 120
# Stated so the on-demand drain timeout can be derived from it.
KUBERNETES_DEFAULT_GRACE_SECONDS = 30
# `ray start` stops its processes after the deadline, each given 1 s before a SIGKILL.
RAY_TEARDOWN_SECONDS = 3
# Ray's default 5 s would lose up to 5 s of a 12 s drain window to polling.
PREEMPTION_POLL_SECONDS = 1

# How often each worker asks Ray Train for a notice (trainer/train_loop.py).
NOTICE_POLL_SECONDS = 1.0
# Ray 2.60's default, not changed: the controller sees a deadline up to twice this late.
RAY_TRAIN_HEALTH_CHECK_SECONDS = 2.0
# Restart before the deadline, while the preempted node still answers: after it, Ray may record
# the node's end as a failure charged to maxFailures (docs/spot.md, "The timeline", step 6).
RESTART_LEAD_SECONDS = 2 * RAY_TRAIN_HEALTH_CHECK_SECONDS + 1
# FailureConfig.preemption_grace_s: negative restarts that much before the deadline.
RESTART_GRACE_SECONDS = -RESTART_LEAD_SECONDS
# The least save window any capacity mode must leave (docs/spot.md, "Will the checkpoint fit").
SAVE_ALLOWANCE_SECONDS = 3.0

DRAIN_TIMEOUT_ENV = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"
POLL_INTERVAL_ENV = "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S"


def spot_shutdown_seconds(settings: StackSettings) -> int:
    """The kubelet's shutdown grace period on a Spot stack's TPU nodes: extended on Standard,
    whose node pools the stack configures (`kubelet_config`); GKE's default on Autopilot, whose
    nodes GKE makes (the ComputeClass schema the stack is checked against has no such field)."""
    return GKE_DEFAULT_SPOT_SHUTDOWN_SECONDS if settings.is_autopilot else EXTENDED_SPOT_SHUTDOWN_SECONDS


def worker_grace_seconds(settings: StackSettings) -> int:
    """The worker pods' terminationGracePeriodSeconds: on Spot, the ordinary pods' share of the
    node's shutdown grace period (the kubelet grants no more, whatever the pod asks for)."""
    if not settings.spot:
        return KUBERNETES_DEFAULT_GRACE_SECONDS
    return spot_shutdown_seconds(settings) - CRITICAL_PODS_SHUTDOWN_SECONDS


def drain_timeout_seconds(settings: StackSettings) -> int:
    """`ray start`'s drain deadline after SIGTERM, before the kubelet's SIGKILL by Ray's teardown."""
    return worker_grace_seconds(settings) - RAY_TEARDOWN_SECONDS


def save_window_seconds(settings: StackSettings) -> float:
    """What a preemption notice leaves the trainer for the steps in flight and the save: the
    drain, less the notice's way to MaxText and the lead Ray Train restarts with."""
    return drain_timeout_seconds(settings) - PREEMPTION_POLL_SECONDS - NOTICE_POLL_SECONDS - RESTART_LEAD_SECONDS


def head_env() -> list[dict[str, Any]]:
    """The Ray Train controller reads the poll interval where the job's driver runs (the head: a
    job submitted without entrypoint resources runs there) and hands it to the watcher actor."""
    return [{"name": POLL_INTERVAL_ENV, "value": str(PREEMPTION_POLL_SECONDS)}]


def worker_env(settings: StackSettings) -> list[dict[str, Any]]:
    """The drain deadline of the worker's own `ray start`, and the poll interval too, should a
    driver ever run on a worker."""
    return [{"name": DRAIN_TIMEOUT_ENV, "value": str(drain_timeout_seconds(settings))}, *head_env()]


def run_completed(committed_step: int | None, total_steps: int | None) -> bool:
    """Whether a worker group that MaxText returned from after a preemption notice has finished
    the run (its last step, `total_steps - 1`, is committed): the notice came during the last
    steps or the final save, so the group returns and the run succeeds. Otherwise MaxText stopped
    at the notice after saving `committed_step`, and the group must wait for Ray Train to restart
    it (a group that returns has finished the run, as far as Ray Train is concerned). A run whose
    length is unknown is never taken as finished."""
    return committed_step is not None and total_steps is not None and committed_step >= total_steps - 1
