"""A job waiting for its slices: how many of them are up, from the nodes Ray reports.

A job asks for `slices` whole slices of `hosts_per_slice` hosts each, one Ray Train worker per
host holding `resources_per_worker` (all the chips of a TPU VM, or one CPU). While its first
worker group has not started, the workloads stack says how many of those slices the cluster has
(`waiting_line`): a node counts as a host when it is alive and has every resource one worker
asks for, and a slice counts when all its hosts are up. A multi-host TPU slice's hosts carry
Ray's slice-name label (ray/_private/accelerators/tpu.py), so a half-started slice does not count;
nodes without that label (CPU nodes, single-host slices) are counted in whole groups of
`hosts_per_slice`.

Ray Train waits for a worker group's placement for RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S (60 s
in Ray 2.60, ray/train/v2/_internal/constants.py) and then tears the placement request down and
asks again, charging a controller retry each time. The workloads stack gives the job that
variable set to its queue deadline (queueTimeoutSeconds), so one placement request stands for the
whole wait, and the job is stopped by the stack, with the reason, when its deadline passes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Ray Train's own knob: how long a worker group's placement may take before Ray Train gives up
# on that request (and retries it). The job's queue deadline sets it (see the module's docstring).
WORKER_GROUP_START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
# The label Ray puts on every host of a TPU slice: the slice's name.
TPU_SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
ALIVE = "ALIVE"


@dataclass(frozen=True)
class Node:
    """A Ray node as the state API lists it (GET /api/v0/nodes): what counting slices needs."""

    alive: bool
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_state(cls, entry: Mapping[str, Any]) -> Node:
        """One entry of the state API's node list. A field of another shape counts as absent, so
        a node Ray describes differently is not counted as a host, never raised on."""
        resources = entry.get("resources_total")
        labels = entry.get("labels")
        return cls(
            alive=entry.get("state") == ALIVE,
            resources={
                str(name): float(amount)
                for name, amount in (resources.items() if isinstance(resources, Mapping) else ())
                if isinstance(amount, (int, float)) and not isinstance(amount, bool)
            },
            labels={
                str(name): value
                for name, value in (labels.items() if isinstance(labels, Mapping) else ())
                if isinstance(value, str)
            },
        )

    def holds(self, resources_per_worker: Mapping[str, float]) -> bool:
        """Whether one worker fits on this node when it is idle."""
        return all(self.resources.get(name, 0.0) >= amount for name, amount in resources_per_worker.items())


def slices_up(nodes: Iterable[Node], *, hosts_per_slice: int, resources_per_worker: Mapping[str, float]) -> int:
    """How many whole slices the alive nodes make for a job whose workers need
    `resources_per_worker` each, one per host, `hosts_per_slice` hosts a slice."""
    if hosts_per_slice < 1:
        raise ValueError(f"hosts_per_slice = {hosts_per_slice} must be at least 1")
    hosts = [node for node in nodes if node.alive and node.holds(resources_per_worker)]
    named = Counter(node.labels[TPU_SLICE_NAME_LABEL] for node in hosts if node.labels.get(TPU_SLICE_NAME_LABEL))
    unnamed = sum(1 for node in hosts if not node.labels.get(TPU_SLICE_NAME_LABEL))
    return sum(count // hosts_per_slice for count in named.values()) + unnamed // hosts_per_slice


def waiting_line(asked: int, up: int | None) -> str:
    """The progress line of a job whose first worker group has not started: once every slice it
    asked for is up, what it waits for is the group itself (its processes, the JAX setup)."""
    if up is not None and up >= asked:
        return f"slices up: {up} of {asked} asked; waiting for the worker group to start"
    return f"waiting for slices: {asked} asked, {'?' if up is None else up} up"
