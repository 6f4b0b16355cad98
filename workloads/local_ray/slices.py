"""WorkerSlices, an autoscaled worker group of a local head: the cluster config its autoscaler reads
and the environment the head's autoscaler needs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from workloads.local_ray.errors import LocalRayError

# Ray's autoscaler v2 with its fake multi-node provider: a real scale-from-zero on this machine.
# Named as an `external` provider: Ray 2.60's wheel lacks the defaults file `fake_multinode` loads
# (docs/testing.md, "The local Ray head").
FAKE_PROVIDER = {
    "type": "external",
    "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider",
}
HEAD_NODE_TYPE = "ray.head.default"
HEAD_INSTANCE_ID = "local-head"
# Per head: Ray's default is a fixed port (44217), which two heads would share.
AUTOSCALER_METRIC_PORT_ENV = "AUTOSCALER_METRIC_PORT"
AUTOSCALER_ENV = {
    "RAY_FAKE_CLUSTER": "1",
    "RAY_enable_autoscaler_v2": "1",
    "RAY_CLOUD_INSTANCE_ID": HEAD_INSTANCE_ID,
    # Ray's default is 5 s; a test sees a scale-up or scale-down within about a second.
    "AUTOSCALER_UPDATE_INTERVAL_S": "1",
}


@dataclass(frozen=True)
class WorkerSlices:
    """One autoscaled worker group, as the RayCluster's TPU group is when the stack autoscales:
    0 nodes while idle, one node per slice up to `max_slices` when a job asks, each removed
    after `idle_timeout_seconds` idle. A node carries `cpus_per_slice` CPUs (a CPU job's worker
    takes one) and the custom resource `node_type`, so a test can tell its nodes."""

    max_slices: int = 1
    cpus_per_slice: int = 1
    idle_timeout_seconds: float = 5.0
    node_type: str = "slice"

    def __post_init__(self) -> None:
        problems = []
        if self.max_slices < 1:
            problems.append(f"max_slices = {self.max_slices} must be at least 1 (the most nodes the group may have)")
        if self.cpus_per_slice < 1:
            problems.append(f"cpus_per_slice = {self.cpus_per_slice} must be at least 1 (a CPU worker takes one)")
        if not self.idle_timeout_seconds > 0:
            problems.append(
                f"idle_timeout_seconds = {self.idle_timeout_seconds} must be more than 0 (how long an idle node stays)"
            )
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", self.node_type) or self.node_type == HEAD_NODE_TYPE:
            problems.append(
                f"node_type = {self.node_type!r} is not valid; use letters, digits, '-' and '_', starting "
                f"with a letter (and not {HEAD_NODE_TYPE!r}, the head's)"
            )
        if problems:
            raise LocalRayError("; ".join(problems))

    def autoscaling_config(self, gcs_address: str) -> dict[str, Any]:
        """The cluster config `ray start --head --autoscaling-config` reads, in the format of
        ray/autoscaler/ray-schema.json. The idle timeout is in minutes there (fractions allowed),
        as KubeRay converts autoscalerOptions.idleTimeoutSeconds."""
        return {
            "cluster_name": "local",
            "max_workers": self.max_slices,
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": self.idle_timeout_seconds / 60,
            "provider": {
                **FAKE_PROVIDER,
                # Nodes join this head's GCS (the provider's default is port 6379).
                "gcs_address": gcs_address,
                "head_node_id": HEAD_INSTANCE_ID,
                # Autoscaler v2 asks for several nodes at once.
                "launch_multiple": True,
                # Else autoscaler v2 would try to install Ray on the nodes over SSH.
                "disable_node_updaters": True,
            },
            "head_node_type": HEAD_NODE_TYPE,
            "available_node_types": {
                # The head offers nothing a job's workers need (see LocalRayHead).
                HEAD_NODE_TYPE: {"resources": {}, "node_config": {}, "max_workers": 0},
                self.node_type: {
                    "resources": {"CPU": self.cpus_per_slice, self.node_type: 1},
                    "node_config": {},
                    "min_workers": 0,
                    "max_workers": self.max_slices,
                },
            },
            # What the missing defaults file would have given (the autoscaler reads them all).
            "auth": {},
            "file_mounts": {},
            "cluster_synced_files": [],
            "file_mounts_sync_continuously": False,
            "rsync_exclude": [],
            "rsync_filter": [],
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
            "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
        }
