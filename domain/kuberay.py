"""Kubernetes manifests for the Ray cluster: the DRANET claim template, the RayCluster, and the
Autopilot ComputeClass, built from validated stack settings.

Pure functions returning plain dicts (camelCase, as the API server wants them) so the same objects
are deployed by the infra program, checked by policies and validated against the real schemas in
tests. Shapes come from the TPU catalog: replicas are slices, hosts are VMs per slice, and each
worker asks for the chips of one VM.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from domain import preemption
from domain.ray_head import HEAD_CPUS, HEAD_MEMORY_GIB
from domain.ray_version import MIN_RAY_VERSION_FOR_TOKEN_AUTH as MIN_RAY_VERSION_FOR_TOKEN_AUTH  # policies read it here
from domain.ray_version import RAY_VERSION
from domain.settings import StackSettings

RAY_CLUSTER_NAME = "maxtext-tpu-cluster"
WORKER_GROUP_NAME = "tpu-group"
CLAIM_TEMPLATE_NAME = "dcn-netdev"
CLAIM_NAME = "netdev"
COMPUTE_CLASS_NAME = "dranet-compute-class"
DASHBOARD_PORT = 8265
MEGASCALE_PORT = 9915
CHECKPOINT_MOUNT = "/data"

GCS_FUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCS_FUSE_VOLUME = "gcs-fuse-csi-ephemeral"
GCS_FUSE_MOUNT_OPTIONS = "implicit-dirs,uid=1000,gid=1000,dir-mode=775,file-mode=664,file-cache:max-size-mb:-1"
# The sidecar's own limits set to "0" (unlimited), as the procedure does, so checkpoint writes of
# tens of GB are not throttled by a small default sidecar.
GCS_FUSE_ANNOTATIONS = {
    "gke-gcsfuse/volumes": "true",
    "gke-gcsfuse/cpu-limit": "0",
    "gke-gcsfuse/memory-limit": "0",
    "gke-gcsfuse/ephemeral-storage-limit": "0",
}

METADATA_SERVER_SELECTOR = {"iam.gke.io/gke-metadata-server-enabled": "true"}
HEAD_RESOURCES = {
    "requests": {"cpu": str(HEAD_CPUS), "memory": f"{HEAD_MEMORY_GIB}Gi"},
    "limits": {"memory": f"{HEAD_MEMORY_GIB}Gi"},
}
# Per TPU host: the procedure's 8 CPUs and 200G of the VM's memory for the Ray worker.
WORKER_CPU = "8"
WORKER_MEMORY = "200G"

# Ray token authentication. The Jobs API on the head runs any command it is sent; without a token,
# any pod of the cluster could reach it. With `authOptions.mode: token` and no `secretName`,
# KubeRay (v1.7.0) generates the token itself, in a Secret it owns next to the RayCluster, and
# gives every Ray container RAY_AUTH_MODE=token and RAY_AUTH_TOKEN from that Secret: the token is
# made in the cluster and never passes through Pulumi's state. Clients send it as
# `Authorization: Bearer <token>`, or `X-Ray-Authorization: Bearer <token>` through a proxy that
# consumes the Authorization header (the Kubernetes API server's service proxy does).
AUTH_OPTIONS = {"mode": "token"}
# The Secret's key holding the token (base64 of 32 random bytes).
RAY_AUTH_TOKEN_KEY = "auth_token"
# KubeRay refuses a RayCluster with token authentication unless spec.rayVersion says the Ray in
# its image is at least MIN_RAY_VERSION_FOR_TOKEN_AUTH (domain/ray_version.py, imported above).
# KubeRay's utils.CheckName keeps names this short (63 minus room for "-worker-" and 5
# generated characters).
_KUBERAY_MAX_NAME = 50


def head_service_name(cluster_name: str = RAY_CLUSTER_NAME) -> str:
    """The ClusterIP service KubeRay creates for the head (dashboard and Jobs API on 8265)."""
    return f"{cluster_name}-head-svc"


def ray_auth_secret_name(cluster_name: str = RAY_CLUSTER_NAME) -> str:
    """The Secret KubeRay creates for the cluster's auth token: the RayCluster's name through
    KubeRay's `utils.CheckName`, which keeps the last 50 characters of a longer name, then
    replaces a leading digit, or else a leading punctuation character, with "r"."""
    name = cluster_name[-_KUBERAY_MAX_NAME:]
    if name and _starts_badly(name[0]):
        name = "r" + name[1:]
    return name


def _starts_badly(character: str) -> bool:
    """Go's unicode.IsDigit or unicode.IsPunct (Unicode category P*), as KubeRay tests them."""
    return unicodedata.category(character) == "Nd" or unicodedata.category(character).startswith("P")


def uses_dranet(settings: StackSettings) -> bool:
    return settings.accelerator.dcn_networks > 0


def resource_claim_template(settings: StackSettings) -> dict[str, Any]:
    """The DRANET claim for the extra NICs: exactly one per DCN network on Standard, where the
    node pools attach them; on Autopilot GKE attaches what the ComputeClass asks for, so take all."""
    allocation: dict[str, Any]
    if settings.is_autopilot:
        allocation = {"allocationMode": "All"}
    else:
        allocation = {"allocationMode": "ExactCount", "count": settings.accelerator.dcn_networks}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": CLAIM_TEMPLATE_NAME, "namespace": settings.namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "req-netdev",
                            "exactly": {"deviceClassName": "netdev.google.com", **allocation},
                        }
                    ]
                }
            }
        },
    }


def compute_class(settings: StackSettings) -> dict[str, Any]:
    """Autopilot's equivalent of the TPU node pools: auto-created nodes with DRANET networking."""
    priority: dict[str, Any] = {
        "machineType": settings.slice_shape.machine_type,
        "acceleratorNetworkProfile": "auto",
    }
    if settings.spot:
        priority["spot"] = True
    if settings.reservation:
        priority["reservations"] = {
            "affinity": "Specific",
            "specific": [{"name": settings.reservation}],
        }
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": COMPUTE_CLASS_NAME},
        "spec": {
            "nodePoolAutoCreation": {"enabled": True},
            "nodePoolConfig": {"dra": {"networking": {"enabled": True}}},
            "priorities": [priority],
        },
    }


def _checkpoint_volumes(bucket_name: Any) -> list[dict[str, Any]]:
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {
            "name": GCS_FUSE_VOLUME,
            "csi": {
                "driver": GCS_FUSE_DRIVER,
                "volumeAttributes": {
                    "bucketName": bucket_name,
                    "mountOptions": GCS_FUSE_MOUNT_OPTIONS,
                },
            },
        },
    ]


_VOLUME_MOUNTS = [
    {"name": GCS_FUSE_VOLUME, "mountPath": CHECKPOINT_MOUNT},
    {"name": "dshm", "mountPath": "/dev/shm"},
]

# The head coordinates the job: keep it off Spot capacity, whose preemption would end the run.
_NOT_ON_SPOT = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}]}
            ]
        }
    }
}


def _head_group(settings: StackSettings, bucket_name: Any, image: Any) -> dict[str, Any]:
    return {
        "rayStartParams": {},
        # ClusterIP only: the Jobs API runs arbitrary commands, so it is reached through the
        # Kubernetes API server (or a port-forward), never from outside the cluster.
        "serviceType": "ClusterIP",
        "template": {
            "metadata": {"annotations": dict(GCS_FUSE_ANNOTATIONS)},
            "spec": {
                "serviceAccountName": settings.service_account,
                "containers": [
                    {
                        "name": "ray-head",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "ports": [
                            {"containerPort": 6379, "name": "gcs-server"},
                            {"containerPort": DASHBOARD_PORT, "name": "dashboard"},
                            {"containerPort": 10001, "name": "client"},
                        ],
                        "resources": {key: dict(value) for key, value in HEAD_RESOURCES.items()},
                        # Ray Train's preemption poll, read where the job's driver runs.
                        "env": preemption.head_env(),
                        "volumeMounts": [dict(mount) for mount in _VOLUME_MOUNTS],
                    }
                ],
                "volumes": _checkpoint_volumes(bucket_name),
                "nodeSelector": dict(METADATA_SERVER_SELECTOR),
                "affinity": _NOT_ON_SPOT,
            },
        },
    }


def _worker_node_selector(settings: StackSettings) -> dict[str, str]:
    selector = {
        **METADATA_SERVER_SELECTOR,
        "cloud.google.com/gke-tpu-accelerator": settings.accelerator.gke_accelerator,
        "cloud.google.com/gke-tpu-topology": settings.topology,
    }
    if settings.is_autopilot and uses_dranet(settings):
        selector["cloud.google.com/compute-class"] = COMPUTE_CLASS_NAME
    elif settings.spot:
        selector["cloud.google.com/gke-spot"] = "true"
    return selector


def _worker_group(settings: StackSettings, bucket_name: Any, image: Any) -> dict[str, Any]:
    shape = settings.slice_shape
    chips = str(shape.chips_per_vm)
    dranet = uses_dranet(settings)
    container: dict[str, Any] = {
        "name": "ray-worker",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "limits": {"memory": WORKER_MEMORY, "google.com/tpu": chips},
            "requests": {"cpu": WORKER_CPU, "memory": WORKER_MEMORY, "google.com/tpu": chips},
        },
        "env": [
            {"name": "MEGASCALE_NUM_SLICES", "value": str(settings.slices)},
            {"name": "MEGASCALE_PORT", "value": str(MEGASCALE_PORT)},
            {"name": "JAX_PLATFORMS", "value": "tpu,cpu"},
            {"name": "ENABLE_PJRT_COMPATIBILITY", "value": "true"},
            {
                "name": "LIBTPU_INIT_ARGS",
                "value": settings.accelerator.libtpu_init_args(),
            },
            # A drain deadline before the kubelet's SIGKILL, and a quick preemption poll.
            *preemption.worker_env(settings),
        ],
        "volumeMounts": [dict(mount) for mount in _VOLUME_MOUNTS],
    }
    if dranet:
        container["resources"]["claims"] = [{"name": CLAIM_NAME}]
    if not settings.is_autopilot:
        # TPU access on Standard node pools, as the procedure runs it; Autopilot rejects
        # privileged containers and exposes the TPU devices without it.
        container["securityContext"] = {"privileged": True}
    pod_spec: dict[str, Any] = {
        "serviceAccountName": settings.service_account,
        "containers": [container],
        "volumes": _checkpoint_volumes(bucket_name),
        "nodeSelector": _worker_node_selector(settings),
        # The node's shutdown grace period for ordinary pods on Spot (docs/spot.md).
        "terminationGracePeriodSeconds": preemption.worker_grace_seconds(settings),
    }
    if dranet:
        pod_spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": CLAIM_TEMPLATE_NAME}]
    return {
        "groupName": WORKER_GROUP_NAME,
        "replicas": settings.slices,
        "minReplicas": settings.slices,
        "maxReplicas": settings.slices,
        "numOfHosts": shape.vms,
        "rayStartParams": {"metrics-export-port": "8082"},
        "template": {
            "metadata": {"annotations": dict(GCS_FUSE_ANNOTATIONS)},
            "spec": pod_spec,
        },
    }


def ray_cluster(settings: StackSettings, bucket_name: Any, image: Any) -> dict[str, Any]:
    """The RayCluster: one head on CPU nodes, one worker group replica per TPU slice, all running
    `image` (the same Ray on head and workers, as Ray requires), with Ray token authentication on
    (the token is in the Secret `ray_auth_secret_name()`, key RAY_AUTH_TOKEN_KEY).

    `bucket_name` and `image` may be deploy-time values (Pulumi outputs; the built image carries
    its build as a dependency); they are only placed, never read.
    """
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": RAY_CLUSTER_NAME, "namespace": settings.namespace},
        "spec": {
            # The Ray inside `image` (the worker image is built on it; a configured rayImage must
            # run it too, as the job client does). KubeRay needs it to accept authOptions.
            "rayVersion": RAY_VERSION,
            "authOptions": dict(AUTH_OPTIONS),
            "headGroupSpec": _head_group(settings, bucket_name, image),
            "workerGroupSpecs": [_worker_group(settings, bucket_name, image)],
        },
    }
