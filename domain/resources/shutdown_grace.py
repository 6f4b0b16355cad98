"""What a stack's settings make of the preemption durations (domain/ray/preemption.py): the TPU
nodes' shutdown grace on Spot, the worker pods' grace, the drain deadline of their `ray start`,
the save window that leaves the trainer, and the env that carries them into the RayCluster's pods
(domain/resources/kuberay.py). The durations stay there, where the trainer reads them on the
workers without the settings.
"""

from __future__ import annotations

from typing import Any

from domain.ray.preemption import (
    CRITICAL_PODS_SHUTDOWN_SECONDS,
    DRAIN_TIMEOUT_ENV,
    EXTENDED_SPOT_SHUTDOWN_SECONDS,
    GKE_DEFAULT_SPOT_SHUTDOWN_SECONDS,
    KUBERNETES_DEFAULT_GRACE_SECONDS,
    NOTICE_POLL_SECONDS,
    POLL_INTERVAL_ENV,
    PREEMPTION_POLL_SECONDS,
    RAY_TEARDOWN_SECONDS,
    RESTART_LEAD_SECONDS,
)
from domain.stack_settings import StackSettings


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
