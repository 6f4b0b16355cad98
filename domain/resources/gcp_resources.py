"""Arguments of every Google Cloud resource the infra stack creates, as plain keyword dicts.

Components pass these straight to pulumi-gcp (`gcp.container.NodePool(name, **args)`). Keeping
them pure makes each flag of the manual procedure testable without Pulumi, and lets the tests
convert every nested dict into the SDK's typed `*Args` classes, where a misspelt key fails (the
engine would otherwise drop it silently). A value that exists only once another resource of the
same component does (a network's id, the cluster's name, the nodes' service account) is left out:
the component adds it at the call site, as a keyword at the top level, or with `fill` into the
`Slot` these args hold where it is nested. The TPU pools' builder takes such values, which its
component is given, as parameters; all are used as opaque values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.compile_cache import COMPILE_CACHE_PREFIX
from domain.gcp import gke, resource_names
from domain.gcp.dcn import DCN_MTU
from domain.ray import preemption
from domain.stack_settings import StackSettings
from domain.tpu.gke_labels import DRANET_LABEL

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
DRANET_NODE_LABEL = {DRANET_LABEL: "true"}
CHECKPOINT_ROLE = "roles/storage.objectUser"
# The dataset bucket is only read (docs/deploying.md, "The RayCluster, in detail").
DATASET_ROLE = "roles/storage.objectViewer"
HEAD_POOL_NAME = "ray-head-pool"

# Beyond the obvious: Resource Manager looks up the project number; Artifact Registry and Cloud
# Build make the worker image; the Container File System API serves image streaming (GKE's image
# streaming page requires it, for Standard pools with imageStreaming and for Autopilot, which
# streams eligible images itself; gcloud warns when it is off).
REQUIRED_APIS = (
    "container.googleapis.com",
    "compute.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "containerfilesystem.googleapis.com",
)

# What GKE nodes themselves need (logs, metrics, pulling images, and streaming them: GKE's image
# streaming page asks a node account other than the default for the Service Usage Consumer role in
# the project that holds the images); pods get their own identity through Workload Identity, so
# the nodes' account holds nothing else.
NODE_SERVICE_ACCOUNT_ROLES = (
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
    "roles/artifactregistry.reader",
    "roles/serviceusage.serviceUsageConsumer",
)


@dataclass(frozen=True)
class Slot:
    """Where a nested value goes that exists only once another resource does; the component puts
    it there (`fill`). Pulumi refuses to serialize one left unfilled."""

    what: str


# The nodes' least-privilege service account, which the cluster's component creates.
NODE_SERVICE_ACCOUNT = Slot("the email of the nodes' service account")


def fill(args: Mapping[str, Any], slot: Slot, value: Any) -> dict[str, Any]:
    """A copy of `args` with `value` wherever `slot` stands, in nested dicts and lists too."""

    def filled(node: Any) -> Any:
        if node is slot:
            return value
        if isinstance(node, Mapping):
            return {key: filled(item) for key, item in node.items()}
        if isinstance(node, list):
            return [filled(item) for item in node]
        return node

    return filled(args)


def workload_pool(project: str) -> str:
    return f"{project}.svc.id.goog"


def workload_identity_principal(project_number: str, project: str, namespace: str, ksa: str) -> str:
    """The IAM principal of a Kubernetes service account under Workload Identity Federation."""
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{workload_pool(project)}/subject/ns/{namespace}/sa/{ksa}"
    )


def dcn_network_name(settings: StackSettings, index: int) -> str:
    """`<cluster>-net-1`, `<cluster>-net-2`, ... as the procedure names them (1-based)."""
    return resource_names.dcn_network_name(settings.cluster_name, index)


def dcn_network_args(settings: StackSettings, index: int) -> dict[str, Any]:
    return {
        "name": dcn_network_name(settings, index),
        "project": settings.project,
        "auto_create_subnetworks": False,
        "mtu": DCN_MTU,
        "routing_mode": "REGIONAL",
    }


def dcn_subnet_args(settings: StackSettings, index: int) -> dict[str, Any]:
    """The component adds its `network` (the network's id, known once the network exists)."""
    return {
        "name": f"tpu-subnet-{index + 1}",
        "project": settings.project,
        "region": settings.region,
        "ip_cidr_range": settings.dcn_subnets[index],
        "private_ip_google_access": True,
    }


def dcn_firewall_args(settings: StackSettings, index: int) -> dict[str, Any]:
    """New custom VPCs deny all ingress: without this rule slices cannot reach each other. The
    component adds its `network` (the network's id), as for the subnet."""
    return {
        "name": resource_names.dcn_firewall_name(settings.cluster_name, index),
        "project": settings.project,
        "direction": "INGRESS",
        "priority": 1000,
        "source_ranges": [settings.dcn_subnets[index]],
        "allows": [{"protocol": "tcp"}, {"protocol": "udp"}, {"protocol": "icmp"}],
        "description": "DCN traffic between TPU slices inside this network's subnet.",
    }


def project_service_args(settings: StackSettings, api: str) -> dict[str, Any]:
    # Never disable an API on destroy: other workloads in the project may depend on it.
    return {"project": settings.project, "service": api, "disable_on_destroy": False}


def node_service_account_args(settings: StackSettings) -> dict[str, Any]:
    return {
        "account_id": resource_names.node_service_account_id(settings.cluster_name),
        "project": settings.project,
        "display_name": f"GKE nodes of {settings.cluster_name} (logs, metrics, image pulls)",
    }


def cluster_args(settings: StackSettings) -> dict[str, Any]:
    """The GKE cluster with the procedure's settings, in Standard or Autopilot mode; on Autopilot
    with the NODE_SERVICE_ACCOUNT slot."""
    args: dict[str, Any] = {
        "name": settings.cluster_name,
        "project": settings.project,
        "location": settings.cluster_location,
        "network": settings.network,
        "min_master_version": settings.gke_version,
        "release_channel": {"channel": settings.release_channel},
        "deletion_protection": settings.deletion_protection,
        # Lets policies (and people) see which stack a cluster belongs to and whether it is a
        # production one, from the resource alone.
        "resource_labels": {
            "maxtext-tpu-stack": settings.stack,
            "environment": "production" if settings.production else "development",
        },
        "addons_config": {
            "ray_operator_configs": [{"enabled": True}],
            "gcs_fuse_csi_driver_config": {"enabled": True},
        },
        "ip_allocation_policy": {},
    }
    if settings.is_autopilot:
        # Autopilot always runs Dataplane V2 and Workload Identity and manages its own nodes;
        # the nodes it creates run as the least-privilege account.
        args["enable_autopilot"] = True
        args["cluster_autoscaling"] = {"auto_provisioning_defaults": {"service_account": NODE_SERVICE_ACCOUNT}}
        return args
    args.update(
        {
            "datapath_provider": "ADVANCED_DATAPATH",
            "workload_identity_config": {"workload_pool": workload_pool(settings.project)},
            # Pools are managed as their own resources; the default pool would be recreated with
            # the cluster on any change to it.
            "remove_default_node_pool": True,
            "initial_node_count": 1,
        }
    )
    return args


def _node_config(settings: StackSettings, service_account_email: Any, machine_type: str) -> dict[str, Any]:
    config = {
        "machine_type": machine_type,
        "service_account": service_account_email,
        "oauth_scopes": [CLOUD_PLATFORM_SCOPE],
        "workload_metadata_config": {"mode": "GKE_METADATA"},
        "gvnic": {"enabled": True},
        "shielded_instance_config": {"enable_secure_boot": True, "enable_integrity_monitoring": True},
    }
    if settings.streams_images:
        # Image streaming, on the node image it needs (gcloud's --enable-image-streaming, and
        # --image-type=COS_CONTAINERD, GKE's default, named so a change of default cannot drop it).
        config["gcfs_config"] = {"enabled": True}
        config["image_type"] = gke.STREAMING_NODE_IMAGE_TYPE
    return config


def image_cache_disks(settings: StackSettings) -> list[dict[str, Any]]:
    """The TPU nodes' secondary boot disk that holds the worker image (GKE's container image
    cache), from imageCacheDisk; none without it. Its settings check requires image streaming."""
    if settings.image_cache_disk is None:
        return []
    return [{"disk_image": settings.image_cache_disk, "mode": gke.SECONDARY_BOOT_DISK_MODE}]


def head_pool_args(settings: StackSettings) -> dict[str, Any]:
    """On-demand CPU nodes for the Ray head (the procedure's default pool, n1-standard-16), with
    the NODE_SERVICE_ACCOUNT slot; the component adds the `cluster` (its name, an output).

    Never Spot: losing the head ends the job and every worker's progress since the checkpoint.
    """
    node_config = _node_config(settings, NODE_SERVICE_ACCOUNT, settings.head_machine_type)
    node_config["spot"] = False
    return {
        "name": HEAD_POOL_NAME,
        "project": settings.project,
        "location": settings.zone,
        "node_count": 1,
        "node_config": node_config,
        "management": {"auto_repair": True, "auto_upgrade": True},
    }


def tpu_pool_name(settings: StackSettings, index: int) -> str:
    """`v6e-16-0`, `v6e-16-1`, ... as the procedure names them."""
    return resource_names.tpu_pool_name(settings.accelerator.slice_type(settings.topology), index)


# Flex-start TPU pools as GKE and xpk build them: nodes only through the autoscaler, from any zone
# that has capacity, never a reservation (docs/deploying.md; tests/test_gcloud_node_pool_requests.py).
FLEX_START_LOCATION_POLICY = "ANY"
FLEX_START_RESERVATION_AFFINITY = {"consume_reservation_type": "NO_RESERVATION"}


def tpu_pool_autoscales(settings: StackSettings, index: int) -> bool:
    """Pools 0 .. minSlices-1 hold their slice for the stack's life; the rest scale 0 <-> all VMs."""
    return index >= settings.min_slices


def tpu_pool_autoscaling(settings: StackSettings) -> dict[str, Any]:
    """GKE node-pool autoscaling for one whole slice: 0 or every VM of its topology.

    GKE creates and scales a multi-host TPU slice pool as one unit (docs/deploying.md, "How
    slices come and go"): any other bound would be a partial slice, billed and never ready. The `total_*` counts are the pool's, not
    per zone; the pool has one zone, so both read the same.
    """
    autoscaling: dict[str, Any] = {"total_min_node_count": 0, "total_max_node_count": settings.slice_shape.vms}
    if settings.flex_start:
        autoscaling["location_policy"] = FLEX_START_LOCATION_POLICY
    return autoscaling


def tpu_pool_args(
    settings: StackSettings,
    index: int,
    cluster_name: Any,
    service_account_email: Any,
    dcn_networks: list[tuple[Any, Any]],
) -> dict[str, Any]:
    """One multi-host TPU slice: its topology's VMs in a COMPACT placement, held or autoscaled.

    A pool kept up while idle (index < minSlices) has `node_count` = the slice's VMs
    (`node_count`, not `initial_node_count`, which forces replacement on any change). Any other
    pool autoscales from 0 to the slice's VMs and has no count of its own: pulumi-gcp (Terraform's
    expandNodePool) then creates it with `initialNodeCount` 0, as `gcloud ... --num-nodes=0`
    does, and a `node_count` beside autoscaling would resize the pool back on every update.
    `dcn_networks` are the (network, subnetwork) pairs to attach as extra NICs.
    """
    shape = settings.slice_shape
    node_config = _node_config(settings, service_account_email, shape.machine_type)
    node_config["advanced_machine_features"] = {"threads_per_core": 1}
    if settings.image_cache_disk is not None:
        node_config["secondary_boot_disks"] = image_cache_disks(settings)
    node_config["spot"] = settings.spot
    node_config["flex_start"] = settings.flex_start
    if settings.spot:
        # The kubelet's graceful shutdown on preemption, extended so the Ray workers can drain
        # and checkpoint (domain/ray/preemption.py); GKE takes these only on Spot node pools.
        node_config["kubelet_config"] = {
            "shutdown_grace_period_seconds": preemption.EXTENDED_SPOT_SHUTDOWN_SECONDS,
            "shutdown_grace_period_critical_pods_seconds": preemption.CRITICAL_PODS_SHUTDOWN_SECONDS,
        }
    if dcn_networks:
        node_config["labels"] = dict(DRANET_NODE_LABEL)
    if settings.uses_reservation:
        node_config["reservation_affinity"] = {
            "consume_reservation_type": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [settings.reservation],
        }
    elif settings.flex_start:
        node_config["reservation_affinity"] = dict(FLEX_START_RESERVATION_AFFINITY)
    args: dict[str, Any] = {
        "name": tpu_pool_name(settings, index),
        "project": settings.project,
        "cluster": cluster_name,
        "location": settings.zone,
        "node_locations": [settings.zone],
        "placement_policy": {"type": "COMPACT", "tpu_topology": settings.topology},
        "node_config": node_config,
        "management": {"auto_repair": not settings.flex_start, "auto_upgrade": True},
    }
    if tpu_pool_autoscales(settings, index):
        args["autoscaling"] = tpu_pool_autoscaling(settings)
    else:
        args["node_count"] = shape.vms
    if dcn_networks:
        args["network_config"] = {
            "additional_node_network_configs": [
                {"network": network, "subnetwork": subnetwork} for network, subnetwork in dcn_networks
            ]
        }
    return args


def compile_cache_lifecycle_rule(settings: StackSettings) -> dict[str, Any]:
    """Deletes the compilation cache's entries (objects under its prefix, and nothing else of the
    bucket) compileCacheMaxAgeDays after they were written: JAX never evicts a remote cache."""
    return {
        "action": {"type": "Delete"},
        "condition": {"age": settings.compile_cache_max_age_days, "matches_prefixes": [f"{COMPILE_CACHE_PREFIX}/"]},
    }


def bucket_args(settings: StackSettings) -> dict[str, Any]:
    args: dict[str, Any] = {
        "project": settings.project,
        "location": settings.region.upper(),
        "storage_class": "STANDARD",
        "uniform_bucket_level_access": True,
        "public_access_prevention": "enforced",
        "force_destroy": settings.bucket_force_destroy,
        "lifecycle_rules": [compile_cache_lifecycle_rule(settings)],
    }
    if settings.bucket_name:
        args["name"] = settings.bucket_name
    # Only when asked (it needs uniform access, set above): Cloud Storage fixes a bucket's namespace
    # when it creates it, so the provider replaces a bucket whose namespace changes.
    if settings.bucket_hierarchical_namespace:
        args["hierarchical_namespace"] = {"enabled": True}
    return args


def dataset_access_args(settings: StackSettings) -> dict[str, Any] | None:
    """The dataset bucket's read-only grant, for the Ray pods' principal (the component adds it as
    `member`); None without datasetBucket. A grant on an existing bucket: the stack never creates,
    changes or deletes the bucket, and removes only this grant on destroy."""
    if settings.dataset_bucket is None:
        return None
    return {"bucket": settings.dataset_bucket, "role": DATASET_ROLE}
