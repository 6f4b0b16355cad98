"""How a stack's TPU nodes are obtained: the capacity choices, declared once.

A stack lists them in order of preference (`capacity`). A Standard cluster's node pools have one
provisioning model each, so it takes exactly one; an Autopilot ComputeClass tries its priorities
in order, so it takes a fallback order (domain/resources/kuberay.py builds one priority per choice).
"""

from __future__ import annotations

RESERVATION = "reservation"
ON_DEMAND = "on-demand"
SPOT = "spot"
FLEX_START = "flex-start"

# Each choice and what it means for the user, as the README's capacity table says it.
CAPACITY_CHOICES: dict[str, str] = {
    RESERVATION: "the TPUs of a specific Compute Engine reservation (the `reservation` setting names it)",
    ON_DEMAND: "ordinary VMs at the list price, when the zone has them",
    SPOT: "Spot VMs: cheaper, and preempted when Compute Engine needs them back (docs/spot.md)",
    FLEX_START: "Dynamic Workload Scheduler flex-start: queued until the whole slice can start, for at most 7 days",
}
DEFAULT_CAPACITY = (ON_DEMAND,)
