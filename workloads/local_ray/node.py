"""LocalRayNode: a node that joins a LocalRayHead(multi_node=True), as a second machine would, and
can be preempted as GKE preempts a Spot worker."""

from __future__ import annotations

import json
import signal

from domain.ray.preemption import DRAIN_TIMEOUT_ENV
from workloads.local_ray.errors import LocalRayError
from workloads.local_ray.head import LocalRayHead
from workloads.local_ray.ray_start import RayStart


class LocalRayNode(RayStart):
    """A second machine, on this one: a node that joins a LocalRayHead(multi_node=True), with a
    custom resource of its own (`name`) so a test can find it.

    `preempt()` is what GKE does to a Ray worker pod when its Spot VM is reclaimed: SIGTERM to
    `ray start`, which drains its own node with the preemption reason for `drain_seconds`
    (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S, as the RayCluster sets it: docs/spot.md), then
    stops its processes: once the node is idle (its raylet then ends with the drain's preemption
    reason), or at the deadline."""

    def __init__(
        self,
        head: LocalRayHead,
        name: str,
        num_cpus: int = 1,
        drain_seconds: float = 0.0,
        start_timeout: float = 120.0,
    ):
        super().__init__(head.venv, num_cpus, start_timeout)
        self.drain_seconds = drain_seconds
        if not head.multi_node:
            raise LocalRayError("start the head with LocalRayHead(multi_node=True) to add nodes to it")
        self.head = head
        self.name = name

    def __repr__(self) -> str:
        return f"LocalRayNode(name={self.name!r}, head={self.head.gcs_address!r})"

    def node_id(self) -> str | None:
        """This node's id while the cluster lists it alive, else None."""
        from ray.util.state import list_nodes

        for node in list_nodes(
            address=self.head.address, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False
        ):
            if self.name in (node.resources_total or {}):
                return node.node_id
        return None

    def preempt(self) -> None:
        """SIGTERM to this node's `ray start`, without waiting: it drains the node for
        `drain_seconds`, then ends its processes (stop() cleans up whatever is left)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def _start_once(self) -> None:
        self._launch(
            [f"--address={self.head.gcs_address}", f"--resources={json.dumps({self.name: 1})}"],
            {**self.head.environment(), DRAIN_TIMEOUT_ENV: str(self.drain_seconds)},
        )
        self._wait_until(lambda: self.node_id() is not None, f"node {self.name}")
