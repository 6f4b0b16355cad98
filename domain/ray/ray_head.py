"""What the Ray head pod asks of its node: declared once, for the RayCluster manifest
(domain/resources/kuberay.py) and for the check that the head's machine type can hold it
(domain/config/settings.py). A leaf module, so both can import it."""

from __future__ import annotations

HEAD_CPUS = 8
HEAD_MEMORY_GIB = 16
# KubeRay's autoscaler sidecar, in the head pod of a stack that scales (minSlices < slices): its
# requests and limits, KubeRay v1.7.0's defaults stated (controllers/ray/common/pod.go).
AUTOSCALER_CPUS = 0.5
AUTOSCALER_MEMORY_MIB = 512
AUTOSCALER_CPU = f"{round(AUTOSCALER_CPUS * 1000)}m"
AUTOSCALER_MEMORY = f"{AUTOSCALER_MEMORY_MIB}Mi"


def head_pod_cpus(autoscales: bool) -> float:
    """What the head pod's containers request of its node, in CPUs."""
    return HEAD_CPUS + (AUTOSCALER_CPUS if autoscales else 0)


def head_pod_memory_gib(autoscales: bool) -> float:
    return HEAD_MEMORY_GIB + (AUTOSCALER_MEMORY_MIB / 1024 if autoscales else 0)
