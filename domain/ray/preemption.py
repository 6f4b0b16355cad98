"""How long a Ray worker pod lives after a Spot preemption notice, and the Ray settings derived
from it, so the notice reaches the trainer while the node is still there (docs/spot.md).

The chain, step by step, with Ray 2.60's source for each: docs/spot.md, "The timeline".

The numbers below are the only place these durations are stated, apart from any stack's settings:
the trainer reads them on the workers. What a stack's settings make of them (the nodes' and the
pods' grace, the drain deadline, the save window) is domain/resources/shutdown_grace.py's, which
the RayCluster (domain/resources/kuberay.py) takes; the Spot node pools
(domain/resources/gcp_resources.py) take their grace periods from here.
"""

from __future__ import annotations

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


def run_completed(committed_step: int | None, total_steps: int | None) -> bool:
    """Whether a worker group that MaxText returned from after a preemption notice has finished
    the run (its last step, `total_steps - 1`, is committed): the notice came during the last
    steps or the final save, so the group returns and the run succeeds. Otherwise MaxText stopped
    at the notice after saving `committed_step`, and the group must wait for Ray Train to restart
    it (a group that returns has finished the run, as far as Ray Train is concerned). A run whose
    length is unknown is never taken as finished."""
    return committed_step is not None and total_steps is not None and committed_step >= total_steps - 1
