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
from typing import Any, Protocol

from domain.ray import preemption
from domain.ray.ray_head import AUTOSCALER_CPU, AUTOSCALER_MEMORY, HEAD_CPUS, HEAD_MEMORY_GIB
from domain.ray.ray_version import (
    MIN_RAY_VERSION_FOR_TOKEN_AUTH as MIN_RAY_VERSION_FOR_TOKEN_AUTH,  # policies read it here
)
from domain.ray.ray_version import RAY_VERSION
from domain.tpu.capacity_choices import DEFAULT_CAPACITY, FLEX_START, ON_DEMAND, RESERVATION, SPOT
from domain.tpu.gke_labels import (
    FLEX_START_LABEL,
    SPOT_LABEL,
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_TOPOLOGY_LABEL,
)
from domain.tpu.tpu_catalog import SliceSettings

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
# GKE's Cloud Storage FUSE pages this module follows:
GKE_FUSE_PERF = "https://cloud.google.com/kubernetes-engine/docs/how-to/cloud-storage-fuse-csi-driver-perf"
GKE_FUSE_VOLUME_ATTRIBUTES = (
    "https://cloud.google.com/kubernetes-engine/docs/reference/cloud-storage-fuse-csi-driver/volume-attr"
)
# The checkpoint mount. No file cache (the procedure's file-cache:max-size-mb:-1 takes the whole
# cache volume, by default the TPU node's boot disk, and a restore would copy every checkpoint read
# there); a file cache is opt-in, and "-1" means the cache volume's entire capacity (GKE_FUSE_VOLUME_ATTRIBUTES).
# GKE_FUSE_PERF's checkpoint advice, for the flat bucket the stack creates: a high rename-dir-limit,
# because Orbax commits a checkpoint by renaming its temporary directory (the limit is 0 by default,
# and the rename fails), at the value GKE's own performance defaults use; and streaming writes, which
# upload a checkpoint as it is written instead of staging each file on the boot disk first.
CHECKPOINT_RENAME_DIR_LIMIT = 200000
GCS_FUSE_MOUNT_OPTIONS = (
    "implicit-dirs,uid=1000,gid=1000,dir-mode=775,file-mode=664,"
    f"rename-dir-limit={CHECKPOINT_RENAME_DIR_LIMIT},write:enable-streaming-writes:true"
)

# The dataset mount (datasetBucket): read-only on every TPU worker, tuned as GKE_FUSE_PERF advises
# for training reads: metadata caches unbounded and never expiring, filled on mount by the metadata
# prefetch (GKE 1.32.1-gke.1357001 or later), and the kernel's list cache kept for the job. Safe
# because the mount is read-only and the data does not change while a job reads it.
DATASET_MOUNT = "/dataset"
DATASET_VOLUME = "gcs-fuse-dataset"
DATASET_READ_OPTIONS = (
    "metadata-cache:ttl-secs:-1",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-system:kernel-list-cache-ttl-secs:-1",
)
# implicit-dirs stays on (GKE's sample drops it beside the list cache and prefetch, for speed):
# without it the folders of a flat bucket filled by uploads, which have no folder objects, do not
# show, and a pattern under one would match nothing.
DATASET_OWNER_OPTIONS = "implicit-dirs,uid=1000,gid=1000,dir-mode=555,file-mode=444"
# With datasetFileCacheMib: GKE_FUSE_PERF advises RAM for the file cache on TPU v6e hosts and
# warns against the boot disk, so the cache lives on the pod's custom cache volume (this name), a
# memory-backed emptyDir; GKE wants that volume larger than the cache, by this headroom here.
# Range reads are cached whole (Grain reads ArrayRecord records at random offsets), and parallel
# downloads fill the cache faster.
GCS_FUSE_CACHE_VOLUME = "gke-gcsfuse-cache"
FILE_CACHE_HEADROOM_MIB = 1024
DATASET_FILE_CACHE_OPTIONS = (
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
)
# The metadata prefetch runs in a sidecar of its own, whose default memory limit GKE_FUSE_PERF
# says to raise to 512Mi or more ("0", no limit, only on Standard clusters): 512Mi fits both modes.
METADATA_PREFETCH_ANNOTATIONS = {"gke-gcsfuse/metadata-prefetch-memory-limit": "512Mi"}
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
# its image is at least MIN_RAY_VERSION_FOR_TOKEN_AUTH (domain/ray/ray_version.py, imported above).

# KubeRay's in-tree autoscaler (KubeRay v1.7.0), for a stack that scales (minSlices < slices).
# `version: v2` is Ray autoscaler v2: Ray Train's TPU slices are gang-scheduled placement groups
# whose bundles carry label selectors (ray.util.tpu, ray.io/tpu-slice-name), which only v2's
# scheduler reads (ray/autoscaler/v2/scheduler.py; v1's resource_demand_scheduler ignores labels),
# so v1 would never bring a slice up for a job. With v2 KubeRay itself adds
# RAY_enable_autoscaler_v2=true to the head and sets restartPolicy Never on every pod
# (controllers/ray/common/pod.go), and refuses any other restartPolicy (utils/validation.go).
AUTOSCALER_VERSION = "v2"
# Default: no rate limit, so a multi-slice job's slices are asked for at once (Conservative would
# add them one at a time; Ray's kuberay autoscaling_config maps Default and Aggressive alike).
AUTOSCALER_UPSCALING_MODE = "Default"
# The sidecar's requests and limits, stated (they are KubeRay's defaults) because they add to the
# head pod's (domain/ray/ray_head.py declares them for the head's node check).
AUTOSCALER_RESOURCES = {
    "requests": {"cpu": AUTOSCALER_CPU, "memory": AUTOSCALER_MEMORY},
    "limits": {"cpu": AUTOSCALER_CPU, "memory": AUTOSCALER_MEMORY},
}

# KubeRay's utils.CheckName keeps names this short (63 minus room for "-worker-" and 5
# generated characters).
_KUBERAY_MAX_NAME = 50


class KubeRaySettings(preemption.PreemptionSettings, SliceSettings, Protocol):
    """What the manifests read of the infra stack's settings (StackSettings,
    domain/config/settings.py), besides the slices and what the preemption timings read."""

    @property
    def namespace(self) -> str: ...
    @property
    def service_account(self) -> str: ...
    @property
    def slices(self) -> int: ...
    @property
    def autoscales(self) -> bool: ...
    @property
    def idle_timeout_seconds(self) -> int: ...
    @property
    def capacity(self) -> tuple[str, ...]: ...
    @property
    def primary_capacity(self) -> str: ...
    @property
    def reservation(self) -> str | None: ...
    @property
    def dataset_bucket(self) -> str | None: ...
    @property
    def dataset_prefix(self) -> str | None: ...
    @property
    def dataset_file_cache_mib(self) -> int | None: ...


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


def uses_dranet(settings: KubeRaySettings) -> bool:
    return settings.accelerator.dcn_networks > 0


def resource_claim_template(settings: KubeRaySettings) -> dict[str, Any]:
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


def uses_compute_class(settings: KubeRaySettings) -> bool:
    """Autopilot needs the ComputeClass for DRANET's extra NICs, and for any capacity but plain
    on-demand: a reservation, flex-start and a fallback order are ComputeClass priorities (Spot
    alone could be a pod node selector, but one mechanism for every choice is one to check)."""
    return settings.is_autopilot and (uses_dranet(settings) or tuple(settings.capacity) != DEFAULT_CAPACITY)


def _capacity_priority(choice: str, reservation: str | None) -> dict[str, Any]:
    """A priority's provisioning model (GKE's ComputeClass reference:
    https://cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass). Spot VMs cannot
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


def compute_class(settings: KubeRaySettings) -> dict[str, Any]:
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


def dataset_mount_options(settings: KubeRaySettings, *, file_cache: bool = True) -> str:
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


def _dataset_volumes(settings: KubeRaySettings, *, file_cache: bool = True) -> list[dict[str, Any]]:
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


def _dataset_mounts(settings: KubeRaySettings) -> list[dict[str, Any]]:
    if settings.dataset_bucket is None:
        return []
    return [{"name": DATASET_VOLUME, "mountPath": DATASET_MOUNT, "readOnly": True}]


# The head coordinates the job: keep it off Spot capacity, whose preemption would end the run, and
# off flex-start capacity, whose nodes end after their maximum run duration (7 days at most).
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


def _head_group(settings: KubeRaySettings, bucket_name: Any, image: Any) -> dict[str, Any]:
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
                        # The dataset too, read-only and without a file cache: the job's driver
                        # checks the data files before any worker starts (trainer/maxtext_trainer.py).
                        "volumeMounts": [dict(mount) for mount in _VOLUME_MOUNTS] + _dataset_mounts(settings),
                    }
                ],
                "volumes": _checkpoint_volumes(bucket_name) + _dataset_volumes(settings, file_cache=False),
                "nodeSelector": dict(METADATA_SERVER_SELECTOR),
                "affinity": _HEAD_AFFINITY,
            },
        },
    }


def _worker_node_selector(settings: KubeRaySettings) -> dict[str, str]:
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


def _worker_group(settings: KubeRaySettings, bucket_name: Any, image: Any) -> dict[str, Any]:
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
            {
                "name": "LIBTPU_INIT_ARGS",
                "value": settings.accelerator.libtpu_init_args(),
            },
            # A drain deadline before the kubelet's SIGKILL, and a quick preemption poll.
            *preemption.worker_env(settings),
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
        "terminationGracePeriodSeconds": preemption.worker_grace_seconds(settings),
    }
    annotations = dict(GCS_FUSE_ANNOTATIONS)
    if settings.dataset_bucket is not None:
        annotations.update(METADATA_PREFETCH_ANNOTATIONS)
    if dranet:
        pod_spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": CLAIM_TEMPLATE_NAME}]
    group: dict[str, Any] = {
        "groupName": WORKER_GROUP_NAME,
        # One replica is one whole slice: numOfHosts pods, one per VM, which KubeRay creates and
        # deletes together (its RayMultiHostIndexing, on by default in v1.7.0).
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
        # A fixed group: every slice, always.
        group["replicas"] = settings.slices
    # A scaling group leaves replicas to the autoscaler, which patches it: stated here, every
    # `pulumi up` would set it back to minSlices and take the slices of a running job away. KubeRay
    # starts the group at minReplicas (the CRD's default replicas 0, raised to minReplicas by
    # utils.GetWorkerGroupDesiredReplicas).
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


def ray_cluster(settings: KubeRaySettings, bucket_name: Any, image: Any) -> dict[str, Any]:
    """The RayCluster: one head on CPU nodes, one worker group replica per TPU slice (minSlices to
    slices of them, scaled by the in-tree autoscaler, when the stack scales), all running
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
            **_autoscaling(settings.autoscales, settings.idle_timeout_seconds),
            "headGroupSpec": _head_group(settings, bucket_name, image),
            "workerGroupSpecs": [_worker_group(settings, bucket_name, image)],
        },
    }
