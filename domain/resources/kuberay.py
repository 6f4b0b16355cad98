"""Kubernetes manifests for the Ray cluster: the DRANET claim template, the RayCluster, and the
Autopilot ComputeClass, built from validated stack settings.

Pure functions returning plain dicts (camelCase, as the API server wants them) so the same objects
are deployed by the infra program, checked by policies and validated against the real schemas in
tests. Shapes come from the TPU catalog: replicas are slices, hosts are VMs per slice, and each
worker asks for the chips of one VM. A stack that scales (minSlices < slices) hands the worker
group's replicas to KubeRay's in-tree Ray autoscaler; the capacity choices become the Autopilot
ComputeClass's priorities, in order.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from domain.compile_cache import COMPILE_CACHE_ENV
from domain.ray import compiler_flags
from domain.ray.ray_head import AUTOSCALER_CPU, AUTOSCALER_MEMORY, HEAD_CPUS, HEAD_MEMORY_GIB
from domain.ray.ray_version import (
    MIN_RAY_VERSION_FOR_TOKEN_AUTH as MIN_RAY_VERSION_FOR_TOKEN_AUTH,  # policies read it here
)
from domain.ray.ray_version import RAY_VERSION
from domain.resources import shutdown_grace
from domain.stack_settings import StackSettings
from domain.tpu.capacity_choices import DEFAULT_CAPACITY, FLEX_START, ON_DEMAND, RESERVATION, SPOT
from domain.tpu.gke_labels import (
    FLEX_START_LABEL,
    SPOT_LABEL,
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_TOPOLOGY_LABEL,
)

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
# Mount options follow GKE's Cloud Storage FUSE advice (docs/deploying.md, "The RayCluster, in detail").
# Orbax commits a checkpoint by renaming a directory, which fails at the default limit of 0 on a
# flat bucket (a hierarchical one renames the folder at once and ignores the limit).
CHECKPOINT_RENAME_DIR_LIMIT = 200000
# The kernel reads ahead 1 MiB instead of 128 KiB on reads of large files (a checkpoint restore, a
# cached dataset), as GKE's TPU samples set it; the CSI driver applies it (GKE 1.32.2-gke.1297001+).
READ_AHEAD_OPTION = "read_ahead_kb=1024"
# GKE's checkpointing metadata cache, which the TPU hosts' machine-type defaults also apply.
CHECKPOINT_METADATA_OPTIONS = (
    # Never cache "not found": what another host has just written (a shard, the commit) shows at once.
    "metadata-cache:negative-ttl-secs:0",
    # Keep what was found: no file is rewritten in place, and listings stay uncached (no kernel list cache).
    "metadata-cache:ttl-secs:-1",
)
# No file cache on checkpoints: the procedure's unbounded one fills the boot disk on a restore, and
# a RAM one would hold a copy of the restored shards, each read once, for the pod's life.
# No gcsfuseMetadataPrefetchOnMount: it lists the whole bucket (every run's checkpoints, jax-cache/)
# at every pod start, where a restore reads one step of one run.
GCS_FUSE_MOUNT_OPTIONS = ",".join(
    (
        "implicit-dirs,uid=1000,gid=1000,dir-mode=775,file-mode=664",
        f"rename-dir-limit={CHECKPOINT_RENAME_DIR_LIMIT}",
        "write:enable-streaming-writes:true",
        *CHECKPOINT_METADATA_OPTIONS,
        READ_AHEAD_OPTION,
    )
)

DATASET_MOUNT = "/dataset"
DATASET_VOLUME = "gcs-fuse-dataset"
# Pods outlive jobs: a file replaced between jobs shows once its cached size and type expire (gcsfuse's default).
DATASET_METADATA_TTL_SECS = 60
DATASET_READ_OPTIONS = (
    f"metadata-cache:ttl-secs:{DATASET_METADATA_TTL_SECS}",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    # No list cache, as in GKE's TPU training sample: a job lists once, and sees files added since.
    "file-system:kernel-list-cache-ttl-secs:0",
    # GKE's training sample: "not found" is never cached, so a file added since is found.
    "metadata-cache:negative-ttl-secs:0",
)
# implicit-dirs stays on: without it a flat bucket's folders (no folder objects) do not show.
DATASET_OWNER_OPTIONS = "implicit-dirs,uid=1000,gid=1000,dir-mode=555,file-mode=444"
# datasetFileCacheMib's cache lives in RAM (this volume, a memory-backed emptyDir), never the boot
# disk; GKE wants the volume larger than the cache. Range reads are cached whole for Grain.
GCS_FUSE_CACHE_VOLUME = "gke-gcsfuse-cache"
FILE_CACHE_HEADROOM_MIB = 1024
# The read-ahead comes with the file cache, as in GKE's TPU training sample; without one the
# kernel's default stays, since Grain reads ArrayRecord records at random offsets.
DATASET_FILE_CACHE_OPTIONS = (
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
    READ_AHEAD_OPTION,
)
# GKE advises 512Mi or more for the prefetch sidecar; "0" (no limit) works only on Standard.
METADATA_PREFETCH_ANNOTATIONS = {"gke-gcsfuse/metadata-prefetch-memory-limit": "512Mi"}
# Unlimited, as the procedure sets them, so checkpoint writes of tens of GB are not throttled.
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

# The Jobs API runs any command it is sent. KubeRay generates the token in a Secret of its own, so
# it never passes through Pulumi's state (docs/deploying.md, "The RayCluster, in detail").
AUTH_OPTIONS = {"mode": "token"}
RAY_AUTH_TOKEN_KEY = "auth_token"

# Only Ray autoscaler v2 reads the label selectors of Ray Train's TPU slice placement groups; v1
# would never bring a slice up for a job.
AUTOSCALER_VERSION = "v2"
# No rate limit: a multi-slice job's slices are asked for at once (Conservative adds one at a time).
AUTOSCALER_UPSCALING_MODE = "Default"
# KubeRay's defaults, stated because they add to the head pod's (domain/ray/ray_head.py).
AUTOSCALER_RESOURCES = {
    "requests": {"cpu": AUTOSCALER_CPU, "memory": AUTOSCALER_MEMORY},
    "limits": {"cpu": AUTOSCALER_CPU, "memory": AUTOSCALER_MEMORY},
}

# KubeRay's name limit: 63 minus room for "-worker-" and 5 generated characters.
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
        allocation = {"allocationMode": "ExactCount", "count": settings.dcn_networks}
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


def uses_compute_class(settings: StackSettings) -> bool:
    """Autopilot needs the ComputeClass for DRANET's extra NICs, and for any capacity but plain
    on-demand: a reservation, flex-start and a fallback order are ComputeClass priorities (Spot
    alone could be a pod node selector, but one mechanism for every choice is one to check)."""
    return settings.is_autopilot and (uses_dranet(settings) or tuple(settings.capacity) != DEFAULT_CAPACITY)


def _capacity_priority(choice: str, reservation: str | None) -> dict[str, Any]:
    """A priority's provisioning model (GKE's ComputeClass reference). Spot VMs cannot
    consume reservations and the CRD refuses flexStart with spot, so each priority has one."""
    if choice == RESERVATION:
        return {"reservations": {"affinity": "Specific", "specific": [{"name": reservation}]}}
    if choice == SPOT:
        return {"spot": True}
    if choice == FLEX_START:
        return {"flexStart": {"enabled": True}}
    if choice == ON_DEMAND:
        return {}
    raise ValueError(f"capacity choice {choice!r} has no ComputeClass priority")


def compute_class(settings: StackSettings) -> dict[str, Any]:
    """Autopilot's equivalent of the TPU node pools: auto-created nodes for the slice's TPU, one
    priority per capacity choice in the stack's order, and nothing else: `whenUnsatisfiable:
    DoNotScaleUp` keeps GKE from creating nodes outside the list (its other value, ScaleUpAnyway,
    falls back to nodes the class does not describe). Each priority names the slice's TPU
    (`tpu`: the accelerator, the chips of one node and the slice's topology, as the ComputeClass
    reference's TPU example does) on the procedure's machine type, and DRANET's automatic accelerator
    network profile when the accelerator has DCN networks."""
    shape = settings.slice_shape
    slice_tpu: dict[str, Any] = {
        "machineType": shape.machine_type,
        "tpu": {
            "type": settings.accelerator.gke_accelerator,
            "count": shape.chips_per_vm,
            "topology": settings.topology,
        },
    }
    if uses_dranet(settings):
        slice_tpu["acceleratorNetworkProfile"] = "auto"
    spec: dict[str, Any] = {"nodePoolAutoCreation": {"enabled": True}}
    if uses_dranet(settings):
        spec["nodePoolConfig"] = {"dra": {"networking": {"enabled": True}}}
    spec["priorities"] = [
        {**slice_tpu, **_capacity_priority(choice, settings.reservation)} for choice in settings.capacity
    ]
    spec["whenUnsatisfiable"] = "DoNotScaleUp"
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": COMPUTE_CLASS_NAME},
        "spec": spec,
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


def dataset_mount_options(settings: StackSettings, *, file_cache: bool = True) -> str:
    """The dataset mount's options: GKE's read options, the prefix as only-dir, and a file cache
    of datasetFileCacheMib (max-size-mb 0, no file cache, without it or with file_cache False)."""
    options = [DATASET_OWNER_OPTIONS, *DATASET_READ_OPTIONS]
    if settings.dataset_prefix:
        options.append(f"only-dir={settings.dataset_prefix}")
    cache = settings.dataset_file_cache_mib if file_cache else None
    options.append(f"file-cache:max-size-mb:{cache or 0}")
    if cache:
        options += DATASET_FILE_CACHE_OPTIONS
    return ",".join(options)


def _dataset_volumes(settings: StackSettings, *, file_cache: bool = True) -> list[dict[str, Any]]:
    """The dataset bucket, read-only (the CSI volume and every mount of it), and the RAM disk its
    file cache lives on when it has one (file_cache); none without datasetBucket."""
    if settings.dataset_bucket is None:
        return []
    volumes: list[dict[str, Any]] = [
        {
            "name": DATASET_VOLUME,
            "csi": {
                "driver": GCS_FUSE_DRIVER,
                "readOnly": True,
                "volumeAttributes": {
                    "bucketName": settings.dataset_bucket,
                    "mountOptions": dataset_mount_options(settings, file_cache=file_cache),
                    "gcsfuseMetadataPrefetchOnMount": "true",
                },
            },
        }
    ]
    if settings.dataset_file_cache_mib and file_cache:
        size = settings.dataset_file_cache_mib + FILE_CACHE_HEADROOM_MIB
        volumes.append({"name": GCS_FUSE_CACHE_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{size}Mi"}})
    return volumes


def _dataset_mounts(settings: StackSettings) -> list[dict[str, Any]]:
    if settings.dataset_bucket is None:
        return []
    return [{"name": DATASET_VOLUME, "mountPath": DATASET_MOUNT, "readOnly": True}]


# The head coordinates the job: not on Spot (preempted) or flex-start (nodes end within 7 days).
_HEAD_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": SPOT_LABEL, "operator": "DoesNotExist"},
                        {"key": FLEX_START_LABEL, "operator": "DoesNotExist"},
                    ]
                }
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
                        "env": shutdown_grace.head_env(),
                        # The driver checks the data files before any worker starts.
                        "volumeMounts": [dict(mount) for mount in _VOLUME_MOUNTS] + _dataset_mounts(settings),
                    }
                ],
                "volumes": _checkpoint_volumes(bucket_name) + _dataset_volumes(settings, file_cache=False),
                "nodeSelector": dict(METADATA_SERVER_SELECTOR),
                "affinity": _HEAD_AFFINITY,
            },
        },
    }


def _worker_node_selector(settings: StackSettings) -> dict[str, str]:
    """The TPU selectors stay on every stack: Ray's autoscaler reads them from the pod template to
    know a replica is one slice (its TPU-<type>-head resource). Where a ComputeClass decides the
    capacity, the pods select the class alone: a Spot or flex-start selector would refuse the
    class's other priorities. A Standard pool has one provisioning model, selected as such."""
    selector = {
        **METADATA_SERVER_SELECTOR,
        TPU_ACCELERATOR_LABEL: settings.accelerator.gke_accelerator,
        TPU_TOPOLOGY_LABEL: settings.topology,
    }
    if uses_compute_class(settings):
        selector["cloud.google.com/compute-class"] = COMPUTE_CLASS_NAME
    elif settings.primary_capacity == SPOT:
        selector[SPOT_LABEL] = "true"
    elif settings.primary_capacity == FLEX_START:
        selector[FLEX_START_LABEL] = "true"
    return selector


def _worker_group(settings: StackSettings, bucket_name: Any, image: Any, compile_cache: Any) -> dict[str, Any]:
    shape = settings.slice_shape
    chips = str(shape.chips_per_vm)
    dranet = uses_dranet(settings)
    container: dict[str, Any] = {
        "name": "ray-worker",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "limits": {"memory": WORKER_MEMORY, TPU_RESOURCE: chips},
            "requests": {"cpu": WORKER_CPU, "memory": WORKER_MEMORY, TPU_RESOURCE: chips},
        },
        "env": [
            {"name": "MEGASCALE_NUM_SLICES", "value": str(settings.slices)},
            {"name": "MEGASCALE_PORT", "value": str(MEGASCALE_PORT)},
            {"name": "JAX_PLATFORMS", "value": "tpu,cpu"},
            {"name": "ENABLE_PJRT_COMPATIBILITY", "value": "true"},
            *compiler_flags.worker_env(settings.accelerator),
            *shutdown_grace.worker_env(settings),
            # Where the trainer keeps compiled programs (domain/compile_cache.py): the cluster's,
            # so that where it is never changes a job's command.
            {"name": COMPILE_CACHE_ENV, "value": compile_cache},
        ],
        "volumeMounts": [dict(mount) for mount in _VOLUME_MOUNTS] + _dataset_mounts(settings),
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
        "volumes": _checkpoint_volumes(bucket_name) + _dataset_volumes(settings),
        "nodeSelector": _worker_node_selector(settings),
        # The node's shutdown grace period for ordinary pods on Spot (docs/spot.md).
        "terminationGracePeriodSeconds": shutdown_grace.worker_grace_seconds(settings),
    }
    annotations = dict(GCS_FUSE_ANNOTATIONS)
    if settings.dataset_bucket is not None:
        annotations.update(METADATA_PREFETCH_ANNOTATIONS)
    if dranet:
        pod_spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": CLAIM_TEMPLATE_NAME}]
    group: dict[str, Any] = {
        "groupName": WORKER_GROUP_NAME,
        # One replica is one whole slice: numOfHosts pods, created and deleted together.
        "minReplicas": settings.min_slices,
        "maxReplicas": settings.slices,
        "numOfHosts": shape.vms,
        "rayStartParams": {"metrics-export-port": "8082"},
        "template": {
            "metadata": {"annotations": annotations},
            "spec": pod_spec,
        },
    }
    if not settings.autoscales:
        group["replicas"] = settings.slices
    # A scaling group leaves replicas to the autoscaler: stated, `pulumi up` would shrink a running job.
    return group


def _autoscaling(autoscales: bool, idle_timeout_seconds: int) -> dict[str, Any]:
    """The in-tree autoscaler for a stack that scales: Ray autoscaler v2 in a sidecar of the head,
    removing a slice that has been idle for idleTimeoutSeconds."""
    if not autoscales:
        return {}
    return {
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": {
            "version": AUTOSCALER_VERSION,
            "idleTimeoutSeconds": idle_timeout_seconds,
            "upscalingMode": AUTOSCALER_UPSCALING_MODE,
            "resources": {key: dict(value) for key, value in AUTOSCALER_RESOURCES.items()},
        },
    }


def ray_cluster(settings: StackSettings, bucket_name: Any, image: Any, compile_cache: Any) -> dict[str, Any]:
    """The RayCluster: one head on CPU nodes, one worker group replica per TPU slice (minSlices to
    slices of them, scaled by the in-tree autoscaler, when the stack scales), all running
    `image` (the same Ray on head and workers, as Ray requires), with Ray token authentication on
    (the token is in the Secret `ray_auth_secret_name()`, key RAY_AUTH_TOKEN_KEY).

    `bucket_name`, `image` and `compile_cache` (the compilation cache's `gs://` URL in the bucket,
    domain/compile_cache.py) may be deploy-time values (Pulumi outputs; the built image carries
    its build as a dependency); they are only placed, never read.
    """
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": RAY_CLUSTER_NAME, "namespace": settings.namespace},
        "spec": {
            # The Ray inside `image`; KubeRay needs it to accept authOptions.
            "rayVersion": RAY_VERSION,
            "authOptions": dict(AUTH_OPTIONS),
            **_autoscaling(settings.autoscales, settings.idle_timeout_seconds),
            "headGroupSpec": _head_group(settings, bucket_name, image),
            "workerGroupSpecs": [_worker_group(settings, bucket_name, image, compile_cache)],
        },
    }
