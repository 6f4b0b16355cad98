"""How long a Ray worker pod lives after a Spot preemption notice, and the Ray settings derived
from it, so the notice reaches the trainer while the node is still there (docs/spot.md).

The chain: Compute Engine notifies the node; the kubelet's graceful node shutdown sends SIGTERM
to the pods and SIGKILLs them when their share of the shutdown grace period is over; `ray start
--block` (PID 1 of a KubeRay container) handles SIGTERM by draining its own node with the
preemption reason and a deadline `RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S` seconds away, then stops
its processes (ray/_private/node.py, Ray 2.60); Ray Train's preemption watcher finds the drain
within `RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S` and tells every worker, which saves a checkpoint.

The numbers below are the only place these durations are stated; the manifests
(domain/ray/kuberay.py) and the node pools (domain/gcp/gcp_resources.py) take them from here.
"""

from __future__ import annotations

from typing import Any, Protocol

# GKE's graceful node shutdown on a Spot VM, by default: 30 s from the preemption notice in all
# (Compute Engine's notice period), the first 15 s for ordinary pods and the last 15 s kept for
# system-critical ones (GKE's Spot VMs concept page). Autopilot, which makes its own nodes, keeps it.
GKE_DEFAULT_SPOT_SHUTDOWN_SECONDS = 30
# The share kept for system-critical pods (logging and node agents), GKE's default, kept as is:
# whatever is taken from it comes out of the agents that report the workers' last log lines.
CRITICAL_PODS_SHUTDOWN_SECONDS = 15
# A Standard Spot node pool may extend the whole period: the API takes 0, 30 or 120 for the
# kubelet's `shutdownGracePeriodSeconds`, only on Spot VMs, from the control-plane version in
# domain/gcp/gke.py. The largest, for the most time to write a checkpoint.
EXTENDED_SPOT_SHUTDOWN_SECONDS = 120
# Kubernetes' default terminationGracePeriodSeconds: what a pod on on-demand capacity gets when it
# is deleted (a node upgrade's drain, a KubeRay replacement), stated so the drain timeout below it
# can be derived.
KUBERNETES_DEFAULT_GRACE_SECONDS = 30
# What `ray start` needs after its drain deadline and before the kubelet's SIGKILL: it then stops
# its processes one type after another, raylet first, each given 1 s to exit on SIGTERM before a
# SIGKILL (Node._kill_process_impl, Ray 2.60). Ray Train ends the worker group before the
# deadline (RESTART_LEAD_SECONDS below), while the preempted node still answers.
RAY_TEARDOWN_SECONDS = 3
# How often Ray Train asks the GCS for drained nodes (Ray 2.60's default is 5 s): one small GCS
# call a second from one actor, so a 12 s drain window loses at most 1 s to polling, not 5.
PREEMPTION_POLL_SECONDS = 1

# How often each worker asks Ray Train for a preemption notice (trainer/maxtext_trainer.py): with
# Ray Train's own poll of the drains above, a notice reaches MaxText within these two polls.
NOTICE_POLL_SECONDS = 1.0
# How often Ray Train's controller looks at its worker group (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S,
# Ray 2.60's default, not changed here): it waits this long after its previous look, then gives
# the workers as long again to answer, so it sees a deadline up to twice this late.
RAY_TRAIN_HEALTH_CHECK_SECONDS = 2.0
# How long before a drain's deadline Ray Train restarts the run: the controller's lateness, and
# 1 s to end the worker group's actors. It must charge the restart to the preemption budget while
# the preempted node is still there. At the deadline `ray start` ends the node's processes, and
# Ray records that end as a preemption only if it comes after the deadline it sent to the GCS on
# the wall clock, which `ray start` computes a moment after the deadline it kills at (on its
# monotonic clock; ray/_private/node.py, Ray 2.60): a coin flip on a busy host. A node recorded
# as ended on SIGTERM makes its worker's death an error, not a preemption, charged to maxFailures
# (seen on a local two-node cluster: tests/test_elastic_local.py). Restarted before the deadline,
# the group's actors are gone, the draining node is idle, and its raylet ends on its own with the
# drain's preemption reason, before `ray start` would kill it. The cost: when Ray Train counts the
# workers the cluster has room for, at once, the preempted node is still listed, so an elastic
# job asks for the old number of workers and waits 60 s (RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S)
# for one that cannot start before it settles for the slices that remain (a controller error,
# whose retries are unlimited; measured on a local two-node cluster: tests/test_elastic_local.py).
RESTART_LEAD_SECONDS = 2 * RAY_TRAIN_HEALTH_CHECK_SECONDS + 1
# Ray Train's FailureConfig.preemption_grace_s: the time it adds to the drain's deadline before
# restarting (Ray 2.60 adds it as is, so a negative grace restarts that much before the deadline).
RESTART_GRACE_SECONDS = -RESTART_LEAD_SECONDS
# The least time every capacity mode must leave, between the notice reaching MaxText and Ray
# Train's restart, for the steps in flight and the save: on a local CPU cluster the tiny presets'
# save was committed ~3 s after the SIGTERM, the notice's way included (tests/test_elastic_local.py).
# A TPU model's save takes longer: docs/spot.md says which fit where.
SAVE_ALLOWANCE_SECONDS = 3.0

DRAIN_TIMEOUT_ENV = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"
POLL_INTERVAL_ENV = "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S"


class PreemptionSettings(Protocol):
    """What the timings read of the infra stack's settings (StackSettings, domain/config/settings.py)."""

    @property
    def is_autopilot(self) -> bool: ...
    @property
    def spot(self) -> bool: ...


def spot_shutdown_seconds(settings: PreemptionSettings) -> int:
    """The kubelet's shutdown grace period on a Spot stack's TPU nodes: extended on Standard,
    whose node pools the stack configures (`kubelet_config`); GKE's default on Autopilot, whose
    nodes GKE makes (the ComputeClass schema the stack is checked against has no such field)."""
    return GKE_DEFAULT_SPOT_SHUTDOWN_SECONDS if settings.is_autopilot else EXTENDED_SPOT_SHUTDOWN_SECONDS


def worker_grace_seconds(settings: PreemptionSettings) -> int:
    """The worker pods' terminationGracePeriodSeconds: on Spot, the ordinary pods' share of the
    node's shutdown grace period (the kubelet grants no more, whatever the pod asks for)."""
    if not settings.spot:
        return KUBERNETES_DEFAULT_GRACE_SECONDS
    return spot_shutdown_seconds(settings) - CRITICAL_PODS_SHUTDOWN_SECONDS


def drain_timeout_seconds(settings: PreemptionSettings) -> int:
    """`ray start`'s drain deadline after SIGTERM, before the kubelet's SIGKILL by Ray's teardown."""
    return worker_grace_seconds(settings) - RAY_TEARDOWN_SECONDS


def save_window_seconds(settings: PreemptionSettings) -> float:
    """What a preemption notice leaves the trainer for the steps in flight and the save: the
    drain, less the notice's way to MaxText and the lead Ray Train restarts with."""
    return drain_timeout_seconds(settings) - PREEMPTION_POLL_SECONDS - NOTICE_POLL_SECONDS - RESTART_LEAD_SECONDS


def head_env() -> list[dict[str, Any]]:
    """The Ray Train controller reads the poll interval where the job's driver runs (the head: a
    job submitted without entrypoint resources runs there) and hands it to the watcher actor."""
    return [{"name": POLL_INTERVAL_ENV, "value": str(PREEMPTION_POLL_SECONDS)}]


def worker_env(settings: PreemptionSettings) -> list[dict[str, Any]]:
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
