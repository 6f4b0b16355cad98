"""The infra program: validated settings in, components wired, stack outputs out.

Settings are parsed before the first resource is registered, so bad config never leaves a
half-created stack behind.
"""

from __future__ import annotations

from typing import Any

import pulumi

from domain import kuberay
from domain.capacity import settings_cost
from domain.paths import PROJECT_ROOT
from domain.settings import StackSettings
from infra.components.apis import ProjectApis
from infra.components.cluster import GkeCluster
from infra.components.kuberay import KubeRay
from infra.components.network import DcnNetworks
from infra.components.storage import CheckpointStorage
from infra.components.tpu_slices import TpuSlices
from infra.components.worker_image import WorkerImage

# The worker image's build context: the repository root (domain/, trainer/, the trainer lock).


def build(settings: StackSettings) -> dict[str, Any]:
    """Creates every resource of the procedure; returns the stack outputs by their stable names."""
    # Priced first: a price no number can hold stops the program before any resource exists.
    cost = settings_cost(settings)
    if cost.price is None:
        pulumi.log.warn(f"TPU cost: {cost.basis}")
    apis = ProjectApis("apis", settings)
    networks = DcnNetworks("dcn", settings, apis) if settings.uses_dcn_networks else None
    cluster = GkeCluster(settings.cluster_name, settings, apis)
    slices = TpuSlices("tpu", settings, cluster, networks)
    storage = CheckpointStorage("checkpoints", settings, apis, cluster)
    # A configured image is used as-is; otherwise the stack builds and pushes its own.
    image: pulumi.Input[str]
    if settings.ray_image is None:
        image = WorkerImage("worker-image", settings, apis, PROJECT_ROOT).image
    else:
        image = settings.ray_image
    ray = KubeRay("ray", settings, cluster, storage, slices, image)
    shape = settings.slice_shape
    return {
        "clusterName": cluster.name,
        # projects/P/locations/L/clusters/N: the GKE API's name for the cluster.
        "clusterId": cluster.cluster_id,
        "clusterLocation": settings.cluster_location,
        "clusterEndpoint": cluster.endpoint,
        "clusterCaCertificate": cluster.ca_certificate,
        "kubeconfig": cluster.kubeconfig,
        "mode": settings.mode,
        "namespace": settings.namespace,
        "serviceAccount": storage.service_account_name,
        "rayClusterName": ray.ray_cluster_name,
        "headServiceName": ray.head_service_name,
        "dashboardPort": ray.dashboard_port,
        # Where the Jobs API's token is: the Secret's name in `namespace`, key
        # kuberay.RAY_AUTH_TOKEN_KEY. The token itself is generated in the cluster by KubeRay and
        # never enters the stack's state.
        "rayAuthSecret": ray.auth_secret_name,
        "rayImage": image,
        "bucketName": storage.bucket_name,
        "checkpointRoot": kuberay.CHECKPOINT_MOUNT,
        "checkpointBucketUrl": storage.bucket_name.apply(lambda bucket: f"gs://{bucket}"),
        "preset": settings.preset.name,
        "accelerator": settings.accelerator.name,
        "topology": settings.topology,
        "slices": settings.slices,
        "hostsPerSlice": shape.vms,
        "chipsPerHost": shape.chips_per_vm,
        "totalChips": settings.total_chips,
        # What the TPU chips cost (TPU chips only; None where no price is known: costBasis says
        # why): a training hour holds every slice, an idle hour the minSlices slices.
        "capacity": list(settings.capacity),
        "minSlices": settings.min_slices,
        "pricePerChipHourUsd": cost.price_per_chip_hour,
        "trainingDollarsPerHour": cost.training_dollars_per_hour,
        "idleDollarsPerHour": cost.idle_dollars_per_hour,
        "idleDollarsPerDay": cost.idle_dollars_per_day,
        "costBasis": cost.basis,
        "tpuPools": slices.pool_names,
        "dcnNetworks": networks.network_names if networks else [],
    }
