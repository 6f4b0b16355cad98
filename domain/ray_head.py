"""What the Ray head pod asks of its node: declared once, for the RayCluster manifest
(domain/kuberay.py) and for the check that the head's machine type can hold it
(domain/settings.py). A leaf module, so both can import it."""

from __future__ import annotations

HEAD_CPUS = 8
HEAD_MEMORY_GIB = 16
# KubeRay's autoscaler sidecar, in the head pod of a stack that scales (minSlices < slices): its
# requests and limits, KubeRay v1.7.0's defaults stated (controllers/ray/common/pod.go).
AUTOSCALER_CPU = "500m"
AUTOSCALER_MEMORY = "512Mi"
